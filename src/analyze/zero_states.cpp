// Megatron's state model: ZeRO stages (the distributed optimizer is ZeRO-1) over the dense and
// expert data-parallel groups, with Transformer Engine's FP8 weight copies.
#include <fmt/format.h>

#include "analyze/internal.hpp"

namespace moemem::detail {

namespace {

// Row- and column-wise FP8 copies of every FP8-GEMM weight, and their scales (none when the
// weights are quantized online per GEMM, as DeepSeek-V3 does).
Bytes fp8_weight_copies(const EvalContext& c, const StageReport& st) {
  const auto& t = c.t;
  if (t.fp8 == Fp8Recipe::none || t.fp8_online_weights) return Bytes{};
  const Count copies(checked_mul(st.fp8_weight_params.value(), 2, "fp8 weights"));
  const Count scales = t.fp8 == Fp8Recipe::blockwise ? Count(ceil_div(copies.value(), 128 * 128))
                       : t.fp8 == Fp8Recipe::mxfp8   ? fp8_scale_elements(copies, t.fp8)
                                                     : Count(2);
  return bytes_of(copies, DType::fp8) + bytes_of(scales, fp8_scale_dtype(t.fp8));
}

// Elements of an optimizer shard of `n` that --optimizer-cpu-offload moves to the host: the
// fraction rounded down (HybridDeviceOptimizer offloads whole parameters until the fraction is
// reached, so the GPU keeps at least the rest).
Count offloaded(Count n, double fraction) {
  if (fraction >= 1) return n;
  return Count(static_cast<std::uint64_t>(static_cast<double>(n.value()) * fraction));
}

// The optimizer states and the pinned gradient copy of the offloaded elements, in host memory
// (AdamW only: the profiles refuse offload with another optimizer).
Bytes offload_optimizer_bytes(Count n, const PrecisionRecipe& pr) {
  return bytes_of(n, pr.master) + bytes_of(n, pr.exp_avg) + bytes_of(n, pr.exp_avg_sq);
}

void record_offload(const char* group, Count off, const PrecisionRecipe& pr, double fraction, Ledger& ledger) {
  if (off.value() == 0) return;
  ledger.add(Category::host, offload_optimizer_bytes(off, pr) + bytes_of(off, pr.gradients), [&] {
    return ledger_item(group, "offloaded optimizer states + pinned gradients (CPU memory)",
                       fmt::format("{} of the shard ({} elements) x (master {} + moments {}/{} + gradient copy {})", fraction,
                                   off.value(), name_of(pr.master), name_of(pr.exp_avg), name_of(pr.exp_avg_sq),
                                   name_of(pr.gradients)),
                       off);
  });
}

// DeepSpeed's ZeRO-Offload (the hf profile's offload_optimizer, or --optimizer-cpu-offload with a
// bare --zero) keeps no gradient partition on the GPU: stage_1_and_2.py copies each reduced bucket
// into the pinned fp32 partition on the host (async_inplace_copy_grad_to_fp32_buffer_from_gpu),
// stage3.py allocates grad_partitions_flat_buffer on the offload device; what stays on the GPU is
// the IPG buckets and the staging buffer (hf_deepspeed.cpp). Megatron's HybridDeviceOptimizer
// keeps the DDP main_grad buffer on the GPU.
bool gradients_on_host(const EvalContext& c) {
  return c.profile.name == "hf" && c.t.zero >= 1 && c.t.optimizer_offload > 0 && !c.t.hf_ddp && !c.t.accelerate_fsdp();
}

// One ZeRO group's trainable counts on this rank: sharded over `group` from ZeRO stage 1.
OptimizerCounts optimizer_share(const OptimizerCounts& n, int zero, std::int64_t group) {
  return zero >= 1 ? n.sharded(group) : n;
}

// DeepSpeed's offload_param (hf profile, ZeRO-3): the weights' shards live in pinned host memory
// (stage3.py _create_param_groups_fp16_flat_cpu_memory) and are gathered to the GPU per module.
// The partitions of persistent parameters stay on the GPU (partition_parameters.py _partition_param:
// device = local_device for ds_persist), counted here on the host: at most their numel / dp.
bool param_offload(const TrainingConfig& t) { return t.zero >= 3 && t.deepspeed && t.deepspeed->offload_param; }

// The weights: a ZeRO-3 shard of every parameter, else the parameters by role.
void record_weights(const EvalContext& c, const StageReport& st, const std::int64_t groups[2], Ledger& ledger) {
  const auto& pr = c.t.precision;
  if (c.t.zero >= 3) {
    const char* names[2] = {"non-expert", "expert"};
    const char* over[2] = {"dp*cp", "edp"};
    const Count parts[2] = {st.params.non_expert, st.params.expert};
    for (int g = 0; g < 2; ++g) {
      const Count shard(ceil_div(parts[g].value(), static_cast<std::uint64_t>(groups[g])));
      ledger.add(param_offload(c.t) ? Category::host : Category::weights, bytes_of(shard, pr.weights), [&] {
        return ledger_item(names[g], param_offload(c.t) ? "ZeRO-3 shard (offload_param, CPU memory)" : "ZeRO-3 shard",
                           fmt::format("ceil({} / {} {}) x {}", parts[g].value(), over[g], groups[g], name_of(pr.weights)),
                           shard, pr.weights);
      });
    }
  } else {
    record_weights_by_role(c, st, ledger);
  }
  if (st.fp8_weight_copies.value() > 0) {
    ledger.add(Category::weights, st.fp8_weight_copies, [&] {
      return ledger_item("fp8", "FP8 weight copies",
                         fmt::format("2 x {} FP8-GEMM parameters (row- and column-wise) + scales, {}",
                                     st.fp8_weight_params.value(), name_of(c.t.fp8)),
                         st.fp8_weight_params, DType::fp8, 2);
    });
  }
}

// ZeRO: stage 1 shards the optimizer states, 2 also the gradients, 3 also the weights; the
// non-expert part over dp*cp, the expert part over edp (the worst rank holds the ceiling).
// Gradients and optimizer states cover the trainable parameters only: Megatron's DDP allocates
// main_grad buffers for parameters with requires_grad only (distributed_data_parallel.py, "if not
// param.requires_grad: continue"), and the optimizer's groups hold only those.
void record_zero(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  const auto& p = c.layout.config;
  const auto& t = c.t;
  const auto& pr = t.precision;
  const std::int64_t groups[2] = {p.dp * p.cp, c.layout.edp};
  const OptimizerCounts* parts[2] = {&st.trainable.non_expert, &st.trainable.expert};
  if (!ledger.detail()) {
    // Totals only (search): the same states as the items below, summed by state_bytes.
    const StateBytes sb = state_bytes(st.params, st.trainable, groups[0], groups[1], t.zero, pr, t.finetuning());
    const auto none = [] { return LedgerItem{}; };
    Bytes states, grads;  // offloaded to the host
    for (int g = 0; g < 2 && t.optimizer_offload > 0; ++g) {
      const Count off = offloaded(optimizer_share(*parts[g], t.zero, groups[g]).params, t.optimizer_offload);
      states += offload_optimizer_bytes(off, pr);
      grads += bytes_of(off, pr.gradients);
    }
    // QLoRA (below ZeRO-3, which the hf profile refuses with it): the NF4 part in its own bytes.
    const Bytes weights = Bytes(sb.weights.value() - bytes_of(st.nf4_params, pr.weights).value()) + st.nf4_bytes;
    ledger.add(param_offload(t) ? Category::host : Category::weights, weights, none);
    ledger.add(Category::weights, st.fp8_weight_copies, none);
    if (!gradients_on_host(c)) ledger.add(Category::gradients, sb.gradients, none);
    ledger.add(Category::optimizer, Bytes(sb.optimizer.value() - states.value()), none);  // states <= optimizer
    if (states.value() > 0) ledger.add(Category::host, states + grads, none);
    return;
  }
  record_weights(c, st, groups, ledger);
  const char* group_names[2] = {"non-expert (dp*cp)", "expert (edp)"};
  for (int g = 0; g < 2; ++g) {
    const Count n = parts[g]->params;
    const auto shard_text = [&](Count whole) { return fmt::format("ceil({} / {})", whole.value(), groups[g]); };
    const Count gc = t.zero >= 2 ? Count(ceil_div(n.value(), static_cast<std::uint64_t>(groups[g]))) : n;
    const std::string gtext = t.zero >= 2 ? shard_text(n) : std::to_string(n.value());
    if (!gradients_on_host(c)) {
      ledger.add(Category::gradients, bytes_of(gc, pr.gradients), [&] {
        return ledger_item(group_names[g], "main gradients", fmt::format("{} x {}", gtext, name_of(pr.gradients)), gc, pr.gradients);
      });
    }
    const OptimizerCounts share = optimizer_share(*parts[g], t.zero, groups[g]);
    const Count off = offloaded(share.params, t.optimizer_offload);
    const auto whole = optimizer_states(t.finetuning(), pr, *parts[g]);
    const auto states = optimizer_states(t.finetuning(), pr, share);
    for (std::size_t i = 0; i < states.size(); ++i) {
      const auto& state = states[i];
      // Offload moves whole AdamW states (master and moments) by the same elements.
      const bool moved = state.elements == share.params;
      const Count kept = moved ? Count(state.elements.value() - off.value()) : state.elements;
      ledger.add(Category::optimizer, bytes_of(kept, state.dtype), [&] {
        std::string count = t.zero >= 1 ? shard_text(whole[i].elements) : std::to_string(whole[i].elements.value());
        if (moved && off.value() > 0) count = fmt::format("{} - {} offloaded", count, off.value());
        return ledger_item(group_names[g], std::string(state.name), fmt::format("{} x {}", count, name_of(state.dtype)), kept, state.dtype);
      });
    }
    record_offload(group_names[g], off, pr, t.optimizer_offload, ledger);
  }
}

bool zero_cost(const EvalContext& c, StageReport& st, Bytes) {
  st.fp8_weight_copies = fp8_weight_copies(c, st);
  return false;  // backward, with the activations, is the peak
}

// The allocator's reserve beyond what is allocated, as one item (the loss block it keeps included).
void zero_record_cache(const EvalContext&, const StageReport& st, Bytes pct, Ledger& ledger) {
  const Bytes all = pct + st.loss.cached;
  if (all.value() > 0) {
    ledger.add(Category::fragmentation, all,
               [] { return ledger_item("allocator", "reserved - allocated", "percentage of allocated bytes"); });
  }
}

}  // namespace

const StateModel kZeroStates{
    .prepare = nullptr,  // nothing beyond the stage's parameters
    .cost = zero_cost,
    .record = record_zero,
    .record_cache = zero_record_cache,
};

}  // namespace moemem::detail
