// accelerate's YAML config (include/moemem/accelerate.hpp), read with yaml-cpp; native build only
// (the web build's stand-in is in web_yaml.cpp). Keys as huggingface/accelerate writes them
// (commands/config/config_args.py ClusterConfig, commands/config/cluster.py fsdp_config).
#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include "moemem/accelerate.hpp"
#include "moemem/errors.hpp"

namespace moemem {

namespace {

// Top-level keys that do not change a GPU's training memory: the launch, networking, TPU and
// SageMaker settings.
constexpr std::array kLaunchKeys{
    "compute_environment", "debug", "downcast_bf16", "enable_cpu_affinity", "machine_rank", "main_training_function",
    "num_machines", "gpu_ids", "main_process_ip", "main_process_port", "rdzv_backend", "same_network", "use_cpu",
    "tpu_name", "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "tpu_env", "tpu_vm", "command_file", "commands"};
// fsdp_config keys that do not change it: wrapping by the model's decoder-layer class, how
// checkpoints are loaded and saved, FSDP1-only prefetch (two layers gathered in backward are counted
// whatever the prefetch: limit_all_gathers allows two in flight) and parameter-view settings.
constexpr std::array kFsdpQuietKeys{"fsdp_transformer_layer_cls_to_wrap", "fsdp_cpu_ram_efficient_loading",
                                     "fsdp_state_dict_type", "fsdp_sync_module_states", "fsdp_use_orig_params",
                                     "fsdp_backward_prefetch", "fsdp_forward_prefetch"};

template <std::size_t N>
bool listed(const std::array<const char*, N>& keys, const std::string& k) {
  return std::any_of(keys.begin(), keys.end(), [&](const char* x) { return k == x; });
}

std::string scalar(const YAML::Node& v) { return v.IsScalar() ? v.Scalar() : std::string(); }

bool yaml_bool(const YAML::Node& v, const std::string& field) {
  try {
    if (v.IsScalar()) return v.as<bool>();
  } catch (const YAML::Exception&) {
  }
  throw InputError(field, v.IsScalar() ? v.Scalar() : "not a scalar", "true or false");
}

// fsdp_sharding_strategy (FSDP1's; accelerate also takes its names for fsdp_reshard_after_forward,
// utils/dataclasses.py): by name or by ShardingStrategy's number.
bool reshard_of_strategy(const YAML::Node& v, const std::string& field) {
  const std::string s = scalar(v);
  if (s == "FULL_SHARD" || s == "1") return true;
  if (s == "SHARD_GRAD_OP" || s == "2") return false;
  throw InputError(field, s.empty() ? "not a scalar" : s,
                   "FULL_SHARD (1) or SHARD_GRAD_OP (2); NO_SHARD and the HYBRID_SHARD strategies are not modelled");
}

void read_fsdp(const YAML::Node& f, const std::string& source, AccelerateConfig& out) {
  if (!f.IsMap()) throw InputError(source + ": fsdp_config", "not a mapping", "a mapping of fsdp_* keys");
  // accelerate's default when the key is absent is FSDP1 (FullyShardedDataParallelPlugin).
  const std::string version = f["fsdp_version"] ? scalar(f["fsdp_version"]) : "1";
  if (version != "1" && version != "2") {
    throw InputError(source + ": fsdp_config.fsdp_version", version, "1 (FSDP1, the default when absent) or 2 (FSDP2)");
  }
  out.fsdp_version = version == "1" ? 1 : 2;
  for (const auto& kv : f) {
    const std::string k = kv.first.Scalar();
    const std::string field = fmt::format("{}: fsdp_config.{}", source, k);
    if (k == "fsdp_version" || listed(kFsdpQuietKeys, k)) continue;
    if (k == "fsdp_reshard_after_forward") {
      // FSDP2 takes a bool; accelerate also maps the FSDP1 strategy names (utils/dataclasses.py).
      const std::string s = scalar(kv.second);
      if (s == "true" || s == "false" || s == "True" || s == "False") out.reshard_after_forward = yaml_bool(kv.second, field);
      else out.reshard_after_forward = reshard_of_strategy(kv.second, field);
    } else if (k == "fsdp_sharding_strategy") {
      out.reshard_after_forward = reshard_of_strategy(kv.second, field);
    } else if (k == "fsdp_activation_checkpointing") {
      out.activation_checkpointing = yaml_bool(kv.second, field);
    } else if (k == "fsdp_offload_params") {
      out.offload_params = yaml_bool(kv.second, field);
    } else if (k == "fsdp_auto_wrap_policy") {
      if (scalar(kv.second) != "TRANSFORMER_BASED_WRAP") {
        throw InputError(field, scalar(kv.second), "TRANSFORMER_BASED_WRAP (one unit per decoder layer)");
      }
    } else {
      throw InputError(field, scalar(kv.second), "a key moemem models (fsdp_version, fsdp_sharding_strategy, "
                                                 "fsdp_reshard_after_forward, fsdp_activation_checkpointing, "
                                                 "fsdp_offload_params, fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP) or "
                                                 "one that leaves memory alone");
    }
  }
}

void read_top(const YAML::Node& root, const std::string& source, AccelerateConfig& out) {
  for (const auto& kv : root) {
    const std::string k = kv.first.Scalar();
    const std::string field = fmt::format("{}: {}", source, k);
    if (listed(kLaunchKeys, k) || k == "distributed_type" || k == "fsdp_config") continue;
    if (k == "mixed_precision") {
      if (scalar(kv.second) != "bf16") throw InputError(field, scalar(kv.second), "bf16 (accelerate's FSDP mixed precision)");
    } else if (k == "num_processes") {
      const std::string s = scalar(kv.second);
      std::int64_t n = 0;
      try {
        n = kv.second.as<std::int64_t>();
      } catch (const YAML::Exception&) {
        throw InputError(field, s, "a positive number of processes");
      }
      if (n > 0) out.num_processes = n;  // -1: left to the launcher
    } else if (k == "dynamo_config") {
      const YAML::Node b = kv.second["dynamo_backend"];
      if (b && scalar(b) != "NO") throw InputError(field + ".dynamo_backend", scalar(b), "NO (torch.compile is not modelled under hf)");
    } else {
      throw InputError(field, scalar(kv.second), "a key moemem models (distributed_type, fsdp_config, mixed_precision, "
                                                 "num_processes, dynamo_config) or a launch setting");
    }
  }
}

}  // namespace

AccelerateConfig parse_accelerate_config(std::string_view yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    throw InputError(source, e.what(), "an accelerate config in YAML");
  }
  if (!root.IsMap()) throw InputError(source, "not a mapping", "an accelerate config (a YAML mapping)");
  const std::string type = root["distributed_type"] ? scalar(root["distributed_type"]) : "";
  if (type != "FSDP") {
    throw InputError(source + ": distributed_type", type.empty() ? "missing" : type,
                     "FSDP (for DeepSpeed pass its JSON with --deepspeed; DDP and the rest are not modelled)");
  }
  if (!root["fsdp_config"]) throw InputError(source + ": fsdp_config", "missing", "the FSDP settings (fsdp_version 1 or 2)");
  if (!root["mixed_precision"]) throw InputError(source + ": mixed_precision", "missing", "bf16");
  AccelerateConfig out;
  read_top(root, source, out);
  read_fsdp(root["fsdp_config"], source, out);
  return out;
}

AccelerateConfig read_accelerate_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("--accelerate-config", path, "a readable accelerate config (YAML)");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_accelerate_config(text.str(), path);
}

}  // namespace moemem
