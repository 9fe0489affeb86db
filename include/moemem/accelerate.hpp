// Hugging Face accelerate's config file (--accelerate-config FILE.yaml, hf profile), as
// `accelerate config` writes it and `accelerate launch --config_file` reads it: the keys that
// decide training memory, for FSDP1 and FSDP2 (distributed_type FSDP, fsdp_config.fsdp_version). Keys
// that change memory and are not modelled are refused by name; keys that do not (launch,
// networking, checkpoint format) are accepted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "moemem/scenario.hpp"

namespace moemem {

struct AccelerateConfig {
  int fsdp_version = 2;                 // fsdp_config.fsdp_version (1 when the key is absent)
  bool reshard_after_forward = true;    // fsdp_config.fsdp_reshard_after_forward or fsdp_sharding_strategy
  bool activation_checkpointing = false;  // fsdp_config.fsdp_activation_checkpointing
  bool offload_params = false;            // fsdp_config.fsdp_offload_params (CPUOffloadPolicy)
  std::optional<std::int64_t> num_processes;  // all processes of the launch (every machine's)
};

// Parses a config's YAML text; `source` names the file in errors (InputError naming the key, e.g.
// "accelerate.yaml: fsdp_config.fsdp_offload_params"). Native build only (yaml-cpp).
[[nodiscard]] AccelerateConfig parse_accelerate_config(std::string_view yaml_text, const std::string& source);
// Reads and parses the file at `path`.
[[nodiscard]] AccelerateConfig read_accelerate_config(const std::string& path);

// Selects FSDP1 or FSDP2 through accelerate (FsdpSettings::accelerate_fsdp1/2) with the config's reshard
// policy and activation checkpointing (full recomputation, one decoder layer a checkpoint); a
// --recompute given as well must agree.
void apply_accelerate(const AccelerateConfig& a, TrainingRequest& r, const std::string& source);
// FSDP under the hf profile shards over every process: `ranks` (the layout's dp, or search's GPU
// count, named by `field`) must equal the config's num_processes where it gives one.
void check_accelerate_processes(const AccelerateConfig& a, std::int64_t ranks, const char* field, const std::string& source);

}  // namespace moemem
