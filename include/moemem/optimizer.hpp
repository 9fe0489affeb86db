// Weights, gradients and optimizer states per device: the dtype recipe (bytes of each state)
// and ZeRO sharding. ZeRO shards the non-expert parameters of a stage over dp*cp and the expert
// parameters over the expert data-parallel group edp; a shard is rounded up to whole elements
// (the worst rank of a group holds the ceiling).
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "moemem/dtype.hpp"
#include "moemem/finetune.hpp"
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

// A device's trainable elements of one ZeRO group as the optimizers see them.
struct OptimizerCounts {
  Count params;    // every trainable element (gradients, master weights, Adam's moments)
  Count matrices;  // Muon's: 2-D tensors but the embedding and output head (Megatron's
                   // emerging_optimizers.py _is_muon_excluded); the rest goes to AdamW
  Count factors;   // Adafactor's second moment: rows + cols of each 2-D tensor, every element of a 1-D one
  Count blocks;    // bitsandbytes' 256-element blocks of the tensors whose states are 8-bit
  Count small;     // elements of tensors below bitsandbytes' min_8bit_size (4096), whose states stay fp32
  // Inline: every stage of every layout a search costs sums these per tensor group.
  OptimizerCounts& operator+=(const OptimizerCounts& o) {
    params += o.params;
    matrices += o.matrices;
    factors += o.factors;
    blocks += o.blocks;
    small += o.small;
    return *this;
  }
  [[nodiscard]] OptimizerCounts times(std::uint64_t n) const {
    if (n == 1) return *this;
    const auto mul = [n](Count c) { return Count(checked_mul(c.value(), n, "parameters")); };
    return {mul(params), mul(matrices), mul(factors), mul(blocks), mul(small)};
  }
  // Each count over `group` ranks, rounded up (ZeRO's shard of the worst rank).
  [[nodiscard]] OptimizerCounts sharded(std::int64_t group) const;
};
struct TrainableSplit {
  OptimizerCounts non_expert, expert;  // ZeRO over dp*cp, and over edp
};

// One optimizer state of a device: its name, elements and dtype.
struct OptimizerState {
  std::string_view name;
  Count elements;
  DType dtype{};
  std::string_view source;  // where the framework keeps it
};
// The states `s.optimizer` keeps for `n` (a device's share): the master weights (r.master) and
// adamw: exp_avg, exp_avg_sq (r's dtypes); sgd: a momentum buffer unless the momentum is 0; lion:
// one momentum; muon: a momentum for `matrices`, AdamW's moments for the rest; adam8bit: two
// 8-bit states, an fp32 absmax per 256-element block for each (fp32 states for small tensors);
// adafactor: the factored second moment, no first moment (beta1 None).
// At most five states; held inline so that the totals path (search) allocates nothing.
class OptimizerStates {
 public:
  void push_back(const OptimizerState& s) { items_[count_++] = s; }
  [[nodiscard]] std::size_t size() const { return count_; }
  [[nodiscard]] const OptimizerState& operator[](std::size_t i) const { return items_[i]; }
  [[nodiscard]] const OptimizerState* begin() const { return items_.data(); }
  [[nodiscard]] const OptimizerState* end() const { return items_.data() + count_; }

 private:
  std::array<OptimizerState, 5> items_{};
  std::size_t count_ = 0;
};
[[nodiscard]] OptimizerStates optimizer_states(const FinetuneSettings& s, const PrecisionRecipe& r, const OptimizerCounts& n);
[[nodiscard]] Bytes optimizer_bytes(const FinetuneSettings& s, const PrecisionRecipe& r, const OptimizerCounts& n);

// Elements one rank keeps of a ZeRO-sharded state: ceil(non_expert/dense_group) +
// ceil(expert/expert_group).
[[nodiscard]] Count zero_shard(ParamSplit p, std::int64_t dense_group, std::int64_t expert_group);

// Weights, gradients and optimizer states of one device for ZeRO stage `zero` (0 to 3):
// stage 1 shards optimizer states, 2 also gradients, 3 also weights. Weights count every
// parameter `p`; gradients and optimizer states only the trainable ones, `train`.
[[nodiscard]] StateBytes state_bytes(ParamSplit p, const TrainableSplit& train, std::int64_t dense_group,
                                     std::int64_t expert_group, int zero, const PrecisionRecipe& r,
                                     const FinetuneSettings& f);

}  // namespace moemem
