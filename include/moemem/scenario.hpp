// One request, one scenario. A Request is what a user asks to evaluate — from CLI flags, a
// Megatron launch script, a recipe, a validation record or a search candidate — with every
// setting that has a default left unset. make_scenario resolves it, with all checks, into a
// Scenario: the model and its inventory, the resolved layout, the training settings and the
// profile, ready for analyze().
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "moemem/enums.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"
#include "moemem/recipes.hpp"
#include "moemem/training.hpp"

namespace moemem {

struct ModelRequest {
  std::string source = "deepseek-v3";  // preset name or path of a config.json
  std::optional<ModelSpec> spec;       // a model described directly (a Megatron script's architecture)
  std::optional<std::int64_t> mtp;     // MTP depths to include (unset: the config's; 0 where the profile drops MTP)
};

// Training settings as asked; unset ones take the recipe's, then the profile's defaults.
struct TrainingRequest {
  std::int64_t micro_batch = 1, seq_len = 4096;
  std::optional<std::int64_t> global_batch;
  std::optional<std::int64_t> zero;     // unset: 0 (or the recipe's)
  bool distributed_optimizer = false;   // Megatron's distributed optimizer (= ZeRO 1)
  std::optional<Recompute> recompute;   // unset: none (or the recipe's)
  std::optional<std::uint16_t> recompute_modules;  // selective modules (given: selective recomputation)
  // Full recomputation's method and group size (unset: uniform, 1); given with another granularity
  // they are refused (Megatron asserts against a method with selective recomputation).
  std::optional<RecomputeMethod> recompute_method;
  std::optional<std::int64_t> recompute_num_layers;
  // torchtitan's activation_checkpoint.selective_ac_option: "op" (per-op SAC) or a block frequency.
  std::optional<std::string> selective_ac_option;
  std::int64_t cpu_offload_layers = 0;  // --cpu-offloading-num-layers
  OverheadPoint overhead = OverheadPoint::low;
  std::optional<DType> params_dtype, main_grads_dtype, main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype;
  std::optional<AttentionKernel> attention;  // unset: the profile's kernel
  DType logits_dtype = DType::fp32;
  std::optional<std::int64_t> vocab_multiple;
  std::optional<Fp8Recipe> fp8;
  std::optional<double> moe_imbalance, moe_capacity_factor;
  std::optional<double> hidden_dropout, attention_dropout;  // unset: the profile's default
  MegatronVersion megatron_version = MegatronVersion::current;
  TorchtitanVersion torchtitan_version = TorchtitanVersion::current;
  TransformersVersion transformers_version = TransformersVersion::v5;
  std::int32_t deepspeed_release = 0;  // --deepspeed-version (0: current)
  std::optional<ExpertsImplementation> experts_implementation;
  Dispatcher dispatcher = Dispatcher::alltoall;
  bool shared_expert_overlap = false;
  bool ep_overlap = false;  // --overlap-moe-expert-parallel-comm
  bool delay_wgrad = false;      // --delay-wgrad-compute
  bool tp_comm_overlap = false;  // --tp-comm-overlap
  bool no_rope_fusion = false;   // --no-rope-fusion
  bool no_grad_accum_fusion = false;  // --no-gradient-accumulation-fusion
  bool no_dataloader_attention_mask = false;  // --no-create-attention-mask-in-dataloader
  std::optional<double> fragmentation_pct;
  std::optional<Bytes> cuda_context, nccl_per_group;
  FsdpSettings fsdp;
  std::optional<double> optimizer_offload;  // --optimizer-cpu-offload: the offload fraction (Megatron's default 1.0)
  std::optional<Recipe> recipe;
  std::uint16_t recipe_off = 0;  // techniques of the recipe left out (--recipe-off)
  CudaGraphs cuda_graphs;        // --cuda-graph-impl, --cuda-graph-scope
  FinetuneSettings finetune;     // --finetune, --lora-*, --optimizer
  std::optional<DeepSpeedBuffers> deepspeed;  // --deepspeed: the buffer settings of its ds_config
};

struct Request {
  ModelRequest model;
  ParallelConfig parallel;
  TrainingRequest training;
  std::string profile = "megatron";
};

struct Scenario {
  const Profile* profile = nullptr;
  ModelSpec model;
  Inventory inventory;
  Layout layout;
  TrainingConfig training;
};

// The model a request names, with the MTP depths it asks for (or the profile's default).
[[nodiscard]] ModelSpec load_requested_model(const ModelRequest& r, const Profile& profile);
// The training settings: recipe, then profile defaults, then the checks that need no layout.
[[nodiscard]] TrainingConfig resolve_training(const TrainingRequest& r, const Profile& profile);
// Everything resolved and checked. Throws InputError naming the field of the first bad setting.
[[nodiscard]] Scenario make_scenario(const Request& r);

// Refuses LoRA adapters on routed experts and QLoRA of an MoE model under the hf profile with
// transformers 5 (3-D expert parameters: PEFT's wrapper and bitsandbytes are not modelled).
void check_peft_on_experts(const Profile& profile, const ModelSpec& m, const TrainingConfig& t, const Inventory& inv);

}  // namespace moemem
