// hf profile: what one decoder layer of Hugging Face transformers' modeling code saves for
// backward, op by op, read in huggingface/transformers (modeling_llama.py, modeling_mixtral.py,
// modeling_qwen3_moe.py and modeling_gpt_oss.py at 00d4b3d2, modeling_deepseek_v3.py at 00b676f8) and checked byte for
// byte against PyTorch autograd on the CPU by tests/groundtruth/check_hf.py (eager kernel).
//
// Rules every term below follows (torch's tools/autograd/derivatives.yaml): a linear layer
// (aten::linear -> mm/addmm) saves its input only when its weight needs a gradient (trains, or
// carries a LoRA adapter whose A reads the same input); an elementwise product saves each operand
// the other's gradient needs; softmax, sigmoid and rsqrt save their output; silu and pow save their
// input; topk, gather and advanced indexing save their int64 indices; index_add_ saves its source;
// bmm saves both operands, and torch.matmul's reshape to 3-D copies a non-contiguous operand.
// Storages are counted once. Python scalars (`* scaling`) are wrapped as 0-dim host tensors and
// cost no device memory. The rotary cos/sin tables and the causal mask are computed once per
// forward by the model (*Model.forward, position_embeddings) and shared by all layers.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "moemem/finetune.hpp"
#include "profiles/hf.hpp"

namespace moemem::profiles {

namespace {

constexpr std::uint16_t kNone = 0;

// RMSNorm.forward (LlamaRMSNorm, MixtralRMSNorm, Qwen3MoeRMSNorm, DeepseekV3RMSNorm):
//   x = x.to(float32)                   a copy (the activation dtype is bf16 or fp16): saved by
//                                       pow(2) and by x * rsqrt(...)
//   rsqrt(variance + eps)               saves its output, rows x 1 fp32 (the product saves it too)
//   weight * x.to(input_dtype)          saves the cast-back tensor only when the weight trains
// The input itself is not saved: the fp32 copy replaces it. `rows` x `n` features.
void rms_norm(const HfLayerContext& h, Terms& t, const HfNormNames& names, Module mod, std::int64_t rows,
              std::int64_t n, bool weight_trains, bool copy_is_input) {
  if (copy_is_input) {
    // input_layernorm: the layer input is what gradient checkpointing keeps (the checkpoint's
    // saved input, torch.utils.checkpoint); without it the bf16 input is freed and its fp32 copy
    // is saved. The copy (4 bytes an element) is this term plus the next.
    t.add(names.copy, mod, elems({rows, n}), t.a, kNone, "b*s x h (the layer input; kept by gradient checkpointing)",
          true);
    t.add(names.copy_rest, mod, elems({rows, n}), t.a, kNone,
          "b*s x h (the fp32 upcast is twice the bf16 input: the second half)");
  } else {
    t.add(names.copy, mod, elems({rows, n}), DType::fp32, kNone, "rows x n, fp32 (x.to(float32))");
  }
  t.add(names.rsqrt, mod, elems({rows}), DType::fp32, kNone, "rows x 1, fp32 (rsqrt output)");
  if (!weight_trains) return;
  const DType product = norm_product_dtype(h.c.model, t.a);
  t.add(names.cast, mod, elems({rows, n}), product, kNone,
        product == t.a ? "rows x n (weight * x.to(dtype))" : "rows x n, fp32 ((weight * x) before .to(dtype))");
}

// SwiGLU MLP.forward: down_proj(act_fn(gate_proj(x)) * up_proj(x)) on `rows` rows of width `ffn`.
// silu saves its input (gate's output); the product saves silu's output and up's output; down_proj
// saves the product. The input x is saved by gate_proj/up_proj (reported by the caller, whose
// tensor it is).
void swiglu(const HfLayerContext& h, Terms& t, Module mod, std::int64_t rows, std::int64_t ffn, Role down,
            const char* prefix_gate, const char* prefix_silu, const char* prefix_up, const char* prefix_down) {
  t.add(prefix_gate, mod, elems({rows, ffn}), t.a, kNone, "rows x ffn (gate_proj output: silu's input)");
  t.add(prefix_silu, mod, elems({rows, ffn}), t.a, kNone, "rows x ffn (silu output, saved by the product)");
  t.add(prefix_up, mod, elems({rows, ffn}), t.a, kNone, "rows x ffn (up_proj output, saved by the product)");
  if (h.saves_input(down)) t.add(prefix_down, mod, elems({rows, ffn}), t.a, kNone, "rows x ffn (down_proj input)");
}

// eager_attention_forward: repeat_kv (a copy when kv heads < heads), matmul(q, k^T) (torch.matmul
// reshapes the transposed, non-contiguous q to 3-D: a copy; k's repeat is contiguous, so its
// transpose is a view: the repeated k), * scaling, + mask, softmax(dtype=float32) (saves its fp32
// output), .to(q.dtype) (saved by the second matmul), dropout (p = 0: the input itself), matmul
// with v (repeated, or v_proj's transposed view reshaped: a copy). The kernels of flash-attention-2
// (_flash_attention_forward -> flash_attn_func, FlashAttnFunc.forward) save q, k and v as they
// come (not repeated), the output (which o_proj's input views) and the fp32 log-sum-exp.
// sdpa when v's head size differs from q's and k's (MLA, which HF pads for flash-attention-2
// only): PyTorch's flash kernel needs one head size, so scaled_dot_product_attention takes the
// memory-efficient kernel (_scaled_dot_product_efficient_attention), which saves q, k, v, the output
// and its log-sum-exp, padded to a multiple of 32 positions (kAlignLSE), and the philox seed and
// offset. Not checked on the CPU (Debian's torch 1.13 has no scaled_dot_product_attention); on a
// GPU (tests/data/groundtruth/hf-saved-tensors-h200-transformers-5.17.jsonl, Moonlight) two more
// things showed: v is a view of kv_b_proj's output split into k_nope and v, so what it keeps is
// that whole output (heads x (qk_nope + v_dim) a token), and the kernel's output is laid out
// b x heads x s x v_dim, so o_proj's input (its transpose(1, 2).contiguous()) is a copy.
void sdpa_unequal_heads(const HfLayerContext& h, Terms& t, std::int64_t qk, std::int64_t v_dim) {
  const auto& m = h.c.model;
  const std::int64_t b = h.c.training.micro_batch, s = h.c.training.seq_len, heads = m.num_heads;
  t.add("attn.q", Module::attention, elems({b, s, heads, qk}), t.a, kNone, "b*s x heads x qk_dim");
  t.add("attn.k", Module::attention, elems({b, s, heads, qk}), t.a, kNone, "b*s x heads x qk_dim");
  t.add("attn.v (kv_b_proj's output it views)", Module::attention, elems({b, s, heads, m.mla.qk_nope_head_dim + v_dim}), t.a,
        kNone, "b*s x heads x (qk_nope + v_dim)");
  t.add("attn.output", Module::attention, elems({b, s, heads, v_dim}), t.a, kNone, "b x heads x s x v_dim");
  if (h.saves_input(Role::o_proj)) {
    t.add("attn.o_proj_input", Module::attention, elems({b, s, heads, v_dim}), t.a, kNone,
          "b*s x heads x v_dim (transpose(1, 2).contiguous(): a copy)");
  }
  t.add("attn.logsumexp", Module::attention, elems({b, heads, (s + 31) / 32 * 32}), DType::fp32, kNone,
        "b x heads x ceil(s/32)*32, fp32");
  t.add("attn.rng_state", Module::attention, elems({2}), DType::int64, kNone, "philox seed and offset");
}

// GptOss's eager_attention_forward: the same products, but the scores are concatenated with the
// per-head sink logit, shifted by their row maximum (max(dim=-1) saves its int64 indices) and
// softmaxed in the activation dtype (saves its output, s + 1 columns); the sink column is sliced
// off, a view whose 3-D reshape in torch.matmul stays a view, so the second product saves the
// softmax output itself. q is apply_rotary_pos_emb's cat output (contiguous: saved as is); k and
// v are repeated to every head (or, with one query head per KV head, k the cat output and v the
// projection's transposed view reshaped: a copy).
void eager_attention_with_sinks(const HfLayerContext& h, Terms& t, std::int64_t d) {
  const auto& m = h.c.model;
  const std::int64_t b = h.c.training.micro_batch, s = h.c.training.seq_len, heads = m.num_heads;
  t.add("attn.q", Module::attention, elems({b, heads, s, d}), t.a, kNone, "b x heads x s x head_dim");
  t.add("attn.k (repeated to every head)", Module::attention, elems({b, heads, s, d}), t.a, kNone, "b x heads x s x head_dim");
  t.add("attn.max_indices", Module::attention, elems({b, heads, s}), DType::int64, kNone,
        "b x heads x s x 1, int64 (combined_logits.max(dim=-1))");
  t.add("attn.softmax (with the sink column)", Module::attention, elems({b, heads, s, s + 1}), t.a, kNone,
        "b x heads x s x (s + 1) (softmax in the activation dtype)");
  t.add("attn.v (repeated to every head)", Module::attention, elems({b, heads, s, d}), t.a, kNone, "b x heads x s x head_dim");
  if (h.saves_input(Role::o_proj)) {
    t.add("attn.o_proj_input", Module::attention, elems({b, s, heads, d}), t.a, kNone,
          "b*s x heads x head_dim (transpose(1, 2).contiguous())");
  }
}

void core_attention(const HfLayerContext& h, Terms& t, std::int64_t qk, std::int64_t v_dim, std::int64_t kv_heads,
                    bool mla) {
  const auto& m = h.c.model;
  const std::int64_t b = h.c.training.micro_batch, s = h.c.training.seq_len, heads = m.num_heads;
  if (h.c.attention == AttentionKernel::eager && m.model_type == "gpt_oss") {
    eager_attention_with_sinks(h, t, qk);
    return;
  }
  if (h.c.attention == AttentionKernel::eager) {
    t.add("attn.q (matmul copy)", Module::attention, elems({b, heads, s, qk}), t.a, kNone, "b x heads x s x qk_dim");
    t.add("attn.k (repeated to every head)", Module::attention, elems({b, heads, s, qk}), t.a, kNone,
          "b x heads x s x qk_dim");
    t.add("attn.softmax (fp32)", Module::attention, elems({b, heads, s, s}), DType::fp32, kNone,
          "b x heads x s x s, fp32 (softmax(dtype=float32) output)");
    t.add("attn.probs (cast back)", Module::attention, elems({b, heads, s, s}), t.a, kNone,
          "b x heads x s x s (.to(q.dtype), the second matmul's input)");
    t.add("attn.v (repeated to every head)", Module::attention, elems({b, heads, s, v_dim}), t.a, kNone,
          "b x heads x s x v_dim");
    if (h.saves_input(Role::o_proj)) {
      t.add("attn.o_proj_input", Module::attention, elems({b, s, heads, v_dim}), t.a, kNone,
            "b*s x heads x v_dim (transpose(1, 2).contiguous())");
    }
    return;
  }
  if (h.c.attention == AttentionKernel::sdpa && qk != v_dim) {
    sdpa_unequal_heads(h, t, qk, v_dim);
    return;
  }
  // flash-attention-2. MLA pads v to the q/k head size (modeling_deepseek_v3.py:
  // F.pad(value_states, [0, qk_head_dim - v_head_dim])) and slices the output back, a copy.
  // sdpa (integrations/sdpa_attention.py) with no padding mask passes is_causal and, from torch 2.5,
  // enable_gqa (use_gqa_in_sdpa: K and V not repeated), so PyTorch runs its flash kernel
  // (_scaled_dot_product_flash_attention), which saves the same: q, k, v, the output (o_proj's input
  // is its transpose(1, 2).contiguous(), already contiguous: a view), the fp32 log-sum-exp and the
  // philox seed and offset.
  const std::int64_t v_saved = mla && h.c.attention == AttentionKernel::flash ? qk : v_dim;
  t.add("attn.q", Module::attention, elems({b, s, heads, qk}), t.a, kNone, "b*s x heads x qk_dim");
  t.add("attn.k", Module::attention, elems({b, s, kv_heads, qk}), t.a, kNone, "b*s x kv_heads x qk_dim");
  t.add(v_saved != v_dim ? "attn.v (padded to qk_dim)" : "attn.v", Module::attention, elems({b, s, kv_heads, v_saved}), t.a, kNone,
        "b*s x kv_heads x v_dim");
  t.add("attn.output (o_proj input)", Module::attention, elems({b, s, heads, v_saved}), t.a, kNone,
        "b*s x heads x v_dim (flash output; o_proj's input is a view of it)");
  if (v_saved != v_dim && h.saves_input(Role::o_proj)) {
    t.add("attn.o_proj_input (sliced copy)", Module::attention, elems({b, s, heads, v_dim}), t.a, kNone,
          "b*s x heads x v_dim");
  }
  t.add("attn.logsumexp", Module::attention, elems({b, heads, s}), DType::fp32, kNone, "b x heads x s, fp32");
  t.add("attn.rng_state", Module::attention, elems({2}), DType::int64, kNone, "2 x int64 (flash_attn's rng state)");
}

// LlamaAttention / MixtralAttention / Qwen3MoeAttention.forward: q, k, v projections of the
// norm's output (saved once, by whichever of them trains), Qwen3's per-head q_norm/k_norm on the
// projections' views, apply_rotary_pos_emb (q * cos + rotate_half(q) * sin: cos and sin need no
// gradient, so only they are saved, and they are the model's), the core attention, o_proj.
void gqa_attention(const HfLayerContext& h, Terms& t) {
  const auto& m = h.c.model;
  const std::int64_t tokens = h.tokens();
  if (h.saves_input(Role::q_proj) || h.saves_input(Role::k_proj) || h.saves_input(Role::v_proj)) {
    t.add("input_layernorm.output (q/k/v input)", Module::attention, elems({tokens, m.hidden}), t.a, kNone, "b*s x h");
  }
  if (m.qk_norm) {
    rms_norm(h, t, {"attn.q_norm.fp32_copy", "", "attn.q_norm.rsqrt", "attn.q_norm.cast"}, Module::norms,
             tokens * m.num_heads, m.head_dim, h.trains(Role::q_norm), false);
    rms_norm(h, t, {"attn.k_norm.fp32_copy", "", "attn.k_norm.rsqrt", "attn.k_norm.cast"}, Module::norms,
             tokens * m.num_kv_heads, m.head_dim, h.trains(Role::k_norm), false);
  }
  core_attention(h, t, m.head_dim, m.head_dim, m.num_kv_heads, false);
}

// DeepseekV3Attention.forward: q_a_proj -> q_a_layernorm -> q_b_proj (or q_proj when q_lora_rank is
// null), kv_a_proj_with_mqa split into the latent (-> kv_a_layernorm -> kv_b_proj) and the shared
// RoPE key; RoPE on the rope slices (saves only cos/sin); cat of the nope and rope parts (a copy,
// contiguous, so k's transpose in matmul is a view); the core attention with q/k head size
// qk_nope + qk_rope and v head size v_head_dim (v is a split of kv_b_proj's output: a copy).
void mla_attention(const HfLayerContext& h, Terms& t) {
  const auto& m = h.c.model;
  const auto& l = m.mla;
  const std::int64_t tokens = h.tokens();
  const Role q_first = l.q_lora_rank > 0 ? Role::q_down : Role::q_up;
  if (h.saves_input(q_first) || h.saves_input(Role::kv_down)) {
    t.add("input_layernorm.output (q_a/kv_a input)", Module::attention, elems({tokens, m.hidden}), t.a, kNone, "b*s x h");
  }
  if (l.q_lora_rank > 0) {
    rms_norm(h, t, {"attn.q_a_layernorm.fp32_copy", "", "attn.q_a_layernorm.rsqrt", "attn.q_a_layernorm.cast"},
             Module::norms, tokens, l.q_lora_rank, h.trains(Role::q_a_norm), false);
    if (h.saves_input(Role::q_up)) {
      t.add("attn.q_a_layernorm.output (q_b input)", Module::attention, elems({tokens, l.q_lora_rank}), t.a, kNone,
            "b*s x q_lora_rank");
    }
  }
  rms_norm(h, t, {"attn.kv_a_layernorm.fp32_copy", "", "attn.kv_a_layernorm.rsqrt", "attn.kv_a_layernorm.cast"},
           Module::norms, tokens, l.kv_lora_rank, h.trains(Role::kv_a_norm), false);
  if (h.saves_input(Role::k_up)) {
    t.add("attn.kv_a_layernorm.output (kv_b input)", Module::attention, elems({tokens, l.kv_lora_rank}), t.a, kNone,
          "b*s x kv_lora_rank");
  }
  core_attention(h, t, l.qk_nope_head_dim + l.qk_rope_head_dim, l.v_head_dim, m.num_heads, true);
}

// Rows all routed experts together compute: every token once per chosen expert.
std::int64_t routed_rows(const HfLayerContext& h) { return h.tokens() * h.c.model.moe.top_k; }

bool transformers5(const HfLayerContext& h) { return h.c.training.transformers_version == TransformersVersion::v5; }

// transformers 5's grouped_mm experts (its default; hf_check refuses it with 4.x).
bool grouped_mm(const HfLayerContext& h) {
  return transformers5(h) &&
         h.c.training.experts_implementation.value_or(ExpertsImplementation::grouped_mm) == ExpertsImplementation::grouped_mm;
}

// What the experts keep to route rows, by implementation. The loop: torch.where of each hit
// expert's mask, two int64 index views of one nonzero() result a row. grouped_mm (transformers 5
// integrations/moe.py, measured on an H200: tests/data/groundtruth/hf-saved-tensors-h200-
// transformers-5.17.jsonl): the sort's int64 permutations (three a row; gpt-oss four), a bool
// mask a row and the experts' int32 offsets.
void expert_routing_indices(const HfLayerContext& h, Terms& t) {
  const std::int64_t rows = routed_rows(h);
  if (!grouped_mm(h)) {
    t.add("experts.token_indices (int64 pairs)", Module::routed_experts, elems({rows, 2}), DType::int64, kNone,
          "b*s*top_k x 2, int64 (torch.where of each expert's mask)");
    return;
  }
  const std::int64_t perms = h.c.model.model_type == "gpt_oss" ? 4 : 3;
  // (A term keeps its rule as a string_view: a literal, not a formatted temporary.)
  t.add("experts.sort_permutations (int64)", Module::routed_experts, elems({rows, perms}), DType::int64, kNone,
        perms == 4 ? "b*s*top_k x 4, int64 (grouped_mm's sort)" : "b*s*top_k x 3, int64 (grouped_mm's sort)");
  t.add("experts.row_mask (bool)", Module::routed_experts, elems({rows}), DType::int8, kNone, "b*s*top_k x 1, bool");
  t.add("experts.offsets (int32)", Module::routed_experts, elems({h.c.model.moe.num_routed_experts}), DType::int32, kNone,
        "experts x 1, int32 (grouped_mm's group offsets)");
}

// The loop over experts (MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock.forward, DeepseekV3MoE.moe):
// per hit expert, torch.where on its one-hot mask (the two index vectors are views of one
// nonzero() result, 2 x int64 a row, saved by the indexing), the gathered input hidden[top_x] (a
// copy, saved by the expert's gate/up), the expert's SwiGLU, its output times the routing weight
// (each saves the other: the output, and the indexed weight rows x 1), and index_add_ into the
// result (saves its source, the weighted output). Summed over experts: top-k rows a token.
// DeepSeek accumulates in the routing weights' fp32 (final_hidden_states of topk_weights.dtype),
// so the indexed weight and the weighted output are fp32 (4.x). transformers 5 (measured, as
// above): the loop keeps the same in the activation dtype, but Mixtral's routing weights in fp32;
// grouped_mm keeps the sorted input, the SwiGLU and the output with the routing weights, and no
// weighted copy (the weighting and the scatter back save nothing more).
void expert_loop(const HfLayerContext& h, Terms& t, bool fp32_weights) {
  const auto& m = h.c.model;
  const std::int64_t rows = routed_rows(h);
  expert_routing_indices(h, t);
  if (h.saves_input(Role::expert_gate) || h.saves_input(Role::expert_up)) {
    t.add("experts.input (gathered)", Module::routed_experts, elems({rows, m.hidden}), t.a, kNone, "b*s*top_k x h");
  }
  swiglu(h, t, Module::routed_experts, rows, m.moe.expert_ffn, Role::expert_down, "experts.gate_output",
         "experts.silu_output", "experts.up_output", "experts.down_input");
  t.add("experts.output", Module::routed_experts, elems({rows, m.hidden}), t.a, kNone,
        "b*s*top_k x h (saved by the product with the routing weight)");
  const bool v5 = transformers5(h);
  const DType w = !v5 && fp32_weights ? DType::fp32 : t.a;
  t.add("experts.routing_weight (indexed)", Module::routed_experts, elems({rows}),
        v5 && m.model_type == "mixtral" ? DType::fp32 : w, kNone, "b*s*top_k x 1 (routing_weights[top_x, idx])");
  if (!grouped_mm(h)) {
    t.add("experts.weighted_output (index_add_ source)", Module::routed_experts, elems({rows, m.hidden}), w, kNone,
          "b*s*top_k x h");
  }
}

// MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock: gate (nn.Linear) on the norm's output,
// softmax(dtype=float) (fp32 output), topk (int64 indices), the renormalisation
// routing_weights /= routing_weights.sum(-1, keepdim) (Mixtral always; Qwen3-MoE with
// norm_topk_prob, true in Qwen3's released configs: saves the top-k weights and their sum, fp32),
// the cast back, then the expert loop.
void softmax_moe(const HfLayerContext& h, Terms& t) {
  const auto& m = h.c.model;
  const std::int64_t tokens = h.tokens(), k = m.moe.top_k;
  if (h.saves_input(Role::router)) {
    t.add("post_attention_layernorm.output (router input)", Module::router, elems({tokens, m.hidden}), t.a, kNone, "b*s x h");
  }
  t.add("router.softmax (fp32)", Module::router, elems({tokens, m.moe.num_routed_experts}), DType::fp32, kNone,
        "b*s x experts, fp32");
  t.add("router.topk_indices", Module::router, elems({tokens, k}), DType::int64, kNone, "b*s x top_k, int64");
  t.add("router.topk_weights (fp32)", Module::router, elems({tokens, k}), DType::fp32, kNone,
        "b*s x top_k, fp32 (divided in place by their sum)");
  t.add("router.topk_sum (fp32)", Module::router, elems({tokens}), DType::fp32, kNone, "b*s x 1, fp32");
  expert_loop(h, t, false);
}

// DeepSeek-V3's router under transformers 5.17, as measured on an H200 (tests/data/groundtruth/
// hf-saved-tensors-h200-transformers-5.17.jsonl): the linear in the activation dtype on its own
// copy of the input (b*s x h) and a cast copy of the weight (h x experts); the sigmoid's output;
// the grouped top-k's int64 indices (b*s x n_group x 2 within the groups, b*s x topk_group of the
// groups), the bool mask of the kept groups' experts, the int64 top-k indices, the fp32
// denominator and the top-k weights in the activation dtype.
void deepseek_router_v5(const HfLayerContext& h, Terms& t) {
  const auto& m = h.c.model;
  const std::int64_t tokens = h.tokens(), k = m.moe.top_k, n = m.moe.num_routed_experts;
  if (h.trains(Role::router)) {
    t.add("router.input", Module::router, elems({tokens, m.hidden}), t.a, kNone, "b*s x h");
  }
  t.add("router.weight (cast copy)", Module::router, elems({m.hidden, n}), t.a, kNone, "h x experts");
  t.add("router.sigmoid", Module::router, elems({tokens, n}), t.a, kNone, "b*s x experts");
  t.add("router.group_topk_indices (int64)", Module::router, elems({tokens, std::max<std::int64_t>(m.moe.n_group, 1), 2}), DType::int64, kNone,
        "b*s x n_group x 2, int64 (each group's top two)");
  t.add("router.group_indices (int64)", Module::router, elems({tokens, std::max<std::int64_t>(m.moe.topk_group, 1)}), DType::int64, kNone,
        "b*s x topk_group, int64");
  t.add("router.expert_mask (bool)", Module::router, elems({tokens, n}), DType::int8, kNone, "b*s x experts, bool");
  t.add("router.topk_indices", Module::router, elems({tokens, k}), DType::int64, kNone, "b*s x top_k, int64");
  t.add("router.topk_denominator (fp32)", Module::router, elems({tokens}), DType::fp32, kNone, "b*s x 1, fp32");
  t.add("router.topk_weights", Module::router, elems({tokens, k}), t.a, kNone, "b*s x top_k");
}

// DeepseekV3TopkRouter.forward: F.linear(hidden.type(float32), weight.type(float32)) (fp32 copies:
// the input's saved when the router trains; the weight's, experts x h, always, for the input's
// gradient), sigmoid (fp32 output), grouped top-k under no_grad, gather (int64 indices), the
// norm_topk_prob renormalisation (the weights and denominator, fp32), * routed_scaling_factor; then
// DeepseekV3MoE.moe's loop and the shared experts on the norm's output.
void deepseek_moe(const HfLayerContext& h, Terms& t) {
  const auto& m = h.c.model;
  const std::int64_t tokens = h.tokens(), k = m.moe.top_k, n = m.moe.num_routed_experts;
  if (h.saves_input(Role::shared_gate) || h.saves_input(Role::shared_up)) {
    t.add("post_attention_layernorm.output (shared experts input)", Module::shared_experts, elems({tokens, m.hidden}), t.a,
          kNone, "b*s x h");
  }
  if (transformers5(h)) {
    deepseek_router_v5(h, t);
  } else {
    if (h.trains(Role::router)) {
      t.add("router.input (fp32 copy)", Module::router, elems({tokens, m.hidden}), DType::fp32, kNone, "b*s x h, fp32");
    }
    t.add("router.weight (fp32 copy)", Module::router, elems({n, m.hidden}), DType::fp32, kNone,
          "experts x h, fp32 (weight.type(float32) of the bf16 parameter)");
    t.add("router.sigmoid (fp32)", Module::router, elems({tokens, n}), DType::fp32, kNone, "b*s x experts, fp32");
    t.add("router.topk_indices", Module::router, elems({tokens, k}), DType::int64, kNone, "b*s x top_k, int64");
    t.add("router.topk_weights (fp32)", Module::router, elems({tokens, k}), DType::fp32, kNone, "b*s x top_k, fp32");
    t.add("router.topk_denominator (fp32)", Module::router, elems({tokens}), DType::fp32, kNone, "b*s x 1, fp32");
  }
  expert_loop(h, t, true);
  if (m.moe.shared_ffn > 0) {
    swiglu(h, t, Module::shared_experts, tokens, m.moe.shared_ffn, Role::shared_down, "shared_experts.gate_output",
           "shared_experts.silu_output", "shared_experts.up_output", "shared_experts.down_input");
  }
}

// GptOssMLP: GptOssTopKRouter (F.linear with bias on the norm's output, which it saves; topk of
// the logits, saving int64 indices; softmax over the top-k logits in the activation dtype, saving
// its output; scatter_ into zeros, saving the same indices), then GptOssExperts.forward's training
// loop over the hit experts. Per hit expert e (expert_hit's rows, int64 views of one nonzero()
// result that each indexing saves): torch.where on its mask (int64 pairs), hidden[token_idx] (a
// copy), and self.gate_up_proj[expert_idx] / self.down_proj[expert_idx]: advanced indexing with a
// one-element index tensor copies the expert's weights, and each product saves its copy for the
// input's gradient. gate_up (rows x 2f) is saved by both clamps (gate and up are its strided
// views); gate's clamp output by glu = gate * sigmoid(gate * alpha), with sigmoid's output; up's
// clamp + 1 and glu by their product; that product by the down projection; the output (+ bias)
// and the indexed routing weight by their product; the weighted output by index_add_. Every
// expert is taken as hit once b*s*top_k rows could reach it (the most the loop can copy).
void gpt_oss_moe(const HfLayerContext& h, Terms& t) {
  const auto& m = h.c.model;
  const std::int64_t tokens = h.tokens(), k = m.moe.top_k, f = m.moe.expert_ffn, rows = routed_rows(h);
  const std::int64_t hit = std::min(m.moe.num_routed_experts, rows);
  if (h.saves_input(Role::router)) {
    t.add("post_attention_layernorm.output (router input)", Module::router, elems({tokens, m.hidden}), t.a, kNone, "b*s x h");
  }
  t.add("router.topk_indices", Module::router, elems({tokens, k}), DType::int64, kNone, "b*s x top_k, int64");
  t.add("router.softmax", Module::router, elems({tokens, k}), t.a, kNone, "b*s x top_k (softmax of the top-k logits)");
  const bool v5 = transformers5(h);
  if (!v5) t.add("experts.hit (int64)", Module::routed_experts, elems({hit}), DType::int64, kNone, "hit experts x 1, int64");
  expert_routing_indices(h, t);
  // The products save their input for the weights' gradient only when the experts train (not
  // under LoRA, which reaches the attention's nn.Linear modules only); the weight copies always,
  // for the input's gradient.
  if (h.saves_input(Role::expert_gate) || h.saves_input(Role::expert_up)) {
    t.add("experts.input (gathered)", Module::routed_experts, elems({rows, m.hidden}), t.a, kNone, "b*s*top_k x h");
  }
  // transformers 5 indexes the 3-D parameters with a Python integer: views, nothing copied
  // (measured: no weight-sized tensor among what the experts save).
  if (!v5) {
    t.add("experts.weight_copies (gate_up_proj[e], down_proj[e])", Module::routed_experts, elems({hit, 3 * m.hidden, f}), t.a,
          kNone, "hit experts x (h x 2f + f x h)");
  }
  t.add("experts.gate_up_output", Module::routed_experts, elems({rows, 2 * f}), t.a, kNone, "b*s*top_k x 2f (both clamps' input)");
  t.add("experts.gate_clamped", Module::routed_experts, elems({rows, f}), t.a, kNone, "b*s*top_k x f");
  t.add("experts.sigmoid_output", Module::routed_experts, elems({rows, f}), t.a, kNone, "b*s*top_k x f");
  t.add("experts.up_clamped_plus_one", Module::routed_experts, elems({rows, f}), t.a, kNone, "b*s*top_k x f");
  t.add("experts.glu", Module::routed_experts, elems({rows, f}), t.a, kNone, "b*s*top_k x f");
  if (h.saves_input(Role::expert_down)) {
    t.add("experts.down_input", Module::routed_experts, elems({rows, f}), t.a, kNone, "b*s*top_k x f ((up + 1) * glu)");
  }
  t.add("experts.output", Module::routed_experts, elems({rows, m.hidden}), t.a, kNone,
        "b*s*top_k x h (saved by the product with the routing weight)");
  t.add("experts.routing_weight (indexed)", Module::routed_experts, elems({rows}), t.a, kNone,
        "b*s*top_k x 1 (routing_weights[token_idx, expert_idx])");
  if (!grouped_mm(h)) {
    t.add("experts.weighted_output (index_add_ source)", Module::routed_experts, elems({rows, m.hidden}), t.a, kNone,
          "b*s*top_k x h");
  }
}

// What PEFT's LoRA adds to each adapted linear (peft/tuners/lora/layer.py, Linear.forward:
// result + lora_B(lora_A(dropout(x))) * scaling): lora_B saves its input, rows x r; lora_A's input
// is the base layer's (saved once); a dropout p > 0 (nn.Dropout, CUDA's fused native_dropout)
// keeps a bool mask and A reads the dropped-out copy. Routed experts: one adapter per expert, the
// expert's rows.
void lora_terms(const HfLayerContext& h, Terms& t) {
  Count b_inputs{}, dropped{};
  for (const auto& a : h.adapters) {
    const std::int64_t rows = a.is_routed_expert ? routed_rows(h) : h.tokens();
    b_inputs += elems({rows, h.c.training.lora_rank});
    dropped += elems({rows, a.cols});
  }
  if (b_inputs.value() == 0) return;
  t.add("lora.B_inputs", Module::attention, b_inputs, t.a, kNone, "rows x r per adapted linear");
  if (h.c.training.lora_dropout > 0) {
    t.add("lora.dropout_masks", Module::attention, dropped, DType::int8, kNone, "rows x in per adapted linear (bool)");
    t.add("lora.dropout_outputs (A inputs)", Module::attention, dropped, t.a, kNone, "rows x in per adapted linear");
  } else if (h.c.training.hf_ddp) {
    // --ddp: PEFT's fp32 adapters (autocast_adapter_dtype) make Linear.forward cast x to fp32
    // (_cast_input_dtype) and the Trainer's bf16 autocast cast that back for lora_A's GEMM, which
    // saves the bf16 copy: one per adapted linear. (With dropout the same bytes: the mask and
    // the autocast copy of the dropped-out fp32 input, the terms above.)
    t.add("lora.A_inputs (autocast bf16 copies)", Module::attention, dropped, t.a, kNone,
          "rows x in per adapted linear (PEFT's fp32 cast, autocast's bf16 copy)");
  }
  if (h.c.training.hf_ddp) {
    // Autocast's bf16 casts of the fp32 adapter weights, which lora_A's and lora_B's GEMMs save
    // for the input gradient (every expert's adapters counted, whether or not tokens reach it).
    t.add("lora.adapter_weights (autocast bf16 copies)", Module::attention, h.adapter_params, t.a, kNone,
          "r x in + out x r per adapted linear");
  }
}

}  // namespace

void hf_layer_activations(const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out) {
  const HfLayerContext h = hf_layer_context(c, kind);
  const auto& m = c.model;
  Terms t{c, out};
  const std::int64_t tokens = h.tokens();
  rms_norm(h, t, {"input_layernorm.input", "input_layernorm.fp32_copy (rest)", "input_layernorm.rsqrt",
                  "input_layernorm.cast"},
           Module::norms, tokens, m.hidden, h.trains(Role::input_norm), true);
  if (m.attention == AttentionKind::mla) mla_attention(h, t);
  else gqa_attention(h, t);
  rms_norm(h, t, {"post_attention_layernorm.fp32_copy", "", "post_attention_layernorm.rsqrt",
                  "post_attention_layernorm.cast"},
           Module::norms, tokens, m.hidden, h.trains(Role::post_attn_norm), false);
  if (kind == LayerKind::dense) {
    if (h.saves_input(Role::mlp_gate) || h.saves_input(Role::mlp_up)) {
      t.add("post_attention_layernorm.output (mlp input)", Module::dense_mlp, elems({tokens, m.hidden}), t.a, kNone,
            "b*s x h");
    }
    swiglu(h, t, Module::dense_mlp, tokens, m.dense_ffn, Role::mlp_down, "mlp.gate_output", "mlp.silu_output",
           "mlp.up_output", "mlp.down_input");
  } else if (m.attention == AttentionKind::mla) {
    deepseek_moe(h, t);
  } else if (m.model_type == "gpt_oss") {
    gpt_oss_moe(h, t);
  } else {
    softmax_moe(h, t);
  }
  if (c.training.finetune != Finetune::full) lora_terms(h, t);
}

}  // namespace moemem::profiles
