// How many elements of a parameter tensor one device holds. Non-expert tensors are split over
// the tensor-parallel group as the profile says; routed-expert tensors are spread over the
// expert-parallel group (whole experts) and each expert split over the expert-tensor-parallel
// group. Uneven splits give the lower ranks one more row: shards always add up to the tensor.
#pragma once

#include <cstdint>

#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"

namespace moemem {

struct ShardCoord {
  std::int64_t tp_rank = 0;
  std::int64_t ep_rank = 0;
  std::int64_t etp_rank = 0;
};

// Elements of `t` on the device at `at`. Vocabulary-split tensors use `vocab_rows` rows when it
// is larger than the tensor's (the padded vocabulary of frameworks that pad).
[[nodiscard]] Count shard_params(const Tensor& t, TpSplit split, const ParallelConfig& p, ShardCoord at,
                                 std::int64_t vocab_rows = 0);

// Elements of `t` on the most loaded device (rank 0 of each group holds the largest shard).
[[nodiscard]] Count device_params(const Tensor& t, const Profile& profile, const ParallelConfig& p,
                                  std::int64_t vocab_rows = 0);

}  // namespace moemem
