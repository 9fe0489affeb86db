#include "moemem/optimizer.hpp"

namespace moemem {

OptimizerCounts OptimizerCounts::sharded(std::int64_t group) const {
  const auto k = static_cast<std::uint64_t>(group);
  const auto div = [k](Count c) { return Count(ceil_div(c.value(), k)); };
  return {div(params), div(matrices), div(factors), div(blocks), div(small)};
}

namespace {

Count twice(Count c) { return Count(checked_mul(c.value(), 2, "optimizer states")); }

// Calls out(state) for each state `s.optimizer` keeps for `n`: the one list both the itemised
// states (optimizer_states) and the totals (optimizer_bytes, search's path, no list built) read.
template <class Out>
void each_optimizer_state(const FinetuneSettings& s, const PrecisionRecipe& r, const OptimizerCounts& n, Out&& out) {
  // Master weights: Megatron's distributed optimizer keeps an fp32 copy of each trainable
  // parameter (distrib_optimizer.py, shard_fp32_from_float16_groups), whichever the optimizer.
  out(OptimizerState{"master weights", n.params, r.master, "distrib_optimizer.py fp32 main params"});
  const Count rest(n.params.value() - n.matrices.value());
  switch (s.optimizer) {
    case OptimizerKind::adamw:
      out(OptimizerState{"exp_avg", n.params, r.exp_avg, "Adam's first moment"});
      out(OptimizerState{"exp_avg_sq", n.params, r.exp_avg_sq, "Adam's second moment"});
      break;
    case OptimizerKind::sgd:
      // torch.optim.SGD creates state["momentum_buffer"] only when momentum != 0 (Megatron's
      // --sgd-momentum, default 0.9; megatron/core/optimizer/__init__.py builds FusedSGD with it).
      if (s.sgd_momentum != 0) out(OptimizerState{"momentum_buffer", n.params, DType::fp32, "SGD momentum (fp32, as the main params)"});
      break;
    case OptimizerKind::lion:
      // Lion (Chen et al. 2023, Algorithm 2) keeps one momentum; emerging_optimizers' Lion calls it
      // exp_avg, in the dtype of the fp32 main params.
      out(OptimizerState{"exp_avg", n.params, DType::fp32, "Lion momentum (fp32)"});
      break;
    case OptimizerKind::muon:
      // Moonlight (Liu et al. 2025, §2): Muon keeps one momentum per matrix; Megatron's
      // emerging optimizer hands every other parameter to Adam (emerging_optimizers.py).
      out(OptimizerState{"momentum_buffer (Muon matrices)", n.matrices, DType::fp32, "Muon momentum (fp32)"});
      out(OptimizerState{"exp_avg (AdamW part)", rest, r.exp_avg, "Adam's first moment"});
      out(OptimizerState{"exp_avg_sq (AdamW part)", rest, r.exp_avg_sq, "Adam's second moment"});
      break;
    case OptimizerKind::adam8bit: {
      // bitsandbytes optim/optimizer.py Optimizer2State.init_state: state1/state2 uint8 with an
      // fp32 absmax per 256-element block each (block_wise), fp32 states below min_8bit_size.
      const Count eight(n.params.value() - n.small.value());
      out(OptimizerState{"state1 (8-bit exp_avg)", eight, DType::int8, "bitsandbytes uint8 state"});
      out(OptimizerState{"state2 (8-bit exp_avg_sq)", eight, DType::int8, "bitsandbytes uint8 state"});
      out(OptimizerState{"absmax1 + absmax2 (per 256-element block)", twice(n.blocks), DType::fp32, "bitsandbytes block scales"});
      out(OptimizerState{"state1 + state2 (fp32, tensors < 4096 elements)", twice(n.small), DType::fp32, "bitsandbytes min_8bit_size"});
      break;
    }
    case OptimizerKind::adafactor:
      // transformers optimization.py Adafactor (as fairseq's): beta1 None by default, so no first
      // moment; exp_avg_sq_row + exp_avg_sq_col for a 2-D tensor, exp_avg_sq for a 1-D one.
      out(OptimizerState{"exp_avg_sq (row + column of a matrix, whole for a vector)", n.factors, DType::fp32,
                         "Adafactor second moment"});
      break;
  }
}

}  // namespace

OptimizerStates optimizer_states(const FinetuneSettings& s, const PrecisionRecipe& r, const OptimizerCounts& n) {
  OptimizerStates states;
  each_optimizer_state(s, r, n, [&](const OptimizerState& st) { states.push_back(st); });
  return states;
}

Bytes optimizer_bytes(const FinetuneSettings& s, const PrecisionRecipe& r, const OptimizerCounts& n) {
  Bytes b;
  each_optimizer_state(s, r, n, [&](const OptimizerState& st) { b += bytes_of(st.elements, st.dtype); });
  return b;
}

Count zero_shard(ParamSplit p, std::int64_t dense_group, std::int64_t expert_group) {
  return Count(ceil_div(p.non_expert.value(), static_cast<std::uint64_t>(dense_group))) +
         Count(ceil_div(p.expert.value(), static_cast<std::uint64_t>(expert_group)));
}

StateBytes state_bytes(ParamSplit p, const TrainableSplit& train, std::int64_t dense_group, std::int64_t expert_group,
                       int zero, const PrecisionRecipe& r, const FinetuneSettings& f) {
  const Count w = zero >= 3 ? zero_shard(p, dense_group, expert_group) : p.non_expert + p.expert;
  const OptimizerCounts ne = zero >= 1 ? train.non_expert.sharded(dense_group) : train.non_expert;
  const OptimizerCounts ex = zero >= 1 ? train.expert.sharded(expert_group) : train.expert;
  const ParamSplit g{train.non_expert.params, train.expert.params};
  const Count gc = zero >= 2 ? zero_shard(g, dense_group, expert_group) : g.non_expert + g.expert;
  return StateBytes{bytes_of(w, r.weights), bytes_of(gc, r.gradients), optimizer_bytes(f, r, ne) + optimizer_bytes(f, r, ex)};
}

}  // namespace moemem
