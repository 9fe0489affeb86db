// Megatron's activation offloading to the host (--cpu-offloading-num-layers): the settings Megatron
// accepts with it. The bytes are src/analyze/activations.cpp's (cpu_offload).
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

}  // namespace moemem::profiles
