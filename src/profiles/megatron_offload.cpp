// Megatron's activation offloading to the host (--cpu-offloading-num-layers), the EP all-to-all
// overlap and userbuffers: the settings Megatron accepts with each. The offload's bytes are
// src/analyze/activations.cpp's (cpu_offload).
#include <fmt/format.h>

#include "profiles/shared.hpp"

namespace moemem::profiles {

// Megatron-LM d98e8a64 megatron/core/transformer/transformer_config.py __post_init__: the offloaded
// layers must be fewer than the model's; no pipeline parallelism; no recomputation; no CUDA graphs
// but whole-iteration ones (refused by moemem anyway). arguments.py turns cpu_offloading on when
// --cpu-offloading-num-layers > 0.
std::optional<InputError> cpu_offload_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t) {
  const std::int64_t n = t.cpu_offload_layers;
  if (n == 0) return std::nullopt;
  const std::string flag = "--cpu-offloading-num-layers", value = std::to_string(n);
  if (n >= m.num_layers) {
    return InputError(flag, value, fmt::format("fewer than the model's {} decoder layers (Megatron's rule)", m.num_layers));
  }
  if (layout.config.pp > 1) {
    return InputError(flag, value, fmt::format("pp 1 (Megatron has no pipeline parallelism with CPU offloading; pp is {})",
                                               layout.config.pp));
  }
  if (t.recompute != Recompute::none) {
    return InputError(flag, value, "no recomputation (Megatron: CPU offloading does not work with activation recomputation)");
  }
  if (t.cuda_graphs.impl != CudaGraphImpl::none) {
    return InputError(flag, value, "no --cuda-graph-impl (Megatron: CUDA graphs are not supported with CPU offloading)");
  }
  return std::nullopt;
}

// --overlap-moe-expert-parallel-comm where Megatron-Core accepts it (Megatron-LM d98e8a64,
// transformer_config.py TransformerConfig.__post_init__, the overlap_moe_expert_parallel_comm
// block): expert parallelism, the all-to-all or flex dispatcher, a virtual pipeline when pp > 1, no
// "moe" in the recomputed modules, no shared-expert overlap, at most one MTP layer, BF16 or FP16
// weights. Full recomputation is refused there on main; Megatron-LM PR 6429 (37f1af1036, "Recompute
// EP A2A overlap activations per layer segment") recomputes each segment of layers as without the
// overlap, and needs both dropouts at 0. moemem models that PR.
std::optional<InputError> ep_overlap_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t) {
  if (!t.ep_overlap) return std::nullopt;
  const auto& p = layout.config;
  const std::string flag = "--overlap-moe-expert-parallel-comm";
  if (p.ep <= 1) return InputError(flag, "set", "expert parallelism (--ep > 1)");
  if (p.pp > 1 && p.schedule != Schedule::interleaved) {
    return InputError(flag, fmt::format("pp {} with schedule {}", p.pp, name_of(p.schedule)),
                     "a virtual pipeline (--vpp > 1, interleaved schedule) when pp > 1");
  }
  if (t.recompute == Recompute::selective && (t.recompute_modules & kRecomputeMoe) != 0) {
    return InputError("--recompute-modules", "moe", fmt::format("no moe module with {}", flag));
  }
  if (t.shared_expert_overlap) return InputError("--moe-shared-expert-overlap", "set", fmt::format("not together with {}", flag));
  if (m.mtp_layers > 1) return InputError(flag, fmt::format("{} MTP layers", m.mtp_layers), "at most one MTP layer");
  if (t.precision.weights != DType::bf16 && t.precision.weights != DType::fp16) {
    return InputError(flag, std::string(name_of(t.precision.weights)), "bf16 or fp16 weights");
  }
  if (t.recompute == Recompute::full && (t.hidden_dropout > 0 || t.attention_dropout > 0)) {
    return InputError("--hidden-dropout/--attention-dropout", fmt::format("{}/{}", t.hidden_dropout, t.attention_dropout),
                     fmt::format("0 with full recomputation and {} (PR 6429 cannot replay dropout)", flag));
  }
  return std::nullopt;
}

// --tp-comm-overlap: megatron/training/arguments.py validate_args turns sequence parallelism off at
// tp 1 and then asserts it is on. --delay-wgrad-compute: transformer_config.py __post_init__
// asserts overlap_moe_expert_parallel_comm.
std::optional<InputError> userbuffers_check(const Layout& layout, const TrainingConfig& t) {
  if (t.tp_comm_overlap && (layout.config.tp <= 1 || !layout.config.sp)) {
    return InputError("--tp-comm-overlap", fmt::format("tp {}, sp {}", layout.config.tp, layout.config.sp ? "on" : "off"),
                      "tp > 1 with sequence parallelism (--sp), as Megatron asserts");
  }
  if (t.delay_wgrad && !t.ep_overlap) {
    return InputError("--delay-wgrad-compute", "set", "--overlap-moe-expert-parallel-comm too (Megatron asserts it)");
  }
  return std::nullopt;
}

}  // namespace moemem::profiles
