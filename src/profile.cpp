#include "moemem/profile.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "moemem/errors.hpp"

namespace moemem {

namespace {

std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// Checked product of element dimensions, divided (rounding up) by `divisor`.
Count elems(std::initializer_list<std::int64_t> dims, std::int64_t divisor = 1) {
  std::uint64_t n = 1;
  for (const auto d : dims) n = checked_mul(n, u(d), "activation size");
  return Count(ceil_div(n, u(divisor)));
}

// ---------------------------------------------------------------------------------------------
// paper: "Memory Analysis on the Training Course of DeepSeek Models" (arXiv 2502.07846),
// restated in shared/reference/paper-method.md. Section numbers below refer to that note.

// §4: TP splits W_UQ, W_UK, W_UV, W_O; keeps W_DQ, W_DKV, W_QR, W_KR, norms and router whole;
// shared experts whole. Beyond the report: embedding and output head are vocab-parallel (as in
// every TP framework); the dense MLP of the first layers is kept whole like the shared experts
// (the report's treatment of the one dense MLP it analyses); plain attention is split by heads.
TpSplit paper_tp_split(Role r) {
  switch (r) {
    case Role::q_up:
    case Role::k_up:
    case Role::v_up:
    case Role::q_proj:
    case Role::k_proj:
    case Role::v_proj:
    case Role::q_bias:
    case Role::k_bias:
    case Role::v_bias: return TpSplit::column;
    case Role::o_proj: return TpSplit::row;
    case Role::embedding:
    case Role::output_head:
    case Role::mtp_embedding:
    case Role::mtp_output_head: return TpSplit::vocab;
    default: return TpSplit::replicated;
  }
}

// §5: ZeRO shards "the non-expert part (MLA + norms)" over DP and "the expert part" — the whole
// MoE block: routed experts, shared experts and router — over EDP.
ZeroGroup paper_zero_group(Role r) {
  switch (module_of(r)) {
    case Module::router:
    case Module::routed_experts:
    case Module::shared_experts: return ZeroGroup::expert;
    default: return ZeroGroup::dense;
  }
}

// §2: the report ignores DeepSeek-V3's per-expert router bias.
bool paper_accounts(const Tensor& t) { return t.role != Role::router_bias; }

struct PaperDims {
  std::int64_t b, s, tokens, tokens_sp, heads;
};

PaperDims paper_dims(const ActivationContext& c) {
  const auto& p = c.layout.config;
  const std::int64_t tokens = c.training.micro_batch * (c.training.seq_len / p.cp);
  return {c.training.micro_batch, c.training.seq_len, tokens, tokens / (p.sp ? p.tp : 1),
          c.model.num_heads / p.tp};
}

// §6 MLA terms, one layer. "/2" in the report is the division by TP = SP.
void paper_attention(const ActivationContext& c, std::vector<ActivationTerm>& out) {
  const auto& m = c.model;
  const DType a = c.training.activation_dtype;
  const auto d = paper_dims(c);
  const std::int64_t s_local = d.s / c.layout.config.cp;
  out.push_back({"attn.input", Module::attention, elems({d.tokens_sp, m.hidden}), a, true});
  out.push_back({"attn.norm_output", Module::attention, elems({d.tokens_sp, m.hidden}), a, false, static_cast<std::uint16_t>(kRecomputeLayernorm)});
  if (m.attention == AttentionKind::mla) {
    const auto& l = m.mla;
    if (l.q_lora_rank > 0) {
      out.push_back({"attn.q_compressed", Module::attention, elems({d.tokens, l.q_lora_rank}), a, false});
    }
    out.push_back({"attn.kv_compressed", Module::attention, elems({d.tokens, l.kv_lora_rank}), a, false});
    const std::int64_t qk = l.qk_nope_head_dim + l.qk_rope_head_dim;
    out.push_back({"attn.q_expanded", Module::attention, elems({d.tokens, d.heads, qk}), a, false});
    out.push_back({"attn.k_expanded", Module::attention, elems({d.tokens, d.heads, qk}), a, false});
    out.push_back({"attn.v_expanded", Module::attention, elems({d.tokens, d.heads, l.v_head_dim}), a, false});
  } else {
    const std::int64_t kv_heads = m.num_kv_heads / c.layout.config.tp;
    out.push_back({"attn.q", Module::attention, elems({d.tokens, d.heads, m.head_dim}), a, false});
    out.push_back({"attn.k", Module::attention, elems({d.tokens, kv_heads, m.head_dim}), a, false});
    out.push_back({"attn.v", Module::attention, elems({d.tokens, kv_heads, m.head_dim}), a, false});
  }
  const std::int64_t v_dim = m.attention == AttentionKind::mla ? m.mla.v_head_dim : m.head_dim;
  out.push_back({"attn.scores", Module::attention, elems({d.b, d.heads, s_local, d.s}), a, false});
  out.push_back({"attn.softmax", Module::attention, elems({d.b, d.heads, s_local, d.s}), a, false});
  out.push_back({"attn.dropout_mask", Module::attention, elems({d.b, d.heads, s_local, d.s}), DType::int8, false});
  out.push_back({"attn.context", Module::attention, elems({d.tokens, d.heads, v_dim}), a, false});
  out.push_back({"attn.proj_dropout_mask", Module::attention, elems({d.tokens_sp, m.hidden}), DType::int8, false});
}

// The report's per-expert SwiGLU terms: input (2 bytes) and output-side mask (1 byte) of width
// h, and four intermediate tensors of width ffn (3Eh + 8E h_E bytes for E tokens).
void paper_swiglu(std::int64_t tokens, std::int64_t hidden, std::int64_t ffn, Module mod, DType a,
                  std::vector<ActivationTerm>& out) {
  const char* in = mod == Module::routed_experts ? "experts.input" : mod == Module::shared_experts ? "shared.input" : "mlp.input";
  const char* mask = mod == Module::routed_experts ? "experts.output_mask" : mod == Module::shared_experts ? "shared.output_mask" : "mlp.output_mask";
  const char* mid = mod == Module::routed_experts ? "experts.swiglu_intermediates" : mod == Module::shared_experts ? "shared.swiglu_intermediates" : "mlp.swiglu_intermediates";
  out.push_back({in, mod, elems({tokens, hidden}), a, false});
  out.push_back({mask, mod, elems({tokens, hidden}), DType::int8, false});
  out.push_back({mid, mod, elems({4, tokens, ffn}), a, false});
}

void paper_layer_activations(const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out) {
  const auto& m = c.model;
  const DType a = c.training.activation_dtype;
  const auto d = paper_dims(c);
  paper_attention(c, out);
  const Module block = kind == LayerKind::moe ? Module::router : Module::dense_mlp;
  out.push_back({"mlp.input", block, elems({d.tokens_sp, m.hidden}), a, true});
  out.push_back({"mlp.norm_output", block, elems({d.tokens_sp, m.hidden}), a, false, static_cast<std::uint16_t>(kRecomputeLayernorm)});
  if (kind == LayerKind::dense) {
    paper_swiglu(d.tokens, m.hidden, m.dense_ffn, Module::dense_mlp, a, out);
    return;
  }
  const auto& e = m.moe;
  out.push_back({"router.logits", Module::router, elems({d.tokens, e.num_routed_experts}), a, false});
  out.push_back({"router.probs", Module::router, elems({d.tokens, e.num_routed_experts}), a, false});
  // Replayed exactly under recomputation, so kept in every mode (§6).
  out.push_back({"router.routing_map", Module::router, elems({d.tokens, e.top_k}), a, true});
  // Balanced routing: the device's N/EP experts receive tokens*top_k/EP token copies in all.
  const std::int64_t routed = static_cast<std::int64_t>(elems({d.tokens, e.top_k}, c.layout.config.ep).value());
  paper_swiglu(routed, m.hidden, e.expert_ffn, Module::routed_experts, a, out);
  for (std::int64_t i = 0; i < e.num_shared_experts; ++i) {
    paper_swiglu(d.tokens, m.hidden, e.expert_ffn, Module::shared_experts, a, out);
  }
}

// The report has no terms for embedding, head, loss or MTP.
void paper_chunk_activations(const ActivationContext&, const Chunk&, std::vector<ActivationTerm>&) {}

const Profile kPaper{
    "paper",
    "the reference analysis (Zhang and Su 2025, arXiv 2502.07846) as restated in paper-method.md",
    paper_tp_split,
    paper_zero_group,
    paper_accounts,
    paper_layer_activations,
    paper_chunk_activations,
    PrecisionRecipe{DType::bf16, DType::fp32, DType::fp32, DType::bf16, DType::bf16},
    // §7: 0.8 to 2 "GB" (the report's GB are GiB) of buffers, 5% to 30% fragmentation.
    OverheadModel{Bytes::from_gib(0.8), Bytes::from_gib(2.0), 5, 30},
    false,
    true,
    false,
    0,
    AttentionKernel::eager,
    false,
    false,
    {
        "TP splits W_UQ, W_UK, W_UV, W_O; W_DQ, W_QR, W_DKV, W_KR, norms, router and shared experts are whole on every TP rank",
        "ZeRO shards MLA and norms over dp*cp, and the whole MoE block (experts, shared experts, router) over edp",
        "the router's score-correction bias and the MTP module are not counted (as in the report); --mtp N adds MTP",
        "attention materialises the score matrix (scores, softmax, 1-byte dropout mask); balanced routing",
        "one micro-batch in flight per stage; full recomputation keeps each sub-block's input and the routing map",
        "beyond the report: embedding/head vocab-parallel over TP, first dense MLPs kept whole and counted like a shared expert; "
        "no activations for embedding, head or loss",
        "buffers 0.8-2 GiB and fragmentation 5-30% are the report's ranges, not estimates",
    },
    nullptr,
    false,
};


// ---------------------------------------------------------------------------------------------
// megatron: what Megatron-Core allocates and saves (read in Megatron-LM's megatron/core:
// transformer/multi_latent_attention.py, transformer/moe/*, models/gpt, optimizer/distrib_optimizer.py;
// facts collected in shared/reference/training-memory-facts.md). bf16 weights, fp32 main
// gradients and fp32 Adam states unless told otherwise; activations with a fused attention kernel.

// MLA down-projections (q_a, kv_a with the shared RoPE key) are duplicated on every TP rank;
// up-projections (q_b with its RoPE rows, kv_b) column-parallel; o_proj row-parallel. Dense and
// shared-expert MLPs split like any Megatron MLP (fc1 column, fc2 row); router and norms
// replicated; embedding and output head vocab-parallel. MTP's eh_proj is column-parallel.
TpSplit megatron_tp_split(Role r) {
  switch (r) {
    case Role::q_up:
    case Role::q_rope:
    case Role::k_up:
    case Role::v_up:
    case Role::q_proj:
    case Role::k_proj:
    case Role::v_proj:
    case Role::q_bias:
    case Role::k_bias:
    case Role::v_bias:
    case Role::mlp_gate:
    case Role::mlp_up:
    case Role::mlp_gate_bias:
    case Role::mlp_up_bias:
    case Role::shared_gate:
    case Role::shared_up:
    case Role::mtp_eh_proj: return TpSplit::column;
    case Role::o_proj:
    case Role::mlp_down:
    case Role::shared_down: return TpSplit::row;
    case Role::embedding:
    case Role::output_head:
    case Role::mtp_embedding:
    case Role::mtp_output_head: return TpSplit::vocab;
    default: return TpSplit::replicated;
  }
}

// The distributed optimizer shards routed-expert states over the expert data-parallel group and
// everything else (shared experts and router included) over dp*cp.
ZeroGroup megatron_zero_group(Role r) {
  return module_of(r) == Module::routed_experts ? ZeroGroup::expert : ZeroGroup::dense;
}

bool megatron_accounts(const Tensor&) { return true; }

struct MegatronDims {
  std::int64_t b, s_local, tokens, tokens_sp, heads, tp;
};

MegatronDims megatron_dims(const ActivationContext& c) {
  const auto& p = c.layout.config;
  const std::int64_t s_local = c.training.seq_len / p.cp;
  const std::int64_t tokens = c.training.micro_batch * s_local;
  return {c.training.micro_batch, s_local, tokens, tokens / (p.sp ? p.tp : 1), c.model.num_heads / p.tp, p.tp};
}

// Appends terms; inputs of FP8 linear layers are cached in FP8 with their scales under an FP8
// recipe (Transformer Engine keeps the quantized input for the weight-gradient GEMM).
struct Terms {
  const ActivationContext& c;
  std::vector<ActivationTerm>& out;
  DType a = c.training.activation_dtype;

  void add(std::string_view name, Module mod, Count n, DType t, std::uint16_t dropped_by, std::string_view rule,
           bool kept_under_full = false) {
    out.push_back({name, mod, n, t, kept_under_full, dropped_by, rule, false});
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

// Attention block of one layer. The layer input is what full recomputation keeps.
void megatron_attention(const ActivationContext& c, Terms& t) {
  const auto& m = c.model;
  const auto d = megatron_dims(c);
  const auto up = static_cast<std::uint16_t>(m.attention == AttentionKind::mla ? kRecomputeMlaUpProj : 0);
  t.add("attn.input (layer input)", Module::attention, elems({d.tokens_sp, m.hidden}), t.a, 0, "b*s/cp/(tp if sp) x h", true);
  t.linear_input("attn.norm_output (q/kv input)", "attn.norm_output.scales", Module::attention,
                 elems({d.tokens_sp, m.hidden}), kRecomputeLayernorm, "b*s/cp/(tp if sp) x h");
  std::int64_t qk_dim = 0, v_dim = 0, kv_heads = d.heads;
  if (m.attention == AttentionKind::mla) {
    const auto& l = m.mla;
    // Down-projections are duplicated and run on the sequence-parallel tokens; their outputs
    // feed the q/kv norms, whose outputs the column-parallel up-projections keep.
    if (l.q_lora_rank > 0) {
      t.add("attn.q_compressed", Module::attention, elems({d.tokens_sp, l.q_lora_rank}), t.a, 0, "tokens x q_lora_rank");
      t.linear_input("attn.q_compressed_norm (q_up input)", "attn.q_compressed_norm.scales", Module::attention,
                     elems({d.tokens_sp, l.q_lora_rank}), kRecomputeMlaUpProj, "tokens x q_lora_rank");
    }
    t.add("attn.kv_compressed", Module::attention, elems({d.tokens_sp, l.kv_lora_rank}), t.a, 0, "tokens x kv_lora_rank");
    t.linear_input("attn.kv_compressed_norm (kv_up input)", "attn.kv_compressed_norm.scales", Module::attention,
                   elems({d.tokens_sp, l.kv_lora_rank}), kRecomputeMlaUpProj, "tokens x kv_lora_rank");
    qk_dim = l.qk_nope_head_dim + l.qk_rope_head_dim;
    v_dim = l.v_head_dim;
  } else {
    qk_dim = v_dim = m.head_dim;
    kv_heads = m.num_kv_heads / d.tp;
    if (m.qk_norm) {
      t.add("attn.qk_norm_inputs", Module::attention, elems({d.tokens, d.heads + kv_heads, m.head_dim}), t.a, 0,
            "b*s/cp x (heads + kv heads)/tp x head_dim");
    }
  }
  // Inputs of the core attention (after RoPE), kept by both kernels.
  t.add("attn.q", Module::attention, elems({d.tokens, d.heads, qk_dim}), t.a, up, "b*s/cp x heads/tp x qk_dim");
  t.add("attn.k", Module::attention, elems({d.tokens, kv_heads, qk_dim}), t.a, up, "b*s/cp x kv_heads/tp x qk_dim");
  t.add("attn.v", Module::attention, elems({d.tokens, kv_heads, v_dim}), t.a, up, "b*s/cp x kv_heads/tp x v_dim");
  if (c.attention == AttentionKernel::eager) {
    t.add("attn.scores", Module::attention, elems({d.b, d.heads, d.s_local, c.training.seq_len}), t.a, kRecomputeCoreAttn,
          "b x heads/tp x s/cp x s");
    t.add("attn.softmax", Module::attention, elems({d.b, d.heads, d.s_local, c.training.seq_len}), t.a, kRecomputeCoreAttn,
          "b x heads/tp x s/cp x s");
  } else {
    t.add("attn.softmax_lse", Module::attention, elems({d.b, d.heads, d.s_local}), DType::fp32, kRecomputeCoreAttn,
          "b x heads/tp x s/cp");
  }
  // The attention output: kept by the kernel, and as the input of the row-parallel o_proj (the
  // same tensor, unless FP8 makes o_proj keep a quantized copy of its own).
  t.add("attn.context", Module::attention, elems({d.tokens, d.heads, v_dim}), t.a, 0, "b*s/cp x heads/tp x v_dim");
  if (c.training.fp8 != Fp8Recipe::none) {
    t.linear_input("attn.context (o_proj input)", "attn.context.scales", Module::attention,
                   elems({d.tokens, d.heads, v_dim}), 0, "b*s/cp x heads/tp x v_dim");
  }
}

void megatron_mlp(const ActivationContext& c, Terms& t, std::int64_t ffn, Module mod, const char* fc1, const char* act,
                  const char* act_scales, std::uint16_t dropped_by, bool gated = true) {
  const auto d = megatron_dims(c);
  // Column-parallel fc1 keeps its (sequence-parallel) input, already counted as the norm output;
  // the activation keeps fc1's output (SwiGLU: gate and up; GeLU: one), fc2 keeps the
  // activation's output.
  t.add(fc1, mod, elems({d.tokens, gated ? 2 * ffn : ffn}, d.tp), t.a, dropped_by,
        gated ? "b*s/cp x 2 ffn/tp" : "b*s/cp x ffn/tp");
  t.linear_input(act, act_scales, mod, elems({d.tokens, ffn}, d.tp), dropped_by, "b*s/cp x ffn/tp");
}

void megatron_layer_activations(const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out) {
  const auto& m = c.model;
  const auto d = megatron_dims(c);
  Terms t{c, out};
  megatron_attention(c, t);
  const Module block = kind == LayerKind::moe ? Module::router : Module::dense_mlp;
  t.add("mlp.input", block, elems({d.tokens_sp, m.hidden}), t.a, 0, "b*s/cp/(tp if sp) x h");
  if (kind == LayerKind::dense) {
    t.linear_input("mlp.norm_output (fc1 input)", "mlp.norm_output.scales", block, elems({d.tokens_sp, m.hidden}),
                   kRecomputeLayernorm, "b*s/cp/(tp if sp) x h");
    megatron_mlp(c, t, m.dense_ffn, Module::dense_mlp, "mlp.fc1_output", "mlp.act_output (fc2 input)",
                 "mlp.act_output.scales", kRecomputeMlp, m.gated_mlp);
    return;
  }
  // The MoE block's norm output feeds the router (bf16) and the dispatch.
  t.add("mlp.norm_output (router input)", block, elems({d.tokens_sp, m.hidden}), t.a, kRecomputeLayernorm,
        "b*s/cp/(tp if sp) x h");
  const auto& e = m.moe;
  const auto& p = c.layout.config;
  // Router: fp32 scores for the score function's backward and a boolean routing map.
  t.add("router.scores", Module::router, elems({d.tokens_sp, e.num_routed_experts}), DType::fp32, kRecomputeMoe,
        "tokens x experts");
  t.add("router.routing_map", Module::router, elems({d.tokens_sp, e.num_routed_experts}), DType::int8, kRecomputeMoe,
        "tokens x experts (a bool each)");
  // Balanced routing: the expert-parallel group's tokens, top-k copies each, spread evenly over
  // its ep ranks, every expert-tensor-parallel rank of an expert seeing all of its tokens. The
  // hottest rank receives --moe-imbalance times that, at most --moe-capacity-factor times.
  double factor = c.training.moe_imbalance;  // validated >= 1 in validate_training
  if (c.training.moe_capacity_factor) factor = std::min(factor, *c.training.moe_capacity_factor);
  const auto base = static_cast<double>(elems({d.tokens_sp, e.top_k, p.etp}).value());
  const auto routed = static_cast<std::int64_t>(std::ceil(base * factor));
  const std::uint16_t moe = kRecomputeMoe;
  t.linear_input("experts.fc1_input (dispatched tokens)", "experts.fc1_input.scales", Module::routed_experts,
                 elems({routed, m.hidden}), moe, "R x h, R = tokens x top_k x etp x imbalance");
  if (c.training.fp8_swiglu_input) {
    t.linear_input("experts.fc1_output (SwiGLU input)", "experts.fc1_output.scales", Module::routed_experts,
                   elems({routed, 2 * e.expert_ffn}, p.etp), moe, "R x 2 ffn/etp");
  } else {
    t.add("experts.fc1_output (SwiGLU input)", Module::routed_experts, elems({routed, 2 * e.expert_ffn}, p.etp), t.a, moe,
          "R x 2 ffn/etp");
  }
  // Megatron-Core's grouped MLP applies the routing probabilities inside the activation
  // (activation_func_with_probs), which keeps fc1's output and the probabilities; fc2 keeps the
  // product as its input, and the unpermute that follows only sums (nothing saved).
  t.linear_input("experts.act_output (fc2 input)", "experts.act_output.scales", Module::routed_experts,
                 elems({routed, e.expert_ffn}, p.etp), kRecomputeMoe | kRecomputeMoeAct, "R x ffn/etp");
  t.add("experts.probs", Module::routed_experts, elems({routed}), DType::fp32, moe, "R");
  if (e.shared_ffn > 0) {
    megatron_mlp(c, t, e.shared_ffn, Module::shared_experts, "shared.fc1_output", "shared.act_output (fc2 input)",
                 "shared.act_output.scales", kRecomputeMoe | kRecomputeSharedExperts);
  }
}

// Embedding: the token ids (int64). Loss: the final norm's input and output and the logits of
// b x s x padded_vocab/tp in the loss's dtype. MTP depth: its embedding and hidden-state norms,
// the concatenation fed to eh_proj, its head norm and its own logits.
void megatron_chunk_activations(const ActivationContext& c, const Chunk& chunk, std::vector<ActivationTerm>& out) {
  const auto& m = c.model;
  const auto d = megatron_dims(c);
  Terms t{c, out};
  const Count logits = elems({d.tokens, c.padded_vocab}, d.tp);
  if (chunk.embedding) t.add("embedding.token_ids", Module::embedding, elems({d.tokens}), DType::int64, 0, "b*s/cp");
  if (chunk.loss) {
    t.add("head.final_norm_input", Module::output_head, elems({d.tokens_sp, m.hidden}), t.a, 0, "tokens x h");
    t.add("head.final_norm_output", Module::output_head, elems({d.tokens_sp, m.hidden}), t.a, 0, "tokens x h");
    t.add("loss.logits", Module::output_head, logits, c.training.logits_dtype, 0, "b*s/cp x padded_vocab/tp");
  }
  for (std::int64_t k = 0; k < chunk.mtp_depths; ++k) {
    t.add("mtp.enorm_input", Module::mtp, elems({d.tokens_sp, m.hidden}), t.a, 0, "tokens x h");
    t.add("mtp.hnorm_input", Module::mtp, elems({d.tokens_sp, m.hidden}), t.a, 0, "tokens x h");
    t.linear_input("mtp.eh_proj_input", "mtp.eh_proj_input.scales", Module::mtp, elems({d.tokens_sp, 2 * m.hidden}), 0,
                   "tokens x 2h");
    t.add("mtp.head_norm_input", Module::mtp, elems({d.tokens_sp, m.hidden}), t.a, 0, "tokens x h");
    t.add("mtp.head_norm_output", Module::mtp, elems({d.tokens_sp, m.hidden}), t.a, 0, "tokens x h");
    t.add("mtp.logits", Module::mtp, logits, c.training.logits_dtype, 0, "b*s/cp x padded_vocab/tp");
  }
}

// vocab_parallel_cross_entropy's backward returns the fp32 gradient of the logits (computed in
// place in the saved softmax); autograd casts it to the bf16 of the head's output while the fp32
// one is alive.
LossPeak megatron_loss_peak(const ActivationContext& c) {
  const auto d = megatron_dims(c);
  return {bytes_of(elems({d.tokens, c.padded_vocab}, d.tp), c.training.activation_dtype), Bytes{}};
}

// ---- torchtitan -----------------------------------------------------------------------------
// pytorch/torchtitan's Llama-3 model and parallelize_llama.py: TP plan colwise wq/wk/wv/w1/w3 and
// output, rowwise wo/w2 and the embedding (vocabulary rows), norms sequence-parallel; FSDP2 over
// dp_shard x cp with bf16 parameters and fp32 reduction; activation checkpointing "full" or
// "selective" per op (_save_list: every mm output except every second one, SDPA outputs,
// reduce_scatter outputs, max).

struct TitanDims {
  std::int64_t tokens, tokens_sp, tp, q, kv, heads, ffn;
};

TitanDims titan_dims(const ActivationContext& c) {
  const auto& m = c.model;
  const auto& p = c.layout.config;
  if (m.attention != AttentionKind::gqa || m.is_moe()) {
    throw InputError("--profile", "torchtitan",
                     "dense decoders with multi-/grouped-query attention (Llama-style); torchtitan's MoE and MLA "
                     "models are not modelled yet");
  }
  const std::int64_t tokens = c.training.micro_batch * (c.training.seq_len / p.cp);
  return {tokens,         tokens / p.tp,  p.tp, m.num_heads / p.tp * m.head_dim, m.num_kv_heads / p.tp * m.head_dim,
          m.num_heads / p.tp, m.dense_ffn / p.tp};
}

// One block, one micro-batch. Under per-op SAC (Recompute::selective) the block keeps its input,
// the outputs of the 1st, 3rd, 5th and 7th matmuls (wq, wv, w1, w2), SDPA's output and
// log-sum-exp, and with TP the reduce-scatter outputs; torch.compile drops what no backward
// kernel reads (w2's output feeds only the residual add, as do the reduce-scatter outputs).
// Without checkpointing: what eager autograd saves (fp32 RoPE products, repeated K and V, every
// SwiGLU operand), or, compiled, what the fused kernels read back.
void titan_layer_activations(const ActivationContext& c, LayerKind, std::vector<ActivationTerm>& out) {
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
  if (!compiled) {
    add("rope.q_complex", Module::attention, elems({d.tokens, d.q}), DType::fp32, rec, "b*s/cp x heads/tp x head_dim, fp32");
    add("rope.k_complex", Module::attention, elems({d.tokens, d.kv}), DType::fp32, rec, "b*s/cp x kv_heads/tp x head_dim, fp32");
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
LossPeak titan_loss_peak(const ActivationContext& c) {
  const auto d = titan_dims(c);
  const Count logits = elems({d.tokens, c.padded_vocab}, d.tp);
  const Bytes fp32 = bytes_of(logits, DType::fp32), bf16 = bytes_of(logits, c.training.activation_dtype);
  switch (effective_loss(c.training)) {
    case LossImpl::upcast:
      return {Bytes(checked_mul(fp32.value(), d.tp > 1 ? 4 : 3, "loss")), bf16};
    case LossImpl::fused: return {bf16 + bf16, Bytes{}};
    case LossImpl::chunked: return {fp32 + Bytes(ceil_div(checked_mul(fp32.value(), 2, "loss"), 8)), Bytes{}};
  }
  return {};
}

const Profile kTorchtitan{
    "torchtitan",
    "torchtitan: FSDP2 (sharded fp32 parameters and AdamW states, bf16 working copies), TP with sequence-"
    "parallel norms and loss parallel, CP, per-op or full activation checkpointing, torch.compile, float8",
    megatron_tp_split,
    megatron_zero_group,
    megatron_accounts,
    titan_layer_activations,
    titan_chunk_activations,
    // FSDP2 mixed precision: fp32 sharded parameters (they are the master weights), bf16 all-gathered
    // working copies, fp32 reduce-scatter into fp32 sharded gradients, fp32 AdamW moments.
    PrecisionRecipe{DType::bf16, DType::fp32, DType::fp32, DType::fp32, DType::fp32},
    OverheadModel{Bytes{}, Bytes{}, 0, 0, Bytes::from_gib(0.52), Bytes::from_gib(0.39), Bytes::from_gib(0.4), Bytes::from_gb(3.1)},
    false,
    false,
    true,
    0,
    AttentionKernel::flash,
    true,
    true,
    {
        "FSDP2 over dp/dp_replicate x cp: fp32 parameter and AdamW shards; gradients are None until backward "
        "(zero_grad(set_to_none)) and counted at the optimizer step, whichever peak is higher",
        "bf16 unsharded copies: the root (embedding, final norm, output: FSDP keeps the root unsharded after "
        "forward) and the blocks not resharded after forward (the last one by default; all with PP)",
        "TP plan: colwise wq/wk/wv/w1/w3/output, rowwise wo/w2/embedding, sequence-parallel norms, loss parallel; "
        "no vocabulary padding",
        "activations: per-op SAC keeps each block's input, every other matmul output (wq, wv, w1, w2), SDPA "
        "output and log-sum-exp; full AC the block input; --compile drops saved tensors no backward reads",
        "loss at the start of backward: fp32 log-probabilities and gradients (upcast), bf16 logits and gradient "
        "(fused, --compile), or chunked (--loss)",
        "reserved - allocated: FSDP's all-gather and reduce-scatter buffers cached on their own streams (root and "
        "two blocks, fp32 reduction inputs and outputs) and the bf16 logits' block the fp32 loss cannot reuse",
        "device total adds CUDA context 0.52 GiB + NCCL 0.39 GiB + 0.4 GiB per further process group",
    },
    titan_loss_peak,
    true,
};

const Profile kMegatron{
    "megatron",
    "Megatron-Core: what its modules allocate and save (TP rules per matrix, distributed optimizer, "
    "fused attention, pipeline schedules)",
    megatron_tp_split,
    megatron_zero_group,
    megatron_accounts,
    megatron_layer_activations,
    megatron_chunk_activations,
    // Megatron's default mixed precision: bf16 weights, fp32 main grads, fp32 master and moments
    // (18 bytes per parameter, 6 + 12/d with the distributed optimizer).
    PrecisionRecipe{DType::bf16, DType::fp32, DType::fp32, DType::fp32, DType::fp32},
    // Allocator fragmentation (reserved - allocated) 5% of allocated, the low end of the report's
    // 5-30% (published Megatron runs: 0.2-8 GiB); outside the allocator, measured on an H100 MoE
    // trainer (mlc-ai/pith-train tools/memory_estimator): CUDA context 0.52 GiB, world NCCL
    // communicator 0.39 GiB, 0.4 GiB per further process-group dimension; DeepEP's buffer 3.1 GB
    // (deepseek-ai/DeepEP issue 510). See docs/formulas.md.
    // tp_device_residual: the one fitted constant, 5.7 GiB, the mean shortfall of the device totals
    // against FlagPerf's four tensor-parallel Llama3-8B rows (validation set, nvidia-smi "used").
    OverheadModel{Bytes{}, Bytes{}, 5, 5, Bytes::from_gib(0.52), Bytes::from_gib(0.39), Bytes::from_gib(0.4),
                  Bytes::from_gb(3.1), Bytes::from_gib(5.7)},
    true,
    false,
    true,
    128,
    AttentionKernel::flash,
    true,
    true,
    {
        "MLA down-projections duplicated on every TP rank, up-projections column- and o_proj row-parallel; "
        "dense and shared-expert MLPs split by TP; routed experts over ep x etp; router and norms replicated",
        "embedding and output head vocab-parallel, vocabulary padded to a multiple of 128 x tp "
        "(--make-vocab-size-divisible-by)",
        "distributed optimizer (--distributed-optimizer, = --zero 1): master weights and moments over dp*cp, "
        "routed experts over edp; main gradients whole in their own dtype",
        "activations per module with sequence parallelism as set, fused attention by default (--attention eager "
        "keeps the score matrices), no dropout; balanced routing",
        "last stage: final norm, head and fp32 logits of the loss; MTP depths with their own logits and a copy "
        "of the embedding where it is not already on the rank",
        "micro-batches in flight from the schedule; full recomputation keeps each layer's input plus one "
        "layer's activations while it is recomputed",
        "FP8 recipes (--fp8) cache linear-layer inputs in FP8 with their scales and keep FP8 weight copies "
        "(row- and column-wise); --moe-imbalance/--moe-capacity-factor size the hottest expert rank",
        "device total = allocated + fragmentation (5% of allocated, --fragmentation-pct) + CUDA context 0.52 GiB "
        "+ NCCL 0.39 GiB + 0.4 GiB per further process group (+ 5.7 GiB with tp > 1, fitted to FlagPerf's "
        "nvidia-smi figures); DeepEP buffer 3.1 GB with --moe-token-dispatcher deepep",
        "loss backward: the fp32 gradient of the logits is cast to bf16 for the head (one more b*s/cp x vocab/tp "
        "bf16 tensor on the last stage), before any layer is recomputed",
    },
    megatron_loss_peak,
    false,
};

}  // namespace

const Profile& paper_profile() { return kPaper; }
const Profile& megatron_profile() { return kMegatron; }
const Profile& torchtitan_profile() { return kTorchtitan; }

std::vector<std::string_view> profile_names() { return {"megatron", "paper", "torchtitan"}; }

bool fp8_gemm_weight(Role r) {
  switch (r) {
    case Role::q_down:
    case Role::q_up:
    case Role::q_rope:
    case Role::kv_down:
    case Role::k_rope:
    case Role::k_up:
    case Role::v_up:
    case Role::o_proj:
    case Role::q_proj:
    case Role::k_proj:
    case Role::v_proj:
    case Role::mlp_gate:
    case Role::mlp_up:
    case Role::mlp_down:
    case Role::expert_gate:
    case Role::expert_up:
    case Role::expert_down:
    case Role::shared_gate:
    case Role::shared_up:
    case Role::shared_down:
    case Role::mtp_eh_proj: return true;
    default: return false;
  }
}

std::int64_t padded_vocab(std::int64_t vocab, std::int64_t multiple, std::int64_t tp) {
  if (multiple <= 0) return vocab;
  const std::int64_t unit = multiple * tp;
  return (vocab + unit - 1) / unit * unit;
}

const Profile& get_profile(std::string_view name) {
  if (name == "paper") return kPaper;
  if (name == "megatron") return kMegatron;
  if (name == "torchtitan") return kTorchtitan;
  throw InputError("--profile", std::string(name), fmt::format("one of: {}", fmt::join(profile_names(), ", ")));
}

}  // namespace moemem
