// Private to the profiles (src/profiles/*.cpp and the registry in src/profile.cpp): the three
// profile objects, the parameter rules torchtitan borrows from megatron, the helpers that size
// activation terms, and the validity checks more than one profile runs.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "moemem/activation.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"
#include "moemem/model.hpp"
#include "moemem/profile.hpp"
#include "moemem/units.hpp"

namespace moemem::detail {
// The state models (src/analyze/zero_states.cpp, fsdp2_states.cpp) a profile chooses from.
extern const StateModel kZeroStates, kFsdp2States;
}  // namespace moemem::detail

namespace moemem::profiles {

// Defined in paper.cpp, megatron.cpp and torchtitan.cpp.
extern const Profile kPaper;
extern const Profile kMegatron;
extern const Profile kTorchtitan;

// Megatron-Core's parameter rules (megatron.cpp); torchtitan's Llama TP plan splits the same
// matrices the same way and shards every state over one group.
[[nodiscard]] TpSplit megatron_tp_split(Role r);
[[nodiscard]] ZeroGroup megatron_zero_group(Role r);
[[nodiscard]] bool megatron_accounts(const Tensor& t);

// ---- sizing activation terms ----------------------------------------------------------------

[[nodiscard]] inline std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// Checked product of element dimensions, divided (rounding up) by `divisor`.
[[nodiscard]] inline Count elems(std::initializer_list<std::int64_t> dims, std::int64_t divisor = 1) {
  std::uint64_t n = 1;
  for (const auto d : dims) n = checked_mul(n, u(d), "activation size");
  return Count(ceil_div(n, u(divisor)));
}

// Appends terms; inputs of FP8 linear layers are cached in FP8 with their scales under an FP8
// recipe (Transformer Engine keeps the quantized input for the weight-gradient GEMM).
struct Terms {
  const ActivationContext& c;
  std::vector<ActivationTerm>& out;
  DType a = c.training.activation_dtype;

  void add(std::string_view name, Module mod, Count n, DType t, std::uint16_t dropped_by, std::string_view rule,
           bool kept_under_full = false) {
    out.push_back({name, mod, n, t, kept_under_full, dropped_by, rule, false, false});
  }
  // A term keeps its rule as a view: a temporary string would dangle (ASan found one), so a
  // std::string rvalue does not compile.
  template <class R>
    requires std::same_as<std::remove_cvref_t<R>, std::string> && (!std::is_lvalue_reference_v<R>)
  void add(std::string_view, Module, Count, DType, std::uint16_t, R&&, bool = false) = delete;
  // A tensor alive while the layer's forward runs but saved by nothing (`rerun_by`: the selective
  // modules whose recomputation re-creates it).
  void transient(std::string_view name, Module mod, Count n, std::uint16_t rerun_by, std::string_view rule) {
    transient(name, mod, n, a, rerun_by, rule);
  }
  void transient(std::string_view name, Module mod, Count n, DType dtype, std::uint16_t rerun_by, std::string_view rule) {
    out.push_back({name, mod, n, dtype, false, rerun_by, rule, false, true});
  }
  void linear_input(std::string_view name, std::string_view scales, Module mod, Count n, std::uint16_t dropped_by,
                    std::string_view rule) {
    const Fp8Recipe f = c.training.fp8;
    if (f == Fp8Recipe::none) {
      add(name, mod, n, a, dropped_by, rule);
      return;
    }
    add(name, mod, n, DType::fp8, dropped_by, rule);
    add(scales, mod, fp8_scale_elements(n, f), fp8_scale_dtype(f), dropped_by, "FP8 scales of the tensor above");
  }
};

// LoRA adapters' saved tensors in one decoder layer of `kind` (lora_terms.cpp, megatron profile);
// `routed_tokens`: the rows the hottest expert rank computes.
void lora_layer_terms(const ActivationContext& c, LayerKind kind, Terms& terms, std::int64_t routed_tokens);

// Megatron's --cpu-offloading-num-layers under the megatron profile: what Megatron refuses with it
// (src/profiles/megatron_offload.cpp).
std::optional<InputError> cpu_offload_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t);
// --overlap-moe-expert-parallel-comm, and --tp-comm-overlap / --delay-wgrad-compute, where Megatron
// accepts them (src/profiles/megatron_offload.cpp).
std::optional<InputError> ep_overlap_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t);
std::optional<InputError> userbuffers_check(const Layout& layout, const TrainingConfig& t);

// DeepSeek sparse attention under the megatron profile (src/profiles/megatron_dsa.cpp): one DSA
// layer's attention block after its input norm, and what Megatron refuses or moemem does not model.
void megatron_dsa_attention(const ActivationContext& c, Terms& t);
std::optional<InputError> megatron_dsa_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t);
// Gated DeltaNet layers and gated attention (Qwen3-Next, Qwen3.5) under the megatron profile
// (src/profiles/megatron_gdn.cpp): the mixer's saved tensors, the attention output gate's, the checks.
void megatron_gdn_mixer(const ActivationContext& c, Terms& t);
void megatron_output_gate(const ActivationContext& c, Terms& t, std::int64_t heads, std::int64_t v_dim);
// What the megatron profile accepts of layers apart from one attention shape: Gated DeltaNet and
// Mamba-2 (hybrid models), MiMo-V2-Flash's two attention shapes, Nemotron-NAS's block shapes.
std::optional<InputError> megatron_layer_shape_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t);
// Nemotron-H's Mamba-2 mixer under the megatron profile (src/profiles/megatron_mamba.cpp).
void megatron_mamba_mixer(const ActivationContext& c, Terms& t);
// torchtitan's DeepSeek-V3 blocks (MLA, dense or MoE FFN) as d54d05a5 trains them
// (src/profiles/torchtitan_moe.cpp).
void titan_mla_moe_layer(const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out);
// torchtitan's Qwen3 MoE block's FFN half (models/moe.py as bd3850be8 runs it): the same
// token-choice MoE, with the router's route_norm division.
void titan_qwen3_moe_ffn(const ActivationContext& c, std::vector<ActivationTerm>& out);
// torchtitan's gpt-oss block (models/gpt_oss at c5d93d109): attention with sinks through
// FlexAttention and the biased, clamped SwiGLU experts, in eager autograd.
void titan_gpt_oss_layer(const ActivationContext& c, std::vector<ActivationTerm>& out);

// ---- validity checks shared by more than one profile ----------------------------------------

// Whether any routing option departs from balanced routing with all-to-all dispatch.
[[nodiscard]] inline bool routing_options_set(const TrainingConfig& t) {
  return t.moe_imbalance != 1.0 || t.moe_capacity_factor || t.deepep || t.allgather;
}

// Routing options need a model with routed experts (every profile checks this, in the same place).
inline std::optional<InputError> refuse_routing_without_experts(const ModelSpec& m, const TrainingConfig& t) {
  if (!m.is_moe() && routing_options_set(t)) {
    return InputError("--moe-imbalance/--moe-capacity-factor/--moe-token-dispatcher", "set",
                     fmt::format("no routing options for {}, a model without routed experts", m.name));
  }
  return std::nullopt;
}

// transformers' release and experts implementation, under a profile other than hf (each such
// profile's check calls it).
inline std::optional<InputError> refuse_transformers_options(std::string_view profile, const TrainingConfig& t) {
  if (t.transformers_version != TransformersVersion::v5) {
    return InputError("--transformers-version", std::string(name_of(t.transformers_version)),
                      fmt::format("5 (its default) with the {} profile: the release is an hf-profile setting", profile));
  }
  if (t.experts_implementation) {
    return InputError("--experts-implementation", std::string(name_of(*t.experts_implementation)),
                      fmt::format("the hf profile (not {}): transformers' experts implementation", profile));
  }
  if (t.deepspeed_release != 0) {
    return InputError("--deepspeed-version", deepspeed_version_name(t.deepspeed_release),
                      fmt::format("current (its default) with the {} profile: the release is an hf-profile (DeepSpeed) "
                                  "setting",
                                  profile));
  }
  return std::nullopt;
}

// torchtitan's settings (torch.compile, loss variants, FSDP2 resharding and float8 all-gather,
// HSDP replicas, a release) under a profile without FSDP2.
// `hf_fsdp2`: the hf profile under --fsdp1 or --fsdp2, which takes --reshard-after-forward
// (accelerate's fsdp_reshard_after_forward, or FSDP1's sharding strategy).
inline std::optional<InputError> refuse_fsdp2_options(std::string_view profile, const TrainingConfig& t, bool hf_fsdp2 = false) {
  if (t.torchtitan_version != TorchtitanVersion::current) {
    return InputError("--torchtitan-version", std::string(name_of(t.torchtitan_version)),
                     fmt::format("current with the {} profile (releases are a torchtitan-profile setting)", profile));
  }
  if (t.hf_ddp && profile != "hf") {
    return InputError("--ddp", "set", fmt::format("the hf profile (not {}): the Trainer without DeepSpeed or FSDP", profile));
  }
  if (t.accelerate_fsdp() && profile != "hf") {
    return InputError(t.accelerate_fsdp1 ? "--fsdp1" : "--fsdp2", "set",
                      fmt::format("the hf profile (not {}): FSDP through accelerate", profile));
  }
  if (t.fsdp_offload_params && !hf_fsdp2) {
    return InputError("--fsdp-offload-params", "set", "--profile hf with --fsdp1 or --fsdp2 (FSDP's CPU offload through accelerate)");
  }
  const bool reshard = t.reshard != ReshardPolicy::standard && !hf_fsdp2;
  if (reshard && profile == "hf") {
    return InputError("--reshard-after-forward", std::string(name_of(t.reshard)),
                      "default with the hf profile unless --fsdp1 or --fsdp2 (DeepSpeed has no such policy)");
  }
  if (t.compile || t.loss || reshard || t.fsdp_float8_all_gather || t.dp_replicate != 1) {
    return InputError("--compile/--loss/--reshard-after-forward/--fsdp-float8-all-gather/--dp-replicate", "set",
                     fmt::format("the torchtitan profile (not {})", profile));
  }
  return std::nullopt;
}

// Megatron-Core's own settings under another profile: its CUDA graphs, a release, the EP all-to-all
// overlap (combined 1F1B), delayed weight gradients and TE's userbuffers.
inline std::optional<InputError> refuse_megatron_options(std::string_view profile, const TrainingConfig& t) {
  if (t.cuda_graphs.impl != CudaGraphImpl::none) {
    return InputError("--cuda-graph-impl", std::string(name_of(t.cuda_graphs.impl)),
                     fmt::format("none with the {} profile (Megatron-Core's CUDA graphs are a megatron-profile setting)", profile));
  }
  if (t.megatron_version != MegatronVersion::current) {
    return InputError("--megatron-version", std::string(name_of(t.megatron_version)),
                     fmt::format("current with the {} profile (releases are a megatron-profile setting)", profile));
  }
  const std::string only = fmt::format("the megatron profile (not {})", profile);
  if (t.ep_overlap) return InputError("--overlap-moe-expert-parallel-comm", "set", only);
  if (t.delay_wgrad) return InputError("--delay-wgrad-compute", "set", only);
  if (t.tp_comm_overlap) return InputError("--tp-comm-overlap", "set", only);
  if (t.cpu_offload_layers > 0) return InputError("--cpu-offloading-num-layers", std::to_string(t.cpu_offload_layers), only);
  if (!t.rope_fusion) return InputError("--no-rope-fusion", "set", only);
  if (!t.dataloader_attention_mask) return InputError("--no-create-attention-mask-in-dataloader", "set", only);
  if (!t.gradient_accumulation_fusion) return InputError("--no-gradient-accumulation-fusion", "set", only);
  if (t.shared_expert_overlap) return InputError("--moe-shared-expert-overlap", "set", only);
  // Megatron pads the vocabulary to a multiple of this x tp; torchtitan's and Hugging Face's
  // embeddings keep the config's vocab_size rows (the paper's analysis too).
  if (t.vocab_multiple) {
    return InputError("--make-vocab-size-divisible-by", std::to_string(*t.vocab_multiple),
                      fmt::format("{} (the {} profile keeps the config's vocab_size rows, unpadded)", only, profile));
  }
  return std::nullopt;
}

// The logits' dtype is the framework's under profiles that do not model Megatron's choice (the
// paper's analysis and Hugging Face's loss, which upcasts the bf16 logits itself).
inline std::optional<InputError> refuse_logits_dtype(std::string_view profile, const TrainingConfig& t, std::string_view why) {
  if (t.logits_dtype != DType::fp32) {
    return InputError("--logits-dtype", std::string(name_of(t.logits_dtype)), fmt::format("fp32 with the {} profile ({})", profile, why));
  }
  return std::nullopt;
}

// Dropout under a profile whose models have none (torchtitan's Llama, the paper's analysis).
inline std::optional<InputError> refuse_dropout(std::string_view profile, const TrainingConfig& t) {
  if (t.hidden_dropout > 0 || t.attention_dropout > 0) {
    return InputError("--hidden-dropout/--attention-dropout", fmt::format("{}/{}", t.hidden_dropout, t.attention_dropout),
                     fmt::format("0 with the {} profile (its models have no dropout)", profile));
  }
  return std::nullopt;
}

// Fine-tuning and optimizers a profile's framework does not offer. Megatron-Core: LoRA through
// Megatron-Bridge's PEFT (megatron/bridge/peft/lora.py); no 4-bit NF4 base weights (QLoRA is
// bitsandbytes' Linear4bit in Hugging Face models, which Megatron's parallel linears are not);
// --optimizer adam, sgd, lion, muon (megatron/training/arguments.py --optimizer choices), no
// bitsandbytes 8-bit Adam, no Adafactor. torchtitan and the paper's analysis: full AdamW only
// (torchtitan's LoRA and DistMuon are not modelled under FSDP2).
inline std::optional<InputError> refuse_finetune(std::string_view profile, const TrainingConfig& t, bool lora,
                                                 std::initializer_list<OptimizerKind> optimizers, bool qlora = false) {
  if ((t.finetune == Finetune::qlora && !qlora) || (t.finetune == Finetune::lora && !lora)) {
    return InputError("--finetune", std::string(name_of(t.finetune)),
                     t.finetune == Finetune::qlora
                         ? fmt::format("{} with the {} profile (QLoRA's NF4 base weights belong to Hugging Face + "
                                       "bitsandbytes: --profile hf)",
                                       lora ? "full or lora" : "full", profile)
                         : fmt::format("full with the {} profile (its LoRA is not modelled: --profile megatron or hf)", profile));
  }
  if (std::find(optimizers.begin(), optimizers.end(), t.optimizer) == optimizers.end()) {
    std::string names;
    for (const auto o : optimizers) names += (names.empty() ? "" : ", ") + std::string(name_of(o));
    return InputError("--optimizer", std::string(name_of(t.optimizer)),
                     fmt::format("{} with the {} profile (its framework has no other)", names, profile));
  }
  if (t.optimizer_offload > 0 && t.optimizer != OptimizerKind::adamw) {
    return InputError("--optimizer-cpu-offload", std::string(name_of(t.optimizer)),
                     "--optimizer adamw (the offload is modelled for AdamW's master weights and moments only)");
  }
  return std::nullopt;
}

}  // namespace moemem::profiles
