// How many elements of a parameter tensor one device holds. Non-expert tensors are split over
// the tensor-parallel group as the profile says; routed-expert tensors are spread over the
// expert-parallel group (whole experts) and each expert split over the expert-tensor-parallel
// group. Uneven splits give the lower ranks one more row: shards always add up to the tensor.
// Profiles (profile.hpp) choose a TpSplit and a ZeroGroup per tensor role; this header does not
// depend on them.
#pragma once

#include <cstdint>

#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"

namespace moemem {

struct Profile;  // profile.hpp

// How tensor parallelism splits a (non-routed-expert) tensor.
enum class TpSplit : std::uint8_t {
  replicated,  // whole on every TP rank
  column,      // output features (rows) split over tp
  row,         // input features (cols) split over tp
  vocab,       // vocabulary rows split over tp
};

// The data-parallel group over which ZeRO shards a tensor's states.
enum class ZeroGroup : std::uint8_t { dense, expert };

struct ShardCoord {
  std::int64_t tp_rank = 0;
  std::int64_t ep_rank = 0;
  std::int64_t etp_rank = 0;
};

// Elements of `t` on the device at `at`. Vocabulary-split tensors use `vocab_rows` rows when it
// is larger than the tensor's (the padded vocabulary of frameworks that pad).
[[nodiscard]] Count shard_params(const Tensor& t, TpSplit split, const ParallelConfig& p, ShardCoord at,
                                 std::int64_t vocab_rows = 0);

// Elements of `t` on the most loaded device (rank 0 of each group holds the largest shard), split
// as `profile.tp_split` says.
[[nodiscard]] Count device_params(const Tensor& t, const Profile& profile, const ParallelConfig& p,
                                  std::int64_t vocab_rows = 0);

// The shape of the most loaded device's shard of `t` (rows, cols and the experts it holds): its
// elements are device_params(t, ...). LoRA's B of a row-parallel linear is split by rows
// (Megatron-Bridge's ParallelLinearAdapter: linear_out is a ColumnParallelLinear).
struct ShardShape {
  std::int64_t rows = 0, cols = 0, copies = 0;
};
[[nodiscard]] ShardShape device_shape(const Tensor& t, const Profile& profile, const ParallelConfig& p,
                                      std::int64_t vocab_rows = 0);

}  // namespace moemem
