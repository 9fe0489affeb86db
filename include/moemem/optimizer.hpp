// Weights, gradients and optimizer states per device: the dtype recipe (bytes of each state)
// and ZeRO sharding. ZeRO shards the non-expert parameters of a stage over dp*cp and the expert
// parameters over the expert data-parallel group edp; a shard is rounded up to whole elements
// (the worst rank of a group holds the ceiling).
#pragma once

#include <compare>
#include <cstdint>

#include "moemem/dtype.hpp"
#include "moemem/units.hpp"

namespace moemem {

struct PrecisionRecipe {
  DType weights = DType::bf16;     // working copy used in forward/backward
  DType gradients = DType::fp32;   // main gradients
  DType master = DType::fp32;      // master copy of the weights kept by the optimizer
  DType exp_avg = DType::bf16;     // Adam first moment
  DType exp_avg_sq = DType::bf16;  // Adam second moment
  auto operator<=>(const PrecisionRecipe&) const = default;
};

struct ParamSplit {
  Count non_expert;  // sharded by ZeRO over the dense group (dp*cp)
  Count expert;      // sharded by ZeRO over the expert data-parallel group (edp)
};

struct StateBytes {
  Bytes weights, gradients, optimizer;
};

// Elements one rank keeps of a ZeRO-sharded state: ceil(non_expert/dense_group) +
// ceil(expert/expert_group).
[[nodiscard]] Count zero_shard(ParamSplit p, std::int64_t dense_group, std::int64_t expert_group);

// Weights, gradients and optimizer states of one device for ZeRO stage `zero` (0 to 3):
// stage 1 shards optimizer states, 2 also gradients, 3 also weights.
[[nodiscard]] StateBytes state_bytes(ParamSplit p, std::int64_t dense_group, std::int64_t expert_group, int zero,
                                     const PrecisionRecipe& r);

}  // namespace moemem
