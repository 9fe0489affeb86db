// Options shared by the subcommands (model, layout, training, output) and their conversion into
// the library's plain structs. All parsing of user text happens here, with named errors.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/table.hpp"
#include "moemem/activation.hpp"
#include "moemem/config.hpp"
#include "moemem/inventory.hpp"
#include "moemem/megatron_args.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"
#include "moemem/scenario.hpp"

namespace moemem::cli {

struct ModelOptions {
  std::string model = "deepseek-v3";
  std::optional<std::int64_t> mtp;
  std::optional<ModelSpec> spec;  // a model described by --megatron-args architecture flags
  bool strict = false;            // --strict: config keys moemem does not understand are errors
};

struct LayoutOptions {
  std::int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1;
  std::optional<std::int64_t> etp;  // unset: the profile's default (Megatron: tp), resolved by make_scenario
  bool sp = false;
  std::string layers_per_stage;
  std::string schedule = "1f1b";
  std::string pipeline_layout;
  std::optional<std::int64_t> first_stage_layers, last_stage_layers;
  bool account_for_embedding = false, account_for_loss = false;
};

// Training flags in groups that mirror TrainingConfig's parts; text fields are parsed (with the
// flag's name in errors) into a TrainingRequest; empty text and unset optionals mean "not given".
struct BatchOptions {
  std::int64_t micro_batch = 1, seq_len = 4096;
  std::optional<std::int64_t> global_batch;
};
struct RecomputeOptions {
  std::string recompute;  // empty: none (or the recipe's)
  std::string recompute_modules, recompute_method;       // method unset: uniform (full recomputation only)
  std::optional<std::int64_t> recompute_num_layers;       // unset: 1 (full recomputation only)
  std::string selective_ac_option;                        // torchtitan: op or a block frequency
  std::int64_t cpu_offload_layers = 0;
};
struct StateOptions {
  std::optional<std::int64_t> zero;  // unset: 0 (or the recipe's)
  bool distributed_optimizer = false;
  bool optimizer_cpu_offload = false;
  std::string optimizer_offload_fraction;  // empty: Megatron's default, 1.0
  std::string params_dtype, main_grads_dtype, main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype;
};
struct NumericsOptions {
  std::string attention;  // empty: the profile's default
  std::string logits_dtype = "fp32";
  std::optional<std::int64_t> vocab_multiple;
  std::string fp8, recipe, recipe_off;
  std::string hidden_dropout, attention_dropout;  // empty: the profile's default
  std::string megatron_version = "current";
  std::string torchtitan_version = "current";
  std::string transformers_version = "5";
  std::string deepspeed_version = "current";
  std::string experts_implementation;  // empty: the transformers release's default
  std::string cuda_graph_impl = "none", cuda_graph_scope;  // empty scope: the whole layer
};
struct MoeOptions {
  std::string moe_imbalance, moe_capacity_factor, dispatcher = "alltoall";
  bool shared_expert_overlap = false;
  bool ep_overlap = false;
  bool delay_wgrad = false, tp_comm_overlap = false;
  bool no_rope_fusion = false;
  bool no_grad_accum_fusion = false;
  bool no_attention_mask = false;
};
struct OverheadOptions {
  std::string overhead = "low";
  std::string fragmentation_pct, cuda_context, nccl_per_group;
};
struct FinetuneOptions {
  std::string finetune = "full", lora_targets, lora_dropout, optimizer, sgd_momentum;  // optimizer empty: adamw
  std::optional<std::int64_t> lora_rank;
};
struct FsdpOptions {  // torchtitan profile (fsdp1, fsdp2: the hf profile's accelerate FSDP)
  bool compile = false, fsdp_float8_all_gather = false, fsdp1 = false, fsdp2 = false, fsdp_offload_params = false,
       ddp = false;
  std::string loss, reshard_after_forward = "default";
  std::int64_t dp_replicate = 1;
};
struct GpuOptions {
  std::string gpu, gpu_memory;
};
struct TrainingOptions {
  std::string profile = "megatron";
  BatchOptions batch;
  RecomputeOptions recompute;
  StateOptions states;
  NumericsOptions numerics;
  MoeOptions moe;
  OverheadOptions overheads;
  FsdpOptions fsdp;
  FinetuneOptions finetune;
  GpuOptions gpu;
  std::string deepspeed;  // --deepspeed ds_config.json (hf profile)
  std::string accelerate_config;  // --accelerate-config accelerate.yaml (hf profile, FSDP2)
};

// --megatron-args (analyze, explain): the script's path and, once read after parsing (cli.cpp),
// its settings and the flags given inline (in every spelling), which win over the script's.
struct MegatronScript {
  std::string path;
  std::optional<MegatronSettings> settings;
  std::set<std::string> given;
};

void add_model_options(CLI::App& app, ModelOptions& o);
void add_layout_options(CLI::App& app, LayoutOptions& o);
void add_training_options(CLI::App& app, TrainingOptions& o);
// Parts of add_training_options that search takes too.
void add_release_options(CLI::App& app, TrainingOptions& o);
void add_fsdp2_options(CLI::App& app, TrainingOptions& o);
void add_format_option(CLI::App& app, std::string& format);

// Parses a whole decimal integer; the error names `field` and repeats the text as typed.
std::int64_t parse_int(const std::string& text, const char* field);
// Registers an integer flag parsed by parse_int.
void add_int(CLI::App& app, const char* flag, std::int64_t& target, const char* help);

void add_optional_int(CLI::App& app, const char* flag, std::optional<std::int64_t>& target, const char* help);
double parse_double(const std::string& text, const char* field);

// Parses "4,4,4,1"; every item must be a non-negative integer.
std::vector<std::int64_t> parse_int_list(const std::string& text, const char* field);

// Options into the library's request (typed; parse errors name the flag), and the request resolved.
ModelRequest to_model_request(const ModelOptions& o);
ModelSpec load_model_for(const ModelOptions& o, const Profile& profile);
ParallelConfig to_parallel(const LayoutOptions& o);
TrainingRequest to_training_request(const TrainingOptions& o);
TrainingConfig to_training(const TrainingOptions& o, const Profile& profile);
Request to_request(const ModelOptions& mo, const LayoutOptions& lo, const TrainingOptions& to);
// The same, with a Megatron script's settings (once read) under the inline flags.
Request to_request(const ModelOptions& mo, const LayoutOptions& lo, const TrainingOptions& to,
                   const MegatronScript& script);

// Everything analyze needs, resolved and validated.
using Evaluation = Scenario;
Evaluation resolve(const ModelOptions& mo, const LayoutOptions& lo, const TrainingOptions& to);

// The GPU capacity the user asked about (--gpu or --gpu-memory), if any.
struct GpuChoice {
  std::string name;
  Bytes capacity;
  double margin_pct = 0;  // the validation band's upper end: totals may be this much higher
  double fraction = 1.0;   // --max-memory-fraction: the share of the capacity a run may use (search's)
  // The capacity a predicted total must fit in so that total x (1 + margin) fits the GPU's usable
  // share, rounded as search rounds it (floor of capacity x fraction).
  [[nodiscard]] Bytes usable() const {
    const double share = std::floor(static_cast<double>(capacity.value()) * fraction);
    return Bytes(static_cast<std::uint64_t>(share / (1.0 + margin_pct / 100.0)));
  }
};
std::optional<GpuChoice> gpu_choice(const TrainingOptions& to);

}  // namespace moemem::cli
