// torchtitan's DeepSeek-V3 model (MLA attention, dense first layers, token-choice MoE with shared
// experts) as torchtitan trained it when it was added: pytorch/torchtitan d54d05a5 (2025-07-11,
// PR 1373) torchtitan/models/deepseek_v3/model/{model,moe}.py, its experts wrapped by
// experiments/llama4/infra/expert_parallel.py (expert_parallel, ExpertParallel) and sharded by
// experiments/llama4/infra/parallelize.py apply_fsdp. What one block saves for backward in eager
// PyTorch (torchtitan refused torch.compile for it); under full activation checkpointing only the
// block input, and the whole list comes back one block at a time in backward.
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "moemem/activation.hpp"
#include "moemem/errors.hpp"
#include "shared.hpp"

namespace moemem::profiles {

namespace {

constexpr std::int64_t kAlignRows = 16;  // expert_parallel: ALIGN_SIZE_M, each local expert's rows padded to it

// Attention (model.py Attention.forward): the block input (attention_norm's input) and the norm's
// output, read by wq (or wq_a) and wkv_a; with q_lora_rank, wq_a's output (q_norm's input) and
// q_norm's output (wq_b's input); apply_rotary_emb multiplies fp32 complex views of q_pe and k_pe
// by freqs_cis, a buffer, and autograd's mul saves only freqs_cis (the operand x's gradient
// needs), so RoPE keeps nothing of activation size; kv_norm's input is a slice of
// wkv_a's output (the whole output stays), its output is wkv_b's input; q and k are new tensors
// (torch.cat of the nope and rope parts, k_pe expanded to every head); v is a slice of wkv_b's
// output, so SDPA keeps that whole output; SDPA's memory-efficient kernel (the qk and v head sizes
// differ) saves q, k, v, its output (wo's input) and an fp32 log-sum-exp per head and token.
// Under TP (deepseek_v3/infra/parallelize.py apply_non_moe_tp at d54d05a5): attention_norm is
// sequence-parallel (the block input b*s/tp x h) and the attention's input is all-gathered (b*s x
// h, read by wq/wq_a and wkv_a); wq or wq_b and wkv_b are column-parallel (heads/tp), wkv_a,
// kv_norm, wq_a and q_norm replicated (NoParallel: whole outputs on every rank), wo row-parallel
// into a reduce-scatter.
void mla_attention(const ActivationContext& c, std::int64_t tokens, Terms& t) {
  const auto& m = c.model;
  const auto& a = m.mla;
  const std::int64_t tp = c.layout.config.tp;
  const std::int64_t heads = m.num_heads / tp, qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  t.add("block.input (attention_norm input)", Module::attention, elems({tokens / tp, m.hidden}), t.a, 0, "b*s/tp x h", true);
  t.add("attention_norm.output", Module::norms, elems({tokens, m.hidden}), t.a, 0, "b*s x h (wq/wkv_a input, gathered under TP)");
  if (a.q_lora_rank > 0) {
    t.add("wq_a.output (q_norm input)", Module::attention, elems({tokens, a.q_lora_rank}), t.a, 0, "b*s x q_lora_rank");
    t.add("q_norm.output (wq_b input)", Module::attention, elems({tokens, a.q_lora_rank}), t.a, 0, "b*s x q_lora_rank");
  }
  t.add("wkv_a.output (kv_norm input)", Module::attention, elems({tokens, a.kv_lora_rank + a.qk_rope_head_dim}), t.a, 0,
        "b*s x (kv_lora_rank + qk_rope_head_dim)");
  t.add("kv_norm.output (wkv_b input)", Module::attention, elems({tokens, a.kv_lora_rank}), t.a, 0, "b*s x kv_lora_rank");
  t.add("sdpa.q", Module::attention, elems({tokens, heads, qk}), t.a, 0, "b*s x heads/tp x (nope + rope)");
  t.add("sdpa.k", Module::attention, elems({tokens, heads, qk}), t.a, 0, "b*s x heads/tp x (nope + rope)");
  t.add("wkv_b.output (v is a slice)", Module::attention, elems({tokens, heads, a.qk_nope_head_dim + a.v_head_dim}), t.a, 0,
        "b*s x heads/tp x (nope + v_head_dim)");
  t.add("sdpa.output (wo input)", Module::attention, elems({tokens, heads, a.v_head_dim}), t.a, 0, "b*s x heads/tp x v_head_dim");
  t.add("sdpa.logsumexp", Module::attention, elems({tokens, heads}), DType::fp32, 0, "b*s x heads/tp, fp32");
}

// FeedForward / GroupedExperts with one expert (the shared experts: grouped_mm falls back to bmm):
// w1's and w3's outputs, silu's output (silu saves w1's output; the product saves silu's and w3's
// outputs) and the product (w2's input). `names`: the four terms' names.
using SwigluNames = std::array<const char*, 4>;
constexpr SwigluNames kDenseNames = {"feed_forward.w1_output", "feed_forward.silu_output", "feed_forward.w3_output",
                                     "feed_forward.w2_input"};
constexpr SwigluNames kExpertNames = {"experts.w1_output", "experts.silu_output", "experts.w3_output", "experts.w2_input"};
constexpr SwigluNames kSharedNames = {"shared_expert.w1_output", "shared_expert.silu_output", "shared_expert.w3_output",
                                      "shared_expert.w2_input"};
void swiglu(Terms& t, Module mod, const SwigluNames& names, std::int64_t rows, std::int64_t width, const char* rule) {
  for (const char* name : names) t.add(name, mod, elems({rows, width}), t.a, 0, rule);
}

// MoE.forward and TokenChoiceTopKRouter: the gate's fp32 softmax (saved by gather), the top-k
// indices (gather), the sorting indices (indexing of the scores) and the token indices (gather
// and scatter_add, an expanded view of b*s*top_k int64). The routed rows are gathered (not saved),
// sent by all-to-all under EP (the buffers are not saved), padded by expert_parallel to a multiple
// of 16 per local expert and permuted (x[permuted_indices], saved by the grouped GEMMs); the
// experts' outputs are unpermuted into a new buffer, returned by all-to-all, cast to fp32 and
// multiplied by the fp32 scores (the product saves both), then cast back and scatter-added.
// Under TP with ep 1 (llama4/infra/parallelize.py apply_moe_ep_tp at d54d05a5): the MoE input is
// all-gathered (b*s x h, local), the router replicated (NoParallel), the routed experts and the
// shared expert TensorParallel (w1/w3 split on the hidden width, w2 on its input: widths /tp);
// the Partial output is reduce-scattered, nothing of it saved.
void token_choice_moe(const ActivationContext& c, std::int64_t tokens, Terms& t) {
  const auto& m = c.model;
  const auto& e = m.moe;
  const auto& p = c.layout.config;
  const auto routed = static_cast<std::int64_t>(elems({tokens, e.top_k}).value());
  // The hottest rank's rows (--moe-imbalance, 1: balanced routing).
  const auto hottest = static_cast<std::int64_t>(std::ceil(static_cast<double>(routed) * c.training.moe_imbalance));
  const std::int64_t local_experts = e.num_routed_experts / p.ep;
  const std::int64_t padded = hottest + 1 + local_experts * kAlignRows;  // vstack's zero row, then the padding bound
  t.add("ffn_norm.output (router and shared-expert input)", Module::norms, elems({tokens, m.hidden}), t.a, 0, "b*s x h");
  t.add("router.scores (fp32 softmax)", Module::router, elems({tokens, e.num_routed_experts}), DType::fp32, 0,
        "b*s x experts, fp32");
  t.add("router.topk_indices", Module::router, elems({tokens, e.top_k}), DType::int64, 0, "b*s x top_k, int64");
  t.add("router.sorted_indices", Module::router, elems({routed}), DType::int64, 0, "b*s*top_k, int64");
  t.add("moe.token_indices", Module::router, elems({routed}), DType::int64, 0, "b*s*top_k, int64 (expanded view)");
  t.transient("moe.routed_input (gathered)", Module::routed_experts, elems({routed, m.hidden}), 0, "b*s*top_k x h");
  if (p.ep > 1) {
    t.transient("moe.dispatch all-to-all output", Module::routed_experts, elems({hottest, m.hidden}), 0,
                "b*s*top_k x imbalance x h (rows received)");
  }
  t.add("experts.input (padded, permuted)", Module::routed_experts, elems({padded, m.hidden}), t.a, 0,
        "(received rows + 1 + local experts x 16) x h");
  t.add("experts.permuted_indices", Module::routed_experts, elems({padded}), DType::int64, 0, "padded rows, int64");
  swiglu(t, Module::routed_experts, kExpertNames, padded, e.expert_ffn / p.tp, "padded rows x moe_inter_dim/tp");
  t.transient("experts.output", Module::routed_experts, elems({padded, m.hidden}), 0, "padded rows x h");
  t.transient("experts.output unpermuted", Module::routed_experts, elems({hottest + 1, m.hidden}), 0, "received rows x h");
  t.add("moe.routed_output (fp32 copy)", Module::routed_experts, elems({routed, m.hidden}), DType::fp32, 0,
        "b*s*top_k x h, fp32");
  t.add("moe.top_scores (fp32)", Module::router, elems({routed}), DType::fp32, 0, "b*s*top_k, fp32");
  if (e.shared_ffn > 0) swiglu(t, Module::shared_experts, kSharedNames, tokens, e.shared_ffn / p.tp, "b*s x shared width/tp");
}

}  // namespace

// Qwen3 MoE (torchtitan experiments/qwen3 from bd3850be8, 2025-09-11, on models/moe.py): the MoE
// block above with the router's route_norm (top_scores / denominator: the division saves both,
// b*s x top_k and b*s fp32) and no shared expert; cp and pp 1 (titan_check).
void titan_qwen3_moe_ffn(const ActivationContext& c, std::vector<ActivationTerm>& out) {
  Terms t{c, out};
  const std::int64_t tokens = c.training.micro_batch * c.training.seq_len;
  token_choice_moe(c, tokens, t);
  t.add("router.top_scores (route_norm numerator, fp32)", Module::router, elems({tokens, c.model.moe.top_k}), DType::fp32, 0,
        "b*s x top_k, fp32");
  t.add("router.denominator (route_norm, fp32)", Module::router, elems({tokens}), DType::fp32, 0, "b*s, fp32");
}

void titan_mla_moe_layer(const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out) {
  Terms t{c, out};
  const std::int64_t tokens = c.training.micro_batch * c.training.seq_len;  // cp and pp 1 (titan_check)
  const std::int64_t tp = c.layout.config.tp;
  mla_attention(c, tokens, t);
  t.add("ffn_norm.input", Module::norms, elems({tokens / tp, c.model.hidden}), t.a, 0, "b*s/tp x h (sequence-parallel)");
  if (kind == LayerKind::moe) {
    token_choice_moe(c, tokens, t);
    return;
  }
  t.add("ffn_norm.output (w1/w3 input)", Module::norms, elems({tokens, c.model.hidden}), t.a, 0, "b*s x h (gathered under TP)");
  swiglu(t, Module::dense_mlp, kDenseNames, tokens, c.model.dense_ffn / tp, "b*s x inter_dim/tp");
}

// torchtitan's gpt-oss (models/gpt_oss at c5d93d109, `current`; added in de335b321, 2025-10-22),
// one block in eager autograd (its trainer configs run full activation checkpointing, no compile):
// - Attention (model.py Attention.forward): attention_norm is nn.RMSNorm (the fused CUDA kernel
//   saves its input and an fp32 rstd per token); wq, wk and wv are three biased linears (addmm
//   saves their one shared input, gathered under TP); CosSinRoPE multiplies by cos and sin, views
//   of one fp32 per-layer gather of the cache (b*s x 2 x head_dim), and saves nothing of q or k;
//   FlexAttention (compiled even in an eager model) saves q, k, v with their own heads (enable_gqa),
//   its output and an fp32 log-sum-exp; the sink rescale saves sigmoid(lse - sinks) (fp32) and its
//   bf16 cast (the product's other operand is the saved output); wo saves the product.
// - MoE (common/moe.py, token_dispatcher.py, gpt_oss/moe.py): ffn_norm as above; the router's gate
//   runs under fp32 autocast, so it saves an fp32 copy of its input (the bf16 norm output is saved
//   by nothing), then the fp32 softmax, the top-k indices and route_norm's numerator and
//   denominator; the dispatch saves the sorting and token indices (b*s*top_k int64); the experts
//   save their routed input, two repeat_interleave indices for the biases, mlp1's output with its
//   bias (both clamps save strided views of it), the two clamp outputs, the sigmoid, out_glu and
//   the SwiGLU product (mlp2's input); the combine saves an fp32 copy of the experts' output and
//   the sorted fp32 scores; scatter_add saves its index only.
// Under TP (ep 1): norms sequence-parallel, attention and MoE inputs all-gathered (whole b*s),
// heads and the experts' hidden width split by tp. Under EP (tp 1): the standard all-to-all
// dispatcher (no padding rows), the experts' tensors sized by the rows this rank receives (the
// hottest rank under --moe-imbalance), and permute's indices.
void titan_gpt_oss_layer(const ActivationContext& c, std::vector<ActivationTerm>& out) {
  Terms t{c, out};
  const auto& m = c.model;
  const auto& e = m.moe;
  const auto& p = c.layout.config;
  const std::int64_t tp = p.tp, h = m.hidden;
  const std::int64_t tokens = c.training.micro_batch * c.training.seq_len;  // cp and pp 1 (titan_check)
  const std::int64_t q = m.num_heads / tp * m.head_dim, kv = m.num_kv_heads / tp * m.head_dim, heads = m.num_heads / tp;
  t.add("block.input (attention_norm input)", Module::attention, elems({tokens / tp, h}), t.a, 0, "b*s/tp x h", true);
  t.add("attention_norm.rstd", Module::norms, elems({tokens / tp}), DType::fp32, 0, "b*s/tp");
  t.add("attention_norm.output (wq/wk/wv input)", Module::norms, elems({tokens, h}), t.a, 0, "b*s x h (gathered under TP)");
  t.add("rope.cos_sin (cache[positions])", Module::attention, elems({tokens, 2 * m.head_dim}), DType::fp32, 0,
        "b*s x 2 x head_dim");
  t.add("flex.q", Module::attention, elems({tokens, q}), t.a, 0, "b*s x heads/tp x head_dim");
  t.add("flex.k", Module::attention, elems({tokens, kv}), t.a, 0, "b*s x kv_heads/tp x head_dim");
  t.add("flex.v (wv output)", Module::attention, elems({tokens, kv}), t.a, 0, "b*s x kv_heads/tp x head_dim");
  t.add("flex.output", Module::attention, elems({tokens, q}), t.a, 0, "b*s x heads/tp x head_dim");
  t.add("flex.logsumexp", Module::attention, elems({tokens, heads}), DType::fp32, 0, "b*s x heads/tp");
  t.add("sinks.sigmoid_output", Module::attention, elems({tokens, heads}), DType::fp32, 0, "b*s x heads/tp");
  t.add("sinks.scale (bf16 cast)", Module::attention, elems({tokens, heads}), t.a, 0, "b*s x heads/tp");
  t.add("wo.input (rescaled output)", Module::attention, elems({tokens, q}), t.a, 0, "b*s x heads/tp x head_dim");
  t.add("ffn_norm.input", Module::norms, elems({tokens / tp, h}), t.a, 0, "b*s/tp x h (sequence-parallel)");
  t.add("ffn_norm.rstd", Module::norms, elems({tokens / tp}), DType::fp32, 0, "b*s/tp");
  const auto routed = static_cast<std::int64_t>(elems({tokens, e.top_k}).value());
  // The rows this rank's experts receive: all of its own under ep 1, else the hottest rank's share.
  const std::int64_t rows =
      p.ep > 1 ? static_cast<std::int64_t>(std::ceil(static_cast<double>(routed) * c.training.moe_imbalance)) : routed;
  t.add("router.input (fp32 autocast copy)", Module::router, elems({tokens, h}), DType::fp32, 0, "b*s x h");
  t.add("router.scores (fp32 softmax)", Module::router, elems({tokens, e.num_routed_experts}), DType::fp32, 0,
        "b*s x experts");
  t.add("router.topk_indices", Module::router, elems({tokens, e.top_k}), DType::int64, 0, "b*s x top_k");
  t.add("router.top_scores (route_norm numerator, fp32)", Module::router, elems({tokens, e.top_k}), DType::fp32, 0,
        "b*s x top_k");
  t.add("router.denominator (route_norm, fp32)", Module::router, elems({tokens}), DType::fp32, 0, "b*s");
  t.add("dispatch.sorted_indices", Module::router, elems({routed}), DType::int64, 0, "b*s*top_k");
  t.add("dispatch.token_indices", Module::router, elems({routed}), DType::int64, 0, "b*s*top_k");
  if (p.ep > 1) t.add("dispatch.permuted_indices", Module::routed_experts, elems({rows}), DType::int64, 0, "rows received");
  const char* rows_rule_h = p.ep > 1 ? "rows received x h" : "b*s*top_k x h";
  const std::int64_t f = e.expert_ffn / tp;
  t.add("experts.input", Module::routed_experts, elems({rows, h}), t.a, 0, rows_rule_h);
  t.add("experts.bias_indices (2 repeat_interleave)", Module::routed_experts, elems({2, rows}), DType::int64, 0,
        p.ep > 1 ? "2 x rows received" : "2 x b*s*top_k");
  t.add("experts.mlp1_output (+ bias)", Module::routed_experts, elems({rows, 2 * f}), t.a, 0,
        p.ep > 1 ? "rows received x 2 x ffn/tp" : "b*s*top_k x 2 x ffn/tp");
  for (const char* name : {"experts.glu_clamped", "experts.linear_clamped", "experts.glu_sigmoid", "experts.out_glu",
                           "experts.swiglu_output (mlp2 input)"}) {
    t.add(name, Module::routed_experts, elems({rows, f}), t.a, 0, p.ep > 1 ? "rows received x ffn/tp" : "b*s*top_k x ffn/tp");
  }
  // The block's largest moment is the combine's cast of its fp32 product back to bf16 (the
  // dispatch's gathered rows and all-to-all buffers are freed by then): MoE.forward's bf16 input,
  // the experts' output (the caller's reference), under EP the combine all-to-all's output, the
  // fp32 product and its bf16 cast, and zeros_like(x), made first. scatter_add's result (b*s x h)
  // and its sort indices (its index is a stride-0 expand, so deterministic mode takes index_put_
  // with the [N] index: 3 x N int64, no [N, h] coordinates) come after the fp32 product is freed,
  // and are smaller.
  t.transient("moe.input (ffn_norm output, held by MoE.forward)", Module::routed_experts, elems({tokens, h}), 0,
              "b*s x h (gathered under TP)");
  t.transient("experts.output (+ bias)", Module::routed_experts, elems({rows, h}), 0, rows_rule_h);
  if (p.ep > 1) {
    t.transient("combine all-to-all output", Module::routed_experts, elems({routed, h}), 0, "b*s*top_k x h");
  }
  t.transient("combine.product (fp32)", Module::routed_experts, elems({routed, h}), DType::fp32, 0, "b*s*top_k x h");
  t.transient("combine.product (bf16 cast)", Module::routed_experts, elems({routed, h}), 0, "b*s*top_k x h");
  t.transient("combine.zeros_like(x)", Module::routed_experts, elems({tokens, h}), 0, "b*s x h");
  t.add("combine.routed_output (fp32 copy)", Module::routed_experts, elems({routed, h}), DType::fp32, 0, "b*s*top_k x h");
  t.add("combine.sorted_scores (fp32)", Module::router, elems({routed}), DType::fp32, 0, "b*s*top_k");
}

}  // namespace moemem::profiles
