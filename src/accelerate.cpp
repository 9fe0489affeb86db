// What an accelerate config sets in the training request (include/moemem/accelerate.hpp). The
// YAML itself is read in accelerate_yaml.cpp (native build only).
#include "moemem/accelerate.hpp"

#include <fmt/format.h>

#include "moemem/errors.hpp"

namespace moemem {

void check_accelerate_processes(const AccelerateConfig& a, std::int64_t ranks, const char* field, const std::string& source) {
  if (a.num_processes && ranks != *a.num_processes) {
    throw InputError(field, std::to_string(ranks),
                     fmt::format("the accelerate config's num_processes ({}, {}): FSDP shards over every process",
                                 *a.num_processes, source));
  }
}

void apply_accelerate(const AccelerateConfig& a, TrainingRequest& r, const std::string& source) {
  if (a.fsdp_version == 1 && r.fsdp.accelerate_fsdp2) {
    throw InputError("--fsdp2", "set", fmt::format("no --fsdp2, or an fsdp_version 2 config ({} is FSDP1)", source));
  }
  if (a.fsdp_version == 2 && r.fsdp.accelerate_fsdp1) {
    throw InputError("--fsdp1", "set", fmt::format("no --fsdp1, or an fsdp_version 1 config ({} is FSDP2)", source));
  }
  (a.fsdp_version == 1 ? r.fsdp.accelerate_fsdp1 : r.fsdp.accelerate_fsdp2) = true;
  // accelerate's fsdp_reshard_after_forward: True reshards every unit but the tail (the policy
  // moemem calls default; always is the same under the hf profile), False keeps every layer gathered.
  // FSDP1's FULL_SHARD and SHARD_GRAD_OP are the same two.
  const ReshardPolicy policy = a.reshard_after_forward ? ReshardPolicy::standard : ReshardPolicy::never;
  if (r.fsdp.reshard != ReshardPolicy::standard && (r.fsdp.reshard == ReshardPolicy::never) != !a.reshard_after_forward) {
    throw InputError("--reshard-after-forward", std::string(name_of(r.fsdp.reshard)),
                     fmt::format("no --reshard-after-forward, or {} ({} sets fsdp_reshard_after_forward {})",
                                 a.reshard_after_forward ? "always" : "never", source, a.reshard_after_forward));
  }
  r.fsdp.reshard = policy;
  r.fsdp.fsdp_offload_params = r.fsdp.fsdp_offload_params || a.offload_params;
  if (a.activation_checkpointing) {
    // fsdp_activation_checkpointing wraps each decoder layer in checkpoint_wrapper
    // (utils/fsdp_utils.py fsdp2_apply_ac): each layer keeps its input, as gradient_checkpointing.
    if (r.recompute && *r.recompute != Recompute::full) {
      throw InputError("--recompute", std::string(name_of(*r.recompute)),
                       fmt::format("full, or no --recompute ({} sets fsdp_activation_checkpointing)", source));
    }
    r.recompute = Recompute::full;
  }
}

}  // namespace moemem
