#include "moemem/optimizer.hpp"

namespace moemem {

Count zero_shard(ParamSplit p, std::int64_t dense_group, std::int64_t expert_group) {
  return Count(ceil_div(p.non_expert.value(), static_cast<std::uint64_t>(dense_group))) +
         Count(ceil_div(p.expert.value(), static_cast<std::uint64_t>(expert_group)));
}

StateBytes state_bytes(ParamSplit p, std::int64_t dense_group, std::int64_t expert_group, int zero,
                       const PrecisionRecipe& r) {
  const Count full = p.non_expert + p.expert;
  const Count shard = zero_shard(p, dense_group, expert_group);
  const Count w = zero >= 3 ? shard : full;
  const Count g = zero >= 2 ? shard : full;
  const Count o = zero >= 1 ? shard : full;
  return StateBytes{
      bytes_of(w, r.weights),
      bytes_of(g, r.gradients),
      bytes_of(o, r.master) + bytes_of(o, r.exp_avg) + bytes_of(o, r.exp_avg_sq),
  };
}

}  // namespace moemem
