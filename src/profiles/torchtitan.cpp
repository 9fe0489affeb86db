// torchtitan (FSDP2), after
// pytorch/torchtitan's Llama-3 model and parallelize_llama.py: TP plan colwise wq/wk/wv/w1/w3 and
// output, rowwise wo/w2 and the embedding (vocabulary rows), norms sequence-parallel; FSDP2 over
// dp_shard x cp with bf16 parameters and fp32 reduction; activation checkpointing "full" or
// "selective" per op (_save_list: every mm output except every second one, SDPA outputs,
// reduce_scatter outputs, max).
#include <cstdint>
#include <string>
#include <vector>

#include "moemem/activation.hpp"
#include "moemem/errors.hpp"
#include "moemem/profile.hpp"
#include "shared.hpp"

namespace moemem::profiles {

namespace {

// Appended to a refusal of the recomputation when it is torchtitan's default rather than asked for.
std::string defaulted_note(const TrainingConfig& t) {
  return t.recompute_defaulted ? "; this is torchtitan's default for the release, used because --recompute was not given"
                               : "";
}


struct TitanDims {
  std::int64_t tokens, tokens_sp, tp, q, kv, heads, ffn;
};

// torchtitan's deepseek_v3 model: MLA attention with routed experts (no DSA indexer).
bool titan_deepseek(const ModelSpec& m) { return m.attention == AttentionKind::mla && m.is_moe() && !m.has_indexer(); }
// torchtitan's Qwen3 MoE (experiments/qwen3 from bd3850be8; models/qwen3 now): Qwen3's attention
// with the token-choice MoE of models/moe.py.
bool titan_qwen3_moe(const ModelSpec& m) { return m.model_type == "qwen3_moe" && m.attention == AttentionKind::gqa; }
// torchtitan's gpt-oss (models/gpt_oss from de335b321, 2025-10-22; modelled at c5d93d109).
bool titan_gpt_oss(const ModelSpec& m) { return m.model_type == "gpt_oss"; }
bool titan_moe(const ModelSpec& m) { return titan_deepseek(m) || titan_qwen3_moe(m) || titan_gpt_oss(m); }

// The models a torchtitan path trains here: Llama-style dense GQA decoders, DeepSeek-V3-style
// MLA + MoE, Qwen3 MoE and gpt-oss; the refusal of any other.
bool titan_trains(const ModelSpec& m) { return titan_moe(m) || (m.attention == AttentionKind::gqa && !m.is_moe()); }
InputError titan_not_trained(const ModelSpec& m) {
  return InputError("--profile", "torchtitan",
                    fmt::format("dense decoders with multi-/grouped-query attention (Llama-style), DeepSeek-V3-style "
                                "MLA + MoE models (torchtitan's deepseek_v3), qwen3_moe (torchtitan's Qwen3 MoE) or gpt_oss; "
                                "{} is none of them (not modelled)",
                                m.model_type));
}

TitanDims titan_dims(const ActivationContext& c) {
  const auto& m = c.model;
  const auto& p = c.layout.config;
  if (!titan_trains(m)) throw titan_not_trained(m);
  const std::int64_t tokens = c.training.micro_batch * (c.training.seq_len / p.cp);
  return {tokens,         tokens / p.tp,  p.tp, m.num_heads / p.tp * m.head_dim, m.num_kv_heads / p.tp * m.head_dim,
          m.num_heads / p.tp, m.dense_ffn / p.tp};
}

// One block, one micro-batch. Under per-op SAC (Recompute::selective) the block keeps its input,
// the outputs of the 1st, 3rd, 5th and 7th matmuls (wq, wv, w1, w2), SDPA's output and
// log-sum-exp, and with TP the reduce-scatter outputs; torch.compile drops what no backward
// kernel reads (w2's output feeds only the residual add, as do the reduce-scatter outputs).
// Without checkpointing: what eager autograd saves (repeated K and V, every
// SwiGLU operand), or, compiled, what the fused kernels read back.
void titan_layer_activations(const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out) {
  if (c.model.attention == AttentionKind::mla) return titan_mla_moe_layer(c, kind, out);  // torchtitan_moe.cpp
  if (titan_gpt_oss(c.model)) return titan_gpt_oss_layer(c, out);                           // torchtitan_moe.cpp
  const auto& m = c.model;
  const auto d = titan_dims(c);
  const DType a = c.training.activation_dtype;
  const std::uint16_t rec = 0xFFFF;  // recomputed under per-op SAC
  auto add = [&](std::string_view name, Module mod, Count n, DType t, std::uint16_t dropped, std::string_view rule,
                 bool full = false, bool only_sac = false) {
    out.push_back({name, mod, n, t, full, dropped, rule, only_sac});
  };
  const bool compiled = c.training.compile;
  add("block.input", Module::attention, elems({d.tokens_sp, m.hidden}), a, 0, "b*s/cp/tp x h", true);
  add("attention_norm.output", Module::norms, elems({d.tokens, m.hidden}), a, rec, "b*s/cp x h (gathered for wq/wk/wv)");
  // apply_rotary_emb multiplies fp32 complex views of q and k by freqs_cis, a buffer: autograd's
  // mul saves only the operand the other's gradient needs (freqs_cis), so RoPE keeps no
  // activation (checked with saved_tensors_hooks on CPU PyTorch).
  // From 0.2.2 (ff0829c10, "GQA without kv repeats", 2026-01-27) SDPA takes K and V with their
  // own heads and enable_gqa; before, repeat_kv's expand + reshape copied them to every head.
  if (!compiled && c.training.torchtitan_version < TorchtitanVersion::v0_2_2 && m.num_kv_heads != m.num_heads) {
    add("sdpa.q", Module::attention, elems({d.tokens, d.q}), a, rec, "b*s/cp x heads/tp x head_dim");
    add("sdpa.k_repeated", Module::attention, elems({d.tokens, d.q}), a, rec, "b*s/cp x heads/tp x head_dim (repeat_kv)");
    add("sdpa.v_repeated", Module::attention, elems({d.tokens, d.q}), a, rec, "b*s/cp x heads/tp x head_dim (repeat_kv)");
  } else {
    add("sdpa.q", Module::attention, elems({d.tokens, d.q}), a, rec, "b*s/cp x heads/tp x head_dim");
    add("sdpa.k", Module::attention, elems({d.tokens, d.kv}), a, rec, "b*s/cp x kv_heads/tp x head_dim");
    add("sdpa.v", Module::attention, elems({d.tokens, d.kv}), a, rec, "b*s/cp x kv_heads/tp x head_dim");
  }
  add("sdpa.output", Module::attention, elems({d.tokens, d.q}), a, 0, "b*s/cp x heads/tp x head_dim");
  add("sdpa.logsumexp", Module::attention, elems({d.tokens, d.heads}), DType::fp32, 0, "b*s/cp x heads/tp, fp32");
  add("wo.input", Module::attention, elems({d.tokens, d.q}), a, rec, "b*s/cp x heads/tp x head_dim (contiguous)");
  add("ffn_norm.input", Module::norms, elems({d.tokens_sp, m.hidden}), a, rec, "b*s/cp/tp x h");
  if (kind == LayerKind::moe) {  // Qwen3 MoE, under full activation checkpointing only (titan_check)
    titan_qwen3_moe_ffn(c, out);  // torchtitan_moe.cpp
    return;
  }
  add("ffn_norm.output", Module::norms, elems({d.tokens, m.hidden}), a, rec, "b*s/cp x h (gathered for w1/w3)");
  add("w1.output", Module::dense_mlp, elems({d.tokens, d.ffn}), a, 0, "b*s/cp x ffn/tp");
  add("w3.output", Module::dense_mlp, elems({d.tokens, d.ffn}), a, rec, "b*s/cp x ffn/tp");
  if (!compiled) add("silu.output", Module::dense_mlp, elems({d.tokens, d.ffn}), a, rec, "b*s/cp x ffn/tp");
  add("w2.input", Module::dense_mlp, elems({d.tokens, d.ffn}), a, rec, "b*s/cp x ffn/tp");
  // Cached by per-op SAC only.
  add("sac.wq_output", Module::attention, elems({d.tokens, d.q}), a, 0, "b*s/cp x heads/tp x head_dim", false, true);
  add("sac.wv_output", Module::attention, elems({d.tokens, d.kv}), a, 0, "b*s/cp x kv_heads/tp x head_dim", false, true);
  if (!compiled) {
    add("sac.w2_output", Module::dense_mlp, elems({d.tokens, m.hidden}), a, 0, "b*s/cp x h (partial sums under TP)",
        false, true);
    if (d.tp > 1) {
      add("sac.wo_reduce_scatter", Module::attention, elems({d.tokens_sp, m.hidden}), a, 0, "b*s/cp/tp x h", false, true);
      add("sac.w2_reduce_scatter", Module::dense_mlp, elems({d.tokens_sp, m.hidden}), a, 0, "b*s/cp/tp x h", false, true);
    }
  }
}

void titan_chunk_activations(const ActivationContext& c, const Chunk& chunk, std::vector<ActivationTerm>& out) {
  const auto d = titan_dims(c);
  const DType a = c.training.activation_dtype;
  if (chunk.embedding) out.push_back({"embedding.token_ids", Module::embedding, elems({d.tokens}), DType::int64, false, 0, "b*s/cp", false});
  // A pipeline chunk before the loss keeps its output (the next chunk's input, the root of its
  // backward) from its forward to its backward: torch.distributed.pipelining stage.py
  // forward_one_chunk stores fwd_cache[mb] = (output_tuple, inputs), popped by backward_one_chunk.
  // Sequence-parallel under TP (w2's RowwiseParallel output_layouts=Shard(1), local tensor).
  if (!chunk.loss && c.layout.config.pp > 1) {
    out.push_back({"stage.output", Module::attention, elems({d.tokens_sp, c.model.hidden}), a, true, 0,
                   "b*s/cp/tp x h (held for the stage's backward)", false});
  }
  if (chunk.loss) {
    out.push_back({"norm.input", Module::output_head, elems({d.tokens_sp, c.model.hidden}), a, false, 0, "b*s/cp/tp x h", false});
    out.push_back({"output.input", Module::output_head, elems({d.tokens, c.model.hidden}), a, false, 0,
                   "b*s/cp x h (gathered for the vocab-parallel output)", false});
  }
}

// The loss at the start of backward, one micro-batch (logits b*s/cp x vocab/tp):
// upcast: cross_entropy(logits.float()) keeps fp32 log-probabilities; its backward holds them,
// the nll gradient and the log_softmax gradient (3 fp32 copies; 4 under TP's loss_parallel,
// whose distributed log_softmax keeps the shifted logits too); the bf16 logits, freed before,
// leave a block the fp32 ones cannot reuse. fused (compiled loss): bf16 logits and their bf16
// gradient. chunked: fp32 log-probabilities of every chunk plus two chunks' fp32 temporaries
// (torchtune's 8 chunks).
// torchtitan's ChunkedCELoss (components/loss.py, 786e26f8e, 2026-04-27: the loss of the shipped
// configs at c5d93d109, `current`, whose trainer wires it into the pipeline's last stage too) runs
// lm_head and the cross entropy on 8 chunks of the sequence during the forward, each followed by
// its backward, all decoder activations saved: at a chunk's backward it holds the GradAccumulator's
// fp32 [T, h] buffer, lm_head's fp32 unsharded gradient accumulated over the chunks (gradient sync
// off until the last) and one chunk's bf16 weight gradient, and that chunk's loss (upcast: 3 fp32
// logits copies, 4 under loss parallel, plus its bf16 logits; compiled: bf16 logits and gradient).
// lm_head's input is the replicated hidden states, the head's gathered input already counted.
bool titan_chunked_ce(const TrainingConfig& t) {
  if (t.torchtitan_version != TorchtitanVersion::current) return false;
  return !t.loss || *t.loss == LossImpl::chunked;
}

LossPeak titan_chunked_ce_peak(const ActivationContext& c) {
  const auto d = titan_dims(c);
  constexpr std::uint64_t kChunks = 8;
  const auto tokens = static_cast<std::uint64_t>(d.tokens);
  const Count chunk_logits(checked_mul(ceil_div(tokens, kChunks), static_cast<std::uint64_t>(c.padded_vocab / d.tp), "loss"));
  const Bytes fp32 = bytes_of(chunk_logits, DType::fp32), bf16 = bytes_of(chunk_logits, c.training.activation_dtype);
  const Bytes chunk = c.training.compile ? bf16 + bf16 : Bytes(checked_mul(fp32.value(), d.tp > 1 ? 4 : 3, "loss")) + bf16;
  const auto hidden = static_cast<std::uint64_t>(c.model.hidden);
  const Bytes accumulator(checked_mul(checked_mul(tokens, hidden, "loss"), 4, "loss"));
  const Bytes head_grads(checked_mul(checked_mul(static_cast<std::uint64_t>(c.padded_vocab / d.tp), hidden, "loss"), 4 + 2, "loss"));
  return {accumulator + head_grads + chunk, Bytes{}, "loss chunked (ChunkedCELoss, 8 chunks) in the forward's chunk loop"};
}

LossPeak titan_loss_peak(const ActivationContext& c) {
  if (titan_chunked_ce(c.training)) return titan_chunked_ce_peak(c);
  const auto d = titan_dims(c);
  const Count logits = elems({d.tokens, c.padded_vocab}, d.tp);
  const Bytes fp32 = bytes_of(logits, DType::fp32), bf16 = bytes_of(logits, c.training.activation_dtype);
  switch (effective_loss(c.training)) {
    case LossImpl::upcast:
      return {Bytes(checked_mul(fp32.value(), d.tp > 1 ? 4 : 3, "loss")), bf16, "loss upcast at the start of backward"};
    case LossImpl::fused: return {bf16 + bf16, Bytes{}, "loss fused at the start of backward"};
    case LossImpl::chunked:
      return {fp32 + Bytes(ceil_div(checked_mul(fp32.value(), 2, "loss"), 8)), Bytes{}, "loss chunked at the start of backward"};
  }
  return {};
}

// FSDP2 shards every state itself (no ZeRO stage), and float8 all-gathers need float8 layers;
// routing options need routed experts.
// torchtitan's DeepSeek-V3 as added in d54d05a5 (PR 1373: FSDP, HSDP, full or no activation
// checkpointing, TP and EP; "To be added": CP, PP, torch.compile, quantisation). moemem models its
// FSDP, its EP and its TP plan with ep 1 (torchtitan_moe.cpp); TP and EP together are refused.
// Qwen3 MoE (bd3850be8) is costed with the same MoE block, so with the same limits: what later
// torchtitan added for it (pipeline and context parallelism, compile, float8 experts) is refused,
// not modelled.
std::optional<InputError> titan_mla_moe_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t) {
  const auto& p = layout.config;
  const std::string model = titan_deepseek(m)   ? "torchtitan's DeepSeek-V3 model"
                            : titan_gpt_oss(m) ? "torchtitan's gpt-oss model"
                                               : "torchtitan's Qwen3 MoE model";
  const std::string why = "1 for " + model;
  const std::string later = titan_deepseek(m)   ? "came after d54d05a5; not modelled"
                            : titan_gpt_oss(m) ? "not modelled (pipeline_llm is wired for it at c5d93d109; its README "
                                                 "lists CP and PP as to do)"
                                               : "not modelled for its MoE block, costed as d54d05a5's";
  // gpt-oss came with 0.2.1 (de335b321); its block is costed as c5d93d109 builds it.
  if (titan_gpt_oss(m) && t.torchtitan_version != TorchtitanVersion::current) {
    return InputError("--torchtitan-version", std::string(name_of(t.torchtitan_version)),
                      "current for torchtitan's gpt-oss model (modelled as models/gpt_oss builds it at c5d93d109; "
                      "0.2.1 and 0.2.2 built it from other modules)");
  }
  if (p.tp > 1 && p.ep > 1) {
    return InputError("--tp/--ep", fmt::format("tp {} with ep {}", p.tp, p.ep),
                      titan_gpt_oss(m)
                          ? fmt::format("one of them 1 for {} (TP and EP together, where the tensor-parallel ranks split the "
                                        "MoE's tokens before the all-to-all, is not modelled)",
                                        model)
                          : fmt::format("one of them 1 for {} (ExpertTensorParallel, the two together, is not modelled)", model));
  }
  if (p.tp > 1 && p.etp_degree() != p.tp) {
    return InputError("--etp", std::to_string(p.etp_degree()),
                      fmt::format("{} (= tp) for {}: apply_moe_ep_tp shards every routed expert over the tensor-parallel "
                                  "group (TensorParallel) when ep is 1",
                                  p.tp, model));
  }
  if (p.pp != 1) return InputError("--pp", std::to_string(p.pp), fmt::format("{} (pipeline parallelism {})", why, later));
  if (p.cp != 1) return InputError("--cp", std::to_string(p.cp), fmt::format("{} (context parallelism {})", why, later));
  if (p.ep > 1 && (p.dp / t.dp_replicate) % p.ep != 0) {
    return InputError("--ep", std::to_string(p.ep), "a divisor of the FSDP shard degree (dp / dp_replicate): torchtitan takes "
                                                    "expert parallelism from dp_shard (dp_shard_in_ep)");
  }
  if (t.recompute == Recompute::selective) {
    return InputError("--recompute", "selective",
                      fmt::format("none or full for {} (its per-op list not modelled){}", model, defaulted_note(t)));
  }
  if (t.compile) {
    return InputError("--compile", "set",
                      titan_deepseek(m) ? "off for torchtitan's DeepSeek-V3 model (it raised NotImplementedError)"
                                        : fmt::format("off for {} (compiled MoE blocks not modelled)", model));
  }
  if (t.fp8 != Fp8Recipe::none) return InputError("--fp8", std::string(name_of(t.fp8)), "none for " + model);
  if (t.moe_capacity_factor || t.deepep || t.allgather) {
    return InputError("--moe-capacity-factor/--moe-token-dispatcher", "set", "neither with torchtitan (dropless all-to-all)");
  }
  if (t.attention && *t.attention != AttentionKernel::flash) {
    return InputError("--attention", std::string(name_of(*t.attention)),
                      titan_gpt_oss(m) ? fmt::format("flash for {} (its FlexAttention with sinks is costed; no other kernel)", model)
                                       : fmt::format("flash for {} (SDPA's fused kernels; saved tensors as flash's)", model));
  }
  return std::nullopt;
}

// The dense path sizes torchtitan's Llama-3 block (models/llama3/model.py): RMSNorm without bias,
// RoPE through fp32 complex products, a SwiGLU FeedForward, no biased or gated extras. A model
// built otherwise would be costed with tensors it does not save (a GeLU MLP, LayerNorm, a learned
// position table: Megatron's GPT defaults), so it is refused by name. Qwen3's attention (torchtitan
// models/qwen3: per-head q_norm/k_norm, nn.RMSNorm, and a cos/sin RoPE) saves other tensors than
// Llama's; under full activation checkpointing a block keeps only its input, so only there is it
// costed (its one recomputed block with Llama's list, without the q/k norms' saved tensors).
std::optional<InputError> titan_dense_model_check(const ModelSpec& m, const TrainingConfig& t) {
  // Hybrid, sliding-window, Nemotron-NAS and Gemma models have refusals of their own, which name
  // what is not modelled.
  if (m.is_hybrid() || m.has_swa_dims() || !m.nas_blocks.empty() || m.sandwich_norms) return std::nullopt;
  // A model no torchtitan path trains is named as such before any setting is asked of it.
  // (DeepSeek sparse attention has its own refusal, which names it: analyze.cpp.)
  if (!titan_trains(m) && m.model_type != "llama4_text" && !m.has_indexer()) {
    return titan_not_trained(m);
  }
  const std::string why = fmt::format("a Llama-3-style block for the torchtitan profile (RMSNorm, RoPE, SwiGLU); {} has ", m.model_type);
  if (!m.gated_mlp) return InputError("--profile", "torchtitan", why + "a non-gated MLP (fc1 -> activation -> fc2): use --profile megatron");
  if (m.norm_bias) return InputError("--profile", "torchtitan", why + "LayerNorm with biases: use --profile megatron");
  if (m.learned_positions > 0) {
    return InputError("--profile", "torchtitan", why + "a learned absolute position table: use --profile megatron");
  }
  if (m.model_type == "llama4_text") {
    return InputError("--profile", "torchtitan",
                      why + "chunked attention, NoPE layers and interleaved MoE: torchtitan dropped its llama4 model "
                            "(d92336fee, 2026-06-08) and this profile does not model it; use --profile megatron");
  }
  if (m.attention_sinks || m.attn_output_gate || m.qk_l2_norm || m.qk_norm_full_width || m.head_bias) {
    return InputError("--profile", "torchtitan", why + "attention or norm variants the torchtitan profile does not model");
  }
  if (m.qk_norm && (t.recompute != Recompute::full || t.recompute_method == RecomputeMethod::every)) {
    return InputError(t.recompute_method == RecomputeMethod::every ? "--selective-ac-option" : "--recompute",
                      t.recompute_method == RecomputeMethod::every ? std::to_string(t.recompute_num_layers)
                                                                   : std::string(name_of(t.recompute)),
                      "full recomputation for a model with per-head q/k RMSNorm (Qwen3) under torchtitan: what its "
                      "attention saves without checkpointing (nn.RMSNorm on q and k, the cos/sin RoPE) is not modelled" +
                          defaulted_note(t));
  }
  return std::nullopt;
}

// What torchtitan fixes; a flag asking otherwise is refused, not echoed and ignored (its dtypes:
// Profile::fixed_precision, checked where the request is resolved). Attention is SDPA (flash); the
// loss's dtypes follow --loss and --compile. Float8 linears (torchao float8_linear.py
// matmul_with_hp_or_float8_args) save their bf16 input for backward, so --fp8 changes no
// activation; only --fsdp-float8-all-gather (tensorwise scaling) changes memory.
std::optional<InputError> titan_numerics_check(const TrainingConfig& t) {
  if (t.attention && *t.attention != AttentionKernel::flash) {
    return InputError("--attention", std::string(name_of(*t.attention)), "flash with the torchtitan profile (its attention is SDPA)");
  }
  if (t.logits_dtype != DType::fp32) {
    return InputError("--logits-dtype", std::string(name_of(t.logits_dtype)),
                      "fp32 with the torchtitan profile (--loss and --compile choose what the loss keeps)");
  }
  if (t.fp8 == Fp8Recipe::blockwise) {
    return InputError("--fp8", "blockwise",
                      "none, tensorwise, delayed (--torchtitan-version 0.1.0) or mxfp8 with the torchtitan profile (torchao "
                      "float8 and MX linears)");
  }
  // Delayed scaling left torchtitan with 2271b6386 (#812, 2025-01-31), before 0.1.0: only the
  // commits that 0.1.0 stands for (and before) have it.
  if (t.fp8 == Fp8Recipe::delayed && t.torchtitan_version != TorchtitanVersion::v0_1_0) {
    return InputError("--fp8", "delayed",
                      fmt::format("none, tensorwise or mxfp8 with --torchtitan-version {} (delayed scaling was removed in "
                                  "2271b6386, 2025-01-31; --torchtitan-version 0.1.0 covers the commits before it)",
                                  name_of(t.torchtitan_version)));
  }
  if (t.fsdp_float8_all_gather && t.fp8 != Fp8Recipe::tensorwise && t.fp8 != Fp8Recipe::delayed) {
    return InputError("--fp8", std::string(name_of(t.fp8)),
                      "tensorwise or delayed with --fsdp-float8-all-gather (torchao's float8 all-gather casts "
                      "tensorwise-scaled weights only)");
  }
  return std::nullopt;
}

// Decoder.Config.update_from_config (models/common/decoder.py, from 28483d0eb, 2026-05-28: the
// `current` release) raises when training.seq_len exceeds the first attention layer's RoPE
// max_seq_len, which each flavor sets (models/*/__init__.py at c5d93d109): 131072 for every
// llama3 flavor and gpt-oss 20b/120b, 4096 * 4 for every deepseek_v3 flavor, 4096 for every dense
// qwen3 flavor and 235B-A22B, 262144 for 30B-A3B. A Qwen3 MoE model of another size has no stock
// flavor (its own sets the limit): unchecked.
struct FlavorLimit {
  std::int64_t max_seq_len = 0;
  const char* flavors = "";
};
std::optional<FlavorLimit> titan_rope_limit(const ModelSpec& m) {
  if (titan_gpt_oss(m)) return FlavorLimit{131072, "gpt_oss 20b and 120b"};
  if (titan_deepseek(m)) return FlavorLimit{16384, "deepseek_v3 (every flavor: 4096 * 4)"};
  if (titan_qwen3_moe(m)) {
    if (m.hidden == 2048 && m.num_layers == 48) return FlavorLimit{262144, "qwen3 30B-A3B"};
    if (m.hidden == 4096 && m.num_layers == 94) return FlavorLimit{4096, "qwen3 235B-A22B"};
    return std::nullopt;
  }
  if (m.model_type == "qwen3") return FlavorLimit{4096, "qwen3 0.6B to 32B"};
  if (titan_trains(m) && !m.is_moe()) return FlavorLimit{131072, "llama3 (every flavor)"};
  return std::nullopt;
}

std::optional<InputError> titan_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t) {
  const ParallelConfig& p = layout.config;
  if (const auto limit = titan_rope_limit(m);
      limit && t.torchtitan_version == TorchtitanVersion::current && t.seq_len > limit->max_seq_len) {
    return InputError("--seq-len", std::to_string(t.seq_len),
                      fmt::format("at most {} with --torchtitan-version current (the RoPE max_seq_len of torchtitan's {} "
                                  "flavor: Decoder.Config.update_from_config raises above it)",
                                  limit->max_seq_len, limit->flavors));
  }
  // torch.distributed.pipelining's schedules: 1F1B, GPipe, Interleaved1F1B, LoopedBFS,
  // InterleavedZeroBubble, ZBVZeroBubble and DualPipeV. The bidirectional DualPipe (two model
  // copies) and Megatron's single-stage ZB-H1 are not among them.
  if (p.pp > 1 && (p.schedule == Schedule::dualpipe || p.schedule == Schedule::zb_h1)) {
    return InputError("--schedule", std::string(name_of(p.schedule)),
                      "1f1b, interleaved, gpipe or dualpipev with the torchtitan profile (torch.distributed.pipelining "
                      "has no bidirectional DualPipe and no single-stage ZB-H1)");
  }
  // Without FSDP (dp_shard 1 and cp 1; ParallelDims.fsdp_enabled) torchtitan up to 0.2.2 applies no
  // fully_shard and so no mixed-precision policy: distributed/utils.py maybe_enable_amp trains TP or
  // PP in fp32 ("Mixed precision training is disabled") and one device or DDP under torch.autocast
  // over fp32 weights. From 00b7f5693 (2026-04-09, `current`) fully_shard applies at dp_shard 1 too.
  if (t.torchtitan_version != TorchtitanVersion::current && p.dp / t.dp_replicate == 1 && p.cp == 1) {
    return InputError("--dp", std::to_string(p.dp),
                      fmt::format("an FSDP shard degree (dp / dp_replicate) above 1, or --cp above 1, with "
                                  "--torchtitan-version {}: without FSDP that release trains {} (maybe_enable_amp), "
                                  "which is not modelled; --torchtitan-version current applies FSDP2's mixed precision there",
                                  name_of(t.torchtitan_version),
                                  p.tp > 1 || p.pp > 1 ? "TP/PP in fp32" : "under torch.autocast over fp32 weights"));
  }
  // parallel_dims.py seq_len_divisor, asserted in each model's parallelize: sequence parallelism
  // splits the sequence by tp, context parallelism's load balancing into 2 x cp chunks (6204cdff9,
  // 2025-07-14; 0.1.0 asserted nothing).
  if (const std::int64_t divisor = 2 * p.tp * p.cp;
      t.torchtitan_version >= TorchtitanVersion::v0_2_0 && t.seq_len % divisor != 0) {
    return InputError("--seq-len", std::to_string(t.seq_len),
                      fmt::format("a multiple of 2 x tp x cp = {} with the torchtitan profile (parallel_dims.py "
                                  "seq_len_divisor: tp for sequence parallelism, 2 x cp for context parallelism's "
                                  "load-balanced chunks)",
                                  divisor));
  }
  // Qwen3 MoE: the dense path's checks first (its q/k norms need full checkpointing), then the MoE limits.
  if (!titan_deepseek(m) && !titan_gpt_oss(m)) {
    if (auto e = titan_dense_model_check(m, t)) return e;
  }
  if (titan_moe(m)) {
    if (auto e = titan_mla_moe_check(m, layout, t)) return e;
  }
  if (auto e = refuse_routing_without_experts(m, t)) return e;
  if (auto e = refuse_dropout("torchtitan", t)) return e;
  if (auto e = refuse_megatron_options("torchtitan", t)) return e;
  if (auto e = refuse_transformers_options("torchtitan", t)) return e;
  if (t.accelerate_fsdp() || t.fsdp_offload_params || t.hf_ddp) {
    return InputError("--fsdp1/--fsdp2/--fsdp-offload-params/--ddp", "set",
                      "the hf profile (torchtitan always runs FSDP2: the flags select FSDP for Hugging Face code)");
  }
  if (auto e = refuse_finetune("torchtitan", t, false, {OptimizerKind::adamw})) return e;
  if (t.optimizer_offload > 0) return InputError("--optimizer-cpu-offload", "set", "the megatron profile (Megatron-Core's offload)");
  if (t.zero != 0) {
    return InputError("--zero", std::to_string(t.zero), "0 with the torchtitan profile (FSDP2 shards parameters, gradients and states)");
  }
  if (t.fsdp_float8_all_gather && t.fp8 == Fp8Recipe::none) {
    return InputError("--fsdp-float8-all-gather", "set", "together with --fp8 (float8 linear layers)");
  }
  return titan_numerics_check(t);
}

}  // namespace

const Profile kTorchtitan{
    .name = "torchtitan",
    .summary = "torchtitan: FSDP2 (sharded fp32 parameters and AdamW states, bf16 working copies), TP with sequence-"
               "parallel norms and loss parallel, CP, per-op or full activation checkpointing, torch.compile, float8",
    .assumptions =
        {
            "FSDP2 over dp/dp_replicate x cp: fp32 parameter and AdamW shards; gradients are None until backward "
            "(zero_grad(set_to_none)) and counted at the optimizer step (fused AdamW, no temporary), whichever "
            "peak is higher",
            "bf16 unsharded copies after forward: from 0.2.0 the [norm, output] unit, and the embedding and the "
            "blocks only with PP or --reshard-after-forward never; up to 0.1.0 the root (embedding, final norm, "
            "output: FSDP keeps the root unsharded after forward) and the last block (all with PP)",
            "TP plan: colwise wq/wk/wv/w1/w3/output, rowwise wo/w2/embedding, sequence-parallel norms, loss parallel; "
            "no vocabulary padding",
            "activations: per-op SAC keeps each block's input, every other matmul output (wq, wv, w1, w2), SDPA "
            "output and log-sum-exp; full AC the block input; --compile drops saved tensors no backward reads",
            "loss at the start of backward: fp32 log-probabilities and gradients (upcast), bf16 logits and gradient "
            "(fused, --compile), or chunked (--loss; with current the default without PP: ChunkedCELoss, lm_head and "
            "loss on 8 chunks in the forward)",
            "reserved - allocated: FSDP's all-gather and reduce-scatter buffers cached on their own streams (root and "
            "two blocks, fp32 reduction inputs and outputs) and the bf16 logits' block the fp32 loss cannot reuse",
            "device total adds CUDA context 0.52 GiB + NCCL 0.39 GiB + 0.4 GiB per further process group",
        },
    .check = titan_check,
    // The Llama TP plan splits the same matrices as Megatron-Core; FSDP2 has one group for all states.
    .tp_split = megatron_tp_split,
    .zero_group = megatron_zero_group,
    .accounts = megatron_accounts,
    .states = &detail::kFsdp2States,
    // FSDP2 mixed precision: fp32 sharded parameters (they are the master weights), bf16 all-gathered
    // working copies, fp32 reduce-scatter into fp32 sharded gradients, fp32 AdamW moments.
    .default_precision = {.weights = DType::bf16,
                          .gradients = DType::fp32,
                          .master = DType::fp32,
                          .exp_avg = DType::fp32,
                          .exp_avg_sq = DType::fp32},
    .include_mtp_by_default = false,
    .vocab_multiple = 0,
    .default_attention = AttentionKernel::flash,
    .etp_follows_tp_without_ep = true,
    .sp_with_tp = true,
    .supports_flash = true,
    .selective_recompute = true,
    .models_fp8_and_routing = true,
    .layer_activations = titan_layer_activations,
    .chunk_activations = titan_chunk_activations,
    .loss_peak = titan_loss_peak,
    .single_microbatch = false,
    .recompute_transient = true,
    .overhead = {.buffers_low = Bytes{},
                 .buffers_high = Bytes{},
                 .fragmentation_pct_low = 0,
                 .fragmentation_pct_high = 0,
                 .cuda_context = Bytes::from_gib(0.52),
                 .nccl_world = Bytes::from_gib(0.39),
                 .nccl_per_group = Bytes::from_gib(0.4)},
    .fixed_precision = true,
};

}  // namespace moemem::profiles
