// hf: Hugging Face transformers' modeling code trained data-parallel under DeepSpeed ZeRO 0-3
// (--zero, or --deepspeed ds_config.json), as the Trainer, TRL, LLaMA-Factory and axolotl run it:
// no tensor, pipeline, context or expert parallelism (each rank runs the whole model on its own
// micro-batch; every expert is local). The decoder layers' saved tensors are in hf_layers.cpp; the
// embedding, final norm, head and loss (ForCausalLMLoss) here.
#include "profiles/hf.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "moemem/finetune.hpp"
#include "moemem/profile.hpp"

namespace moemem::profiles {

bool HfLayerContext::saves_input(Role r) const {
  switch (r) {
    case Role::q_up:
    case Role::q_rope: return trains(Role::q_up) || trains(Role::q_rope);      // q_b_proj (or q_proj)
    case Role::kv_down:
    case Role::k_rope: return trains(Role::kv_down) || trains(Role::k_rope);   // kv_a_proj_with_mqa
    case Role::k_up:
    case Role::v_up: return trains(Role::k_up) || trains(Role::v_up);          // kv_b_proj
    default: return trains(r);
  }
}

HfLayerContext hf_layer_context(const ActivationContext& c, LayerKind kind) {
  HfLayerContext h{c, {}, {}, {}};
  if (c.training.finetune == Finetune::full) {
    h.trains_.fill(true);
    return h;
  }
  // LoRA: one layer of `kind` (a model's layers of one kind have the same tensors), its trainable
  // tensors (the adapters, which carry their base linear's role) and its A matrices.
  const auto& m = c.model;
  std::int64_t layer = -1;
  for (std::int64_t l = 0; l < m.num_layers && layer < 0; ++l) {
    if (m.layer_kinds[static_cast<std::size_t>(l)] == kind) layer = l;
  }
  const Inventory inv = apply_finetune(build_inventory(m), c.training.finetuning());
  for (const auto& t : inv.tensors) {
    if (t.layer != layer) continue;
    // Under --ddp lora_A reads autocast's copy of the input, not the base layer's (whose frozen
    // weight saves none): the adapters make no base input saved (lora_terms counts the copies).
    if (t.trainable && !c.training.hf_ddp) h.trains_[static_cast<std::size_t>(t.role)] = true;
    if (t.trainable) h.adapter_params += t.params();
    if (t.adapter == Adapter::lora_a) h.adapters.push_back(t);
  }
  return h;
}

namespace {

bool head_trains(const ActivationContext& c) { return c.training.finetune == Finetune::full; }

// Embedding: nn.Embedding saves its int64 indices for the weight's gradient (none when frozen:
// PEFT's enable_input_require_grads only makes the output require grad). Loss chunk: the final
// RMSNorm (fp32 copy of its input, rsqrt, the cast-back tensor when its weight trains), lm_head's
// input when the head trains, and ForCausalLMLoss (transformers/loss/loss_utils.py:
// logits.float(), then fixed_cross_entropy -> F.cross_entropy = log_softmax, which saves its fp32
// output, and nll_loss, which saves the int64 targets).
void hf_chunk_activations(const ActivationContext& c, const Chunk& chunk, std::vector<ActivationTerm>& out) {
  const auto& m = c.model;
  Terms t{c, out};
  const std::int64_t tokens = c.training.micro_batch * c.training.seq_len;
  const bool full = head_trains(c);
  if (chunk.embedding && full) t.add("embedding.token_ids", Module::embedding, elems({tokens}), DType::int64, 0, "b*s");
  if (chunk.embedding) {
    // The rotary embedding's cos and sin, computed once per forward in the activation dtype and
    // passed to every layer, whose RoPE products save them (one storage each, whatever the layer
    // count; checkpointed layers keep them as inputs). Their last dimension, as PyTorch saved them
    // on a GPU with transformers 5.17 (tests/data/groundtruth/hf-saved-tensors-h200-
    // transformers-5.17.jsonl): the head size (Llama-style; MLA's rope head size), half of it for
    // gpt-oss's rotation of halves.
    std::int64_t d = m.mla.kv_lora_rank > 0 ? m.mla.qk_rope_head_dim : m.head_dim;
    if (m.model_type == "gpt_oss") d = m.head_dim / 2;
    t.add("rotary.cos_sin", Module::embedding, elems({2, tokens, d}), t.a, 0, "2 x b*s x rotary dim (shared by the layers)");
  }
  if (!chunk.loss) return;
  t.add("norm.fp32_copy", Module::output_head, elems({tokens, m.hidden}), DType::fp32, 0, "b*s x h, fp32");
  t.add("norm.rsqrt", Module::output_head, elems({tokens}), DType::fp32, 0, "b*s x 1, fp32");
  if (full) {
    const DType product = norm_product_dtype(m, t.a);
    t.add("norm.cast", Module::output_head, elems({tokens, m.hidden}), product, 0, product == t.a ? "b*s x h" : "b*s x h, fp32");
    t.add("lm_head.input", Module::output_head, elems({tokens, m.hidden}), t.a, 0, "b*s x h");
  }
  t.add("loss.log_softmax (fp32)", Module::output_head, elems({tokens, c.padded_vocab}), DType::fp32, 0, "b*s x vocab, fp32");
  // ForCausalLMLoss pads the labels by one position before shifting them: the targets view a
  // b x (s + 1) tensor; nll_loss keeps its fp32 total weight (as saved on a GPU, as above).
  t.add("loss.targets", Module::output_head, elems({c.training.micro_batch, c.training.seq_len + 1}), DType::int64, 0,
        "b x (s + 1), int64 (the padded labels the shifted targets view)");
  t.add("loss.total_weight", Module::output_head, elems({1}), DType::fp32, 0, "1 x fp32");
}

// At the start of backward: nll_loss's gradient and log_softmax's gradient, both fp32 b*s x vocab,
// before the cast back to the head's bf16; the bf16 logits were freed after the upcast (the
// Trainer keeps only the loss), a block the fp32 tensors cannot reuse.
LossPeak hf_loss_peak(const ActivationContext& c) {
  const Count logits = elems({c.training.micro_batch * c.training.seq_len, c.padded_vocab});
  const Bytes fp32 = bytes_of(logits, DType::fp32);
  return {fp32 + fp32, bytes_of(logits, c.training.activation_dtype), "loss gradients (fp32) at the start of backward"};
}

bool supported_type(const std::string& t) {
  return t == "llama" || t == "mistral" || t == "qwen3" || t == "qwen3_moe" || t == "mixtral" || t == "deepseek_v3" ||
         t == "kimi_k2" || t == "gpt_oss";
}

// GptOss (modeling_gpt_oss.py): transformers runs it eager (no sdpa; its flash kernel with sinks is
// a hub kernel, vllm-flash-attn3, not modelled); PEFT's target_modules reach only its attention
// (the experts are 3-D parameters, adapted only through target_parameters, not modelled; the
// router is not an nn.Linear); QLoRA is refused.
std::optional<InputError> hf_gpt_oss_check(const ModelSpec& m, const TrainingConfig& t) {
  if (m.model_type != "gpt_oss") return std::nullopt;
  if (t.attention && *t.attention != AttentionKernel::eager) {
    return InputError("--attention", std::string(name_of(*t.attention)),
                      "eager for model_type gpt_oss under the hf profile (GptOss has no sdpa path, and its flash kernel "
                      "with attention sinks is a hub kernel moemem does not model)");
  }
  if (t.finetune == Finetune::qlora) {
    return InputError("--finetune", "qlora",
                      "full or lora for model_type gpt_oss under the hf profile (4-bit gpt-oss checkpoints are MXFP4 "
                      "experts, not bitsandbytes NF4 linears: not modelled)");
  }
  return std::nullopt;
}

std::optional<InputError> hf_layout_check(const Layout& layout) {
  const auto& p = layout.config;
  const std::string why = "1 with the hf profile (Hugging Face modeling code under DeepSpeed or FSDP is data-parallel only)";
  if (p.tp != 1) return InputError("--tp", std::to_string(p.tp), why);
  if (p.pp != 1) return InputError("--pp", std::to_string(p.pp), why);
  if (p.cp != 1) return InputError("--cp", std::to_string(p.cp), why);
  if (p.ep != 1) return InputError("--ep", std::to_string(p.ep), why);
  if (p.etp_degree() != 1) return InputError("--etp", std::to_string(p.etp_degree()), why);
  if (p.vpp != 1) return InputError("--vpp", std::to_string(p.vpp), why);
  if (p.sp) return InputError("--sp", "set", "off with the hf profile (no tensor parallelism)");
  if (p.schedule != Schedule::one_f_one_b) {
    return InputError("--schedule", std::string(name_of(p.schedule)),
                      "1f1b (the default) with the hf profile: the Trainer runs one micro-batch's forward and backward "
                      "at a time, accumulating gradients");
  }
  return std::nullopt;
}

// FSDP (1 or 2) through accelerate replaces DeepSpeed: its own sharding, no ZeRO stage or
// ds_config; what the state model (hf_fsdp2.cpp) does not cover is refused by name.
std::optional<InputError> hf_fsdp_check(const TrainingConfig& t) {
  if (!t.accelerate_fsdp()) return std::nullopt;
  if (t.accelerate_fsdp1 && t.accelerate_fsdp2) return InputError("--fsdp1", "set", "one of --fsdp1 and --fsdp2");
  const char* flag = t.accelerate_fsdp1 ? "--fsdp1" : "--fsdp2";
  if (t.deepspeed) return InputError("--deepspeed", "set", fmt::format("no DeepSpeed configuration with {} (FSDP replaces DeepSpeed)", flag));
  if (t.zero != 0) {
    return InputError("--zero", std::to_string(t.zero),
                      fmt::format("0 with {} (FSDP shards parameters, gradients and optimizer states over dp itself)", flag));
  }
  // accelerate leaves frozen non-float Params4bit out of sharding (fsdp2_prepare_model:
  // ignored_params, replicated on every rank) unless bnb_4bit_quant_storage is a float dtype: not
  // modelled.
  if (t.finetune == Finetune::qlora) {
    return InputError("--finetune", "qlora",
                      "full or lora with --fsdp2, full with --fsdp1 (QLoRA's NF4 weights under FSDP are not modelled)");
  }
  // FSDP1 flattens a unit's parameters into one FlatParameter: with frozen and trainable ones in
  // a unit (use_orig_params) its gradient spans the frozen ones too, and the Trainer rewraps PEFT
  // models by PEFT's fsdp_auto_wrap_policy (adapters as units of their own): not modelled.
  if (t.accelerate_fsdp1 && t.finetune != Finetune::full) {
    return InputError("--finetune", std::string(name_of(t.finetune)),
                      "full with --fsdp1 (adapters under FSDP1's flat parameters and PEFT's wrap policy are not modelled; "
                      "--fsdp2 models LoRA)");
  }
  if (t.optimizer_offload > 0) {
    return InputError("--optimizer-cpu-offload", "set",
                      fmt::format("--fsdp-offload-params with {} (FSDP's CPU offload moves parameters, gradients and "
                                  "optimizer states together)",
                                  flag));
  }
  return std::nullopt;
}

// --ddp: the Trainer (accelerate without DeepSpeed or FSDP) on bf16 weights; what its state model
// (hf_ddp.cpp) does not cover is refused by name.
std::optional<InputError> hf_ddp_check(const TrainingConfig& t) {
  if (!t.hf_ddp) return std::nullopt;
  if (t.accelerate_fsdp()) return InputError("--ddp", "set", "one of --ddp, --fsdp1 and --fsdp2");
  if (t.deepspeed) return InputError("--deepspeed", "set", "no DeepSpeed configuration with --ddp");
  if (t.zero != 0) return InputError("--zero", std::to_string(t.zero), "0 with --ddp (DDP replicates every state)");
  if (t.finetune == Finetune::qlora) {
    return InputError("--finetune", "qlora", "full or lora with --ddp (bitsandbytes' NF4 weights without DeepSpeed are not modelled)");
  }
  // The Trainer's adamw_torch_fused, adamw_bnb_8bit and adafactor (hf_ddp.cpp).
  if (t.optimizer != OptimizerKind::adamw && t.optimizer != OptimizerKind::adam8bit && t.optimizer != OptimizerKind::adafactor) {
    return InputError("--optimizer", std::string(name_of(t.optimizer)),
                      "adamw, adam8bit or adafactor with --ddp (the Trainer's adamw_torch_fused, adamw_bnb_8bit and "
                      "adafactor)");
  }
  // Parameters loaded in fp32 under the Trainer's bf16 autocast make the residual stream, the
  // norms and the embedding fp32 and add autocast's cached bf16 weight copies: not modelled.
  if (t.precision.weights != DType::bf16 || t.activation_dtype != DType::bf16) {
    return InputError("--params-dtype", std::string(name_of(t.precision.weights)),
                      "bf16 with --ddp (a model loaded in bf16; fp32 weights under autocast are not modelled)");
  }
  if (t.optimizer_offload > 0) return InputError("--optimizer-cpu-offload", "set", "no offload with --ddp");
  return std::nullopt;
}

std::optional<InputError> hf_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t) {
  if (!supported_type(m.model_type)) {
    return InputError("--model", m.model_type,
                      "a model_type whose Hugging Face modeling code the hf profile follows: llama, mistral, qwen3, "
                      "qwen3_moe, mixtral, deepseek_v3, gpt_oss");
  }
  if (auto e = hf_gpt_oss_check(m, t)) return e;
  if (m.mtp_layers > 0) {
    return InputError("--mtp", std::to_string(m.mtp_layers), "0 with the hf profile (HF's DeepseekV3 code has no MTP layers)");
  }
  if (auto e = hf_layout_check(layout)) return e;
  if (routing_options_set(t)) {
    return InputError("--moe-imbalance/--moe-capacity-factor/--moe-token-dispatcher", "set",
                      "none with the hf profile (every expert is local: its loop computes b*s*top_k rows whatever the routing)");
  }
  if (auto e = refuse_dropout("hf", t)) return e;
  if (t.transformers_version == TransformersVersion::v4 && t.experts_implementation == ExpertsImplementation::grouped_mm) {
    return InputError("--experts-implementation", "grouped_mm",
                      "eager with --transformers-version 4 (grouped_mm experts came with transformers 5)");
  }
  if (auto e = refuse_megatron_options("hf", t)) return e;
  if (auto e = refuse_logits_dtype("hf", t, "the loss upcasts the bf16 logits to fp32 itself, as modelled")) return e;
  if (auto e = refuse_fsdp2_options("hf", t, t.accelerate_fsdp())) return e;
  if (auto e = hf_fsdp_check(t)) return e;
  if (auto e = hf_ddp_check(t)) return e;
  if (t.deepspeed_release != 0 && (t.hf_ddp || t.accelerate_fsdp())) {
    return InputError("--deepspeed-version", deepspeed_version_name(t.deepspeed_release),
                      "current without DeepSpeed (--ddp, --fsdp1 and --fsdp2 run none)");
  }
  // 8-bit Adam and Adafactor size their states by the tensors they step: the model's under --ddp,
  // DeepSpeed's flat partitions under ZeRO 1-3 (hf_deepspeed.cpp). FSDP's sharded parameters
  // (FSDP1's flat ones, FSDP2's DTensors) are not modelled, nor DeepSpeed without ZeRO.
  if (!t.hf_ddp && (t.optimizer == OptimizerKind::adam8bit || t.optimizer == OptimizerKind::adafactor) &&
      (t.accelerate_fsdp() || t.zero < 1)) {
    return InputError("--optimizer", std::string(name_of(t.optimizer)),
                      fmt::format("adamw, sgd or lion {}, or {} with --ddp or DeepSpeed ZeRO 1-3 (the tensors FSDP "
                                  "steps, and DeepSpeed's without ZeRO, are not modelled for it)",
                                  t.accelerate_fsdp() ? "under FSDP" : "under DeepSpeed without ZeRO", name_of(t.optimizer)));
  }
  if (auto e = refuse_finetune("hf", t, true,
                               {OptimizerKind::adamw, OptimizerKind::sgd, OptimizerKind::lion, OptimizerKind::adam8bit,
                                OptimizerKind::adafactor},
                               true)) {
    return e;
  }
  // ZeRO-3 with 4-bit weights needs bnb_4bit_quant_storage set to the float dtype so that DeepSpeed
  // can flatten and partition them: a different storage, not modelled.
  if (t.finetune == Finetune::qlora && t.zero >= 3) {
    return InputError("--zero", std::to_string(t.zero),
                      "0, 1 or 2 with --finetune qlora under the hf profile (QLoRA under ZeRO-3 stores the NF4 codes in "
                      "bnb_4bit_quant_storage and partitions them: not modelled)");
  }
  if (t.fp8 != Fp8Recipe::none) return InputError("--fp8", std::string(name_of(t.fp8)), "none with the hf profile");
  // DeepSpeed offloads the whole optimizer partition, and only from ZeRO stage 1 up
  // (zero/offload_config.py; stage_1_and_2.py cpu_offload), with the staging buffers hf_deepspeed.cpp adds.
  if (t.optimizer_offload > 0 && (t.zero < 1 || t.optimizer_offload != 1.0)) {
    return InputError("--optimizer-cpu-offload/--optimizer-offload-fraction",
                      fmt::format("fraction {} at ZeRO {}", t.optimizer_offload, t.zero),
                      "fraction 1 at --zero 1, 2 or 3 with the hf profile (DeepSpeed's offload_optimizer moves the "
                      "whole optimizer partition)");
  }
  if (t.recompute == Recompute::selective) {
    return InputError("--recompute", "selective",
                      "none or full with the hf profile (gradient_checkpointing checkpoints whole decoder layers)");
  }
  if (t.recompute == Recompute::full && (t.recompute_method != RecomputeMethod::uniform || t.recompute_num_layers != 1)) {
    return InputError("--recompute-method/--recompute-num-layers", "set",
                      "uniform and 1 with the hf profile (each decoder layer is its own checkpoint)");
  }
  return std::nullopt;
}

}  // namespace

const Profile kHf{
    .name = "hf",
    .summary = "Hugging Face transformers modeling code (eager, sdpa or flash-attention-2), data-parallel under DeepSpeed "
               "ZeRO 0-3 (--zero or --deepspeed ds_config.json), gradient checkpointing per decoder layer, LoRA and QLoRA",
    .assumptions =
        {
            "decoder layers save what HF's modeling code saves under eager autograd (checked tensor by tensor against "
            "PyTorch on the CPU for llama, qwen3_moe, mixtral, deepseek_v3 and gpt_oss: tests/groundtruth/check_hf.py); "
            "MoE blocks as transformers 5 (--transformers-version 5, the default) runs them, grouped_mm unless "
            "--experts-implementation eager (the loop over hit experts), b*s*top_k gathered rows in all, and routers in "
            "bf16 (checked against what PyTorch saved on a GPU with transformers 5.17: tests/unit/test_hf_profile.cpp); "
            "--transformers-version 4: 4.x's loop and DeepSeek-V3's fp32 router",
            "gpt_oss: eager attention with sinks (softmax in bf16 over s + 1 columns), the clamped SwiGLU's "
            "intermediates; under transformers 4 a copy of each hit expert's gate_up_proj and down_proj too (indexing "
            "the 3-D parameters with a tensor copies them; each product saves its copy; every expert taken as hit), "
            "under 5 none (integer indexing: views); its norms' fp32 weights counted "
            "as bf16 (a few KB); LoRA adapts its attention only (PEFT's target_parameters for the experts not modelled)",
            "RMSNorm keeps an fp32 copy of its input; eager attention keeps the fp32 softmax and its bf16 cast, K and V "
            "repeated to every head; flash-attention-2 keeps q, k, v, output and log-sum-exp; sdpa (no padding mask, "
            "torch >= 2.5: is_causal and enable_gqa) runs PyTorch's flash kernel and keeps the same, or its "
            "memory-efficient kernel where v's head size differs (MLA: no padding of v)",
            "Qwen3-MoE renormalises the top-k weights (norm_topk_prob true, as its released configs)",
            "gradient checkpointing (--recompute full) keeps each decoder layer's input; one layer is recomputed at a "
            "time",
            "without --fsdp1 or --fsdp2, DeepSpeed: ZeRO stages shard optimizer states (1), gradients (2) and weights "
            "(3) over dp; no tp/pp/cp/ep; ZeRO 0 as DeepSpeed >= 0.17.6 runs it (earlier: --deepspeed-version): bf16 "
            "gradients, fp32 master copies and moments, and fp32 gradients for the master at the step (4 bytes per "
            "trainable parameter, 8 with the config's FusedAdam)",
            "without --fsdp1 or --fsdp2, DeepSpeed's buffers from the ds_config, or its defaults for a bare --zero: "
            "reduce buckets (two with overlap_comm below stage 3), ZeRO-3's persistent parameters and its gathered module plus prefetch bucket; "
            "parameters kept gathered by stage3_max_reuse_distance are not counted",
            "loss: ForCausalLMLoss upcasts the logits; log_softmax keeps fp32 log-probabilities",
            "LoRA as PEFT: all-linear adapts every nn.Linear but lm_head (Mixtral's and Qwen3-MoE's router gate too); "
            "QLoRA stores those linears as bitsandbytes NF4 (blocks of 64, double-quantised absmax), everything else "
            "bf16; prepare_model_for_kbit_training's fp32 upcast of the other parameters (TRL, axolotl) is not modelled",
        },
    .check = hf_check,
    .tp_split = megatron_tp_split,
    .zero_group = megatron_zero_group,
    .accounts = megatron_accounts,
    .states = &detail::kHfStates,
    // DeepSpeed bf16 with ZeRO: bf16 module weights, fp32 master copies and Adam moments
    // (stage_1_and_2.py single_partition_of_fp32_groups, optimizer state on them), fp32 gradient
    // partitions for the step.
    .default_precision = {.weights = DType::bf16,
                          .gradients = DType::fp32,
                          .master = DType::fp32,
                          .exp_avg = DType::fp32,
                          .exp_avg_sq = DType::fp32},
    .include_mtp_by_default = false,
    .vocab_multiple = 0,
    .default_attention = AttentionKernel::flash,
    .supports_flash = true,
    .selective_recompute = false,
    .models_fp8_and_routing = false,
    .layer_activations = hf_layer_activations,
    .chunk_activations = hf_chunk_activations,
    .loss_peak = hf_loss_peak,
    .single_microbatch = false,
    .recompute_transient = true,
    .overhead = {.buffers_low = Bytes{},
                 .buffers_high = Bytes{},
                 .fragmentation_pct_low = 5,
                 .fragmentation_pct_high = 5,
                 // What one process holds outside PyTorch's allocator once a transformers training
                 // step has run: 767 MiB, measured on an H200 (driver 580, CUDA 13.0, torch 2.11):
                 // 619 MiB of context, 130 MiB of cuBLAS/cuBLASLt modules, 16 of sdpa's flash
                 // kernels, 2 of fused AdamW's and the loss's (scripts/measure/hf_step_memory.py
                 // --extra; docs/validation.md). Above the 0.52 GiB the other profiles cite.
                 .cuda_context = Bytes(767ULL << 20),
                 .nccl_world = Bytes::from_gib(0.39),
                 .nccl_per_group = Bytes::from_gib(0.4)},
    .peft_modules = true,
    .supports_sdpa = true,
};

}  // namespace moemem::profiles
