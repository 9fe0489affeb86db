// Fine-tuning: which parameters train. Full fine-tuning trains every tensor; LoRA freezes the
// base model and adds two adapter matrices per targeted linear, A (r x in) and B (out x r); QLoRA
// also stores the frozen base in 4-bit NF4 with double-quantised block scales. Also the
// optimizer choice (--optimizer), whose states optimizer.hpp itemises.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "moemem/inventory.hpp"
#include "moemem/units.hpp"

namespace moemem {

enum class Finetune : std::uint8_t { full, lora, qlora };
[[nodiscard]] std::string_view name_of(Finetune f);
[[nodiscard]] Finetune parse_finetune(std::string_view text, std::string_view field);

// --optimizer: AdamW (the default), bitsandbytes' 8-bit Adam, Adafactor, SGD, Lion, Muon.
enum class OptimizerKind : std::uint8_t { adamw, adam8bit, adafactor, sgd, lion, muon };
[[nodiscard]] std::string_view name_of(OptimizerKind o);
[[nodiscard]] OptimizerKind parse_optimizer(std::string_view text, std::string_view field);

// The training part that says what trains and with which optimizer.
struct FinetuneSettings {
  Finetune finetune = Finetune::full;
  std::int64_t lora_rank = 0;             // r (> 0 with lora and qlora)
  std::string lora_targets = "all-linear";  // "all-linear" or module names, comma-separated
  double lora_dropout = 0;                // PEFT's and Megatron-Bridge's default lora_dropout
  OptimizerKind optimizer = OptimizerKind::adamw;
  // SGD's momentum (Megatron's --sgd-momentum, default 0.9): nonzero keeps a momentum buffer.
  double sgd_momentum = 0.9;
  // Whether --optimizer and --sgd-momentum were given (a DeepSpeed config's optimizer must then
  // agree; the hf profile's SGD default differs from Megatron's).
  bool optimizer_given = false, sgd_momentum_given = false;
  // PEFT's all-linear on Hugging Face modules (the hf profile): every nn.Linear but the output
  // head, so also a router that is an nn.Linear there (Mixtral's and Qwen3-MoE's `gate`); false:
  // Megatron-Bridge's all-linear, which leaves the router out. Set by make_scenario.
  bool linear_routers = false;
  // Whether PEFT's target_modules reach the routed experts: false where Hugging Face's code keeps
  // them as 3-D parameters rather than nn.Linear (GptOss; PEFT adapts those only through
  // target_parameters). Set by make_scenario.
  bool linear_experts = true;
  auto operator<=>(const FinetuneSettings&) const = default;
};

// The module name PEFT's target_modules matches: the last component of the tensor's name before
// ".weight" ("layers.3.self_attn.q_proj.weight" -> "q_proj", "mlp.experts.*.w1.weight" -> "w1").
[[nodiscard]] std::string_view module_name(const Tensor& t);
// Whether `all-linear` targets the tensor: every 2-D weight of a decoder layer or MTP depth (the
// attention projections, dense MLP, shared and routed experts, MTP's eh_proj), not the embedding,
// the output head, or (unless `linear_routers`) the router and Qwen2-MoE's shared_expert_gate.
[[nodiscard]] bool all_linear_target(const Tensor& t, bool linear_routers = false, bool linear_experts = true);

// Whether Hugging Face's modeling code (transformers 4.x, the hf profile's) builds the MoE router
// of `model_type` as an nn.Linear, which PEFT's all-linear and bitsandbytes' 4-bit replacement
// then take in: Mixtral's and Qwen3-MoE's `gate`; DeepSeek-V3's DeepseekV3TopkRouter holds a bare
// nn.Parameter and is neither.
[[nodiscard]] bool hf_router_is_linear(std::string_view model_type);
// Whether Hugging Face's modeling code keeps the routed experts as nn.Linear modules (not GptOss's
// 3-D parameters), so that PEFT's target_modules can reach them.
[[nodiscard]] bool hf_experts_are_linear(std::string_view model_type);

// The inventory with `s` applied. Full: unchanged. LoRA/QLoRA: every base tensor frozen, and
// after each targeted linear its adapters "<module>.lora_A.weight" (r x in) and
// "<module>.lora_B.weight" (out x r, one entry per part of a fused checkpoint matrix), trainable;
// one pair per routed expert (PEFT wraps each expert's nn.Linear). QLoRA also stores every frozen
// linear that bitsandbytes replaces (transformers' replace_with_bnb_linear: each nn.Linear but the
// output head, i.e. all-linear's set with linear routers) as NF4 (Tensor::nf4_bytes, per expert
// for routed experts). Throws InputError for a rank
// below 1, a dropout outside [0, 1) or a target name no linear of the model has.
[[nodiscard]] Inventory apply_finetune(const Inventory& base, const FinetuneSettings& s);

// Trainable parameters of an inventory (all of them unless it was built by apply_finetune).
[[nodiscard]] Count trainable_params(const Inventory& inv);

// Bytes of a tensor of `n` elements stored by bitsandbytes as NF4 with double quantisation
// (QLoRA's base weights, bnb.functional.quantize_4bit with blocksize 64, compress_statistics):
// ceil(n/2) packed 4-bit codes, one 8-bit quantised absmax per 64-element block, an fp32 absmax
// per 256 blocks and an fp32 offset (quantize_blockwise of the absmax, blocksize 256), and the
// 16-entry fp32 NF4 code book (get_4bit_type, one per QuantState). The 256-entry dynamic map of
// the second level is one shared tensor per device and not counted per tensor.
[[nodiscard]] Bytes nf4_bytes(Count n);

}  // namespace moemem
