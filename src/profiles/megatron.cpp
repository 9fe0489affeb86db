// megatron: what Megatron-Core allocates and saves (read in Megatron-LM's megatron/core:
// transformer/multi_latent_attention.py, transformer/moe/*, models/gpt, optimizer/distrib_optimizer.py;
// facts collected in shared/reference/training-memory-facts.md). bf16 weights, fp32 main
// gradients and fp32 Adam states unless told otherwise; activations with a fused attention kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "analyze/deepep.hpp"
#include "moemem/activation.hpp"
#include "moemem/profile.hpp"
#include "shared.hpp"

namespace moemem::profiles {
namespace {
struct MegatronDims {
  std::int64_t b, s_local, tokens, tokens_sp, heads, tp;
};

// The attention shape of the layer's class, whole (not per rank): MiMo-V2-Flash's sliding-window
// layers are sized apart (swa_*), and its value heads are narrower (v_head_dim).
struct AttnShape {
  std::int64_t heads, kv_heads, qk_dim, v_dim;
};
AttnShape attn_shape(const ActivationContext& c) {
  const auto& m = c.model;
  if (c.mixer == MixerKind::sliding_attention) return {m.swa.heads, m.swa.kv_heads, m.swa.head_dim, m.swa.v_head_dim};
  return {m.num_heads, m.num_kv_heads, m.head_dim, m.v_head_dim > 0 ? m.v_head_dim : m.head_dim};
}

MegatronDims megatron_dims(const ActivationContext& c) {
  const auto& p = c.layout.config;
  const std::int64_t s_local = c.training.seq_len / p.cp;
  const std::int64_t tokens = c.training.micro_batch * s_local;
  return {c.training.micro_batch, s_local, tokens, tokens / (p.sp ? p.tp : 1), attn_shape(c).heads / p.tp, p.tp};
}

// Head dimensions of the core attention's inputs on one TP rank.
struct QkvShape {
  std::int64_t qk_dim, v_dim, kv_heads;
};

// What the projections before the core attention keep: with MLA, the compressed q and kv and
// their norms' outputs; otherwise the q/k norms' inputs when the model has them.
QkvShape megatron_projections(const ActivationContext& c, Terms& t) {
  const auto& m = c.model;
  const auto d = megatron_dims(c);
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
    return {l.qk_nope_head_dim + l.qk_rope_head_dim, l.v_head_dim, d.heads};
  }
  const AttnShape shape = attn_shape(c);
  const std::int64_t kv_heads = shape.kv_heads / d.tp;
  // Variants that save nothing more (issue 14): partial rotary (GLM-4.5's partial_rotary_factor,
  // Megatron's --rotary-percent) rotates a slice of q and k in the fused RoPE kernel, whose
  // backward needs only the frequencies (megatron/core/models/common/embeddings/rope_utils.py);
  // sliding-window layers (gpt-oss layer_types, MiMo-V2-Flash's swa layers with their own head
  // counts) run the same fused kernel with a window, saving the same q, k, v, output and
  // log-sum-exp; so do learned sinks (Transformer Engine's softmax_offset: a parameter per head); q/k
  // biases are added in the linear layer's output.
  if (m.qk_norm) {
    t.add("attn.qk_norm_inputs", Module::attention, elems({d.tokens, d.heads + kv_heads, shape.qk_dim}), t.a, 0,
          "b*s/cp x (heads + kv heads)/tp x head_dim");
  }
  return {shape.qk_dim, shape.v_dim, kv_heads};
}

// Attention block of one layer. The layer input is what full recomputation keeps.
void megatron_attention(const ActivationContext& c, Terms& t) {
  const auto& m = c.model;
  const auto d = megatron_dims(c);
  const auto up = static_cast<std::uint16_t>(m.attention == AttentionKind::mla ? kRecomputeMlaUpProj : 0);
  t.add("attn.input (layer input)", Module::attention, elems({d.tokens_sp, m.hidden}), t.a, 0, "b*s/cp/(tp if sp) x h", true);
  t.linear_input("attn.norm_output (q/kv input)", "attn.norm_output.scales", Module::attention,
                 elems({d.tokens_sp, m.hidden}), kRecomputeLayernorm, "b*s/cp/(tp if sp) x h");
  if (m.has_indexer()) return megatron_dsa_attention(c, t);  // absorbed MLA + DSA (megatron_dsa.cpp)
  const auto [qk_dim, v_dim, kv_heads] = megatron_projections(c, t);
  const bool eager = c.attention == AttentionKernel::eager;
  // Inputs of the core attention (after RoPE), kept by both kernels. The unfused kernel
  // (megatron/core/transformer/dot_product_attention.py, DotProductAttention.forward) first
  // repeat_interleaves K and V to every query head (a copy when kv heads < heads), and its
  // baddbmm and bmm save those copies.
  const bool repeated = eager && kv_heads != d.heads;
  const std::int64_t kv_saved = repeated ? d.heads : kv_heads;
  t.add("attn.q", Module::attention, elems({d.tokens, d.heads, qk_dim}), t.a, up, "b*s/cp x heads/tp x qk_dim");
  t.add("attn.k", Module::attention, elems({d.tokens, kv_saved, qk_dim}), t.a, up,
        repeated ? "b*s/cp x heads/tp x qk_dim (repeated to every query head)" : "b*s/cp x kv_heads/tp x qk_dim");
  // mla_up_proj discards q, k and v (multi_latent_attention.py, CheckpointWithoutOutput), but TE's
  // fused attention keeps its own V when the q/k and v head sizes differ (192 vs 128 on
  // DeepSeek-V3), so freeing v returns nothing (research notes D5(b): Moonlight measured 0.716 GB
  // freed against q + k + the up-projection norms' 0.736 GB; with v 0.963 GB). Freed by no module.
  t.add("attn.v", Module::attention, elems({d.tokens, kv_saved, v_dim}), t.a, c.training.mla_up_frees_v ? up : std::uint16_t{0},
        repeated ? "b*s/cp x heads/tp x v_dim (repeated to every query head)" : "b*s/cp x kv_heads/tp x v_dim");
  if (!c.training.rope_fusion && m.learned_positions == 0 && m.naming != NamingStyle::llama4) {
    // --no-rope-fusion: Megatron-Core's unfused _apply_rotary_pos_emb_bshd (models/common/embeddings/
    // rope_utils.py) computes t * cos_ + rotate_half(t) * sin_ with cos_ and sin_ new [s/cp, 1, 1,
    // rot_dim] tensors in the activation dtype; the products keep them (t needs a gradient, they do
    // not), once for q and once for k: 4 x s/cp x rot_dim, whatever the micro-batch. rot_dim: the
    // head dim (errs high under --rotary-percent < 1, which moemem does not read), MLA's
    // qk_rope_head_dim. Llama-4 adds its own (model_llama4.cpp).
    const std::int64_t rot = m.attention == AttentionKind::mla ? m.mla.qk_rope_head_dim : qk_dim;
    t.add("attn.rope_cos_sin (unfused RoPE)", Module::attention, elems({4, c.training.seq_len / c.layout.config.cp, rot}), t.a,
          up, "4 x s/cp x rot_dim (cos and sin for q and k)");
  }
  if (eager) {
    // DotProductAttention.forward: scores = baddbmm(q, k^T) (its backward saves q and k, not the
    // scores); probs = FusedScaleMaskSoftmax (megatron/core/fusions/fused_softmax.py: the fused
    // Scaled*Softmax functions save only softmax_results; the torch fallback's nn.Softmax saves
    // its output, the in-place mask saves the cached causal mask); context = bmm(probs, v) saves
    // the same probs tensor. So one b x heads/tp x s/cp x s matrix in the activation dtype
    // (Megatron's launcher default: no --attention-softmax-in-fp32). With attention dropout the
    // probabilities then pass torch's dropout (DotProductAttention.attention_dropout), which keeps
    // a bool mask, and bmm saves the dropped-out probabilities instead (a second matrix).
    const Count scores = elems({d.b, d.heads, d.s_local, c.training.seq_len});
    t.add("attn.softmax", Module::attention, scores, t.a, kRecomputeCoreAttn, "b x heads/tp x s/cp x s (softmax output)");
    // baddbmm is out of place (beta 0: the preallocated global-memory buffer it is handed is
    // ignored): the raw scores are a new matrix, alive until the softmax has read them.
    t.transient("attn.scores (baddbmm output, transient)", Module::attention, scores, kRecomputeCoreAttn,
                "b x heads/tp x s/cp x s");
    if (c.training.attention_dropout > 0) {
      t.add("attn.dropout_mask", Module::attention, scores, DType::int8, kRecomputeCoreAttn,
            "b x heads/tp x s/cp x s (a bool each)");
      t.add("attn.dropout_output (bmm input)", Module::attention, scores, t.a, kRecomputeCoreAttn, "b x heads/tp x s/cp x s");
    }
  } else {
    t.add("attn.softmax_lse", Module::attention, elems({d.b, d.heads, d.s_local}), DType::fp32, kRecomputeCoreAttn,
          "b x heads/tp x s/cp");
  }
  // The attention output: kept by the kernel, and as the input of the row-parallel o_proj (the
  // same tensor). Under FP8 o_proj keeps an FP8 copy only with delayed scaling or up to 0.12: since
  // 781e765818 Attention.__init__ calls set_save_original_input(linear_proj) (TE >= 2.6).
  if (c.training.attn_out_e5m6) {
    // DeepSeek-V3 §3.3.3 (1): the input of the Linear after attention, which attention's backward
    // also reads, is cached once in a customized E5M6 format with power-of-two scales per 1x128
    // tile: no BF16 copy beside an FP8 one.
    const Count n = elems({d.tokens, d.heads, v_dim});
    t.add("attn.context (E5M6, o_proj input)", Module::attention, n, DType::e5m6, 0, "b*s/cp x heads/tp x v_dim");
    t.add("attn.context.scales", Module::attention, fp8_scale_elements(n, Fp8Recipe::blockwise), DType::fp32, 0,
          "a scale per 1x128 tile of the tensor above");
    return;
  }
  t.add("attn.context", Module::attention, elems({d.tokens, d.heads, v_dim}), t.a, 0, "b*s/cp x heads/tp x v_dim");
  if (m.attn_output_gate) return megatron_output_gate(c, t, d.heads, v_dim);  // megatron_gdn.cpp
  const bool own_fp8_copy = c.training.fp8 == Fp8Recipe::delayed || c.training.megatron_version != MegatronVersion::current;
  if (c.training.fp8 != Fp8Recipe::none && own_fp8_copy) {
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

// What one MoE layer's forward holds without saving it (docs/formulas.md "MoE dispatch
// transient"; Megatron-LM d98e8a64, megatron/core/transformer/moe/moe_layer.py MoELayer.forward's
// custom_forward keeps `hidden_states` (the permuted tokens) and `dispatched_input` (the all-to-all
// output) referenced until it returns, and routed_experts_compute keeps `expert_output` (fc2's
// output) until it returns; token_dispatcher.py MoEAlltoAllTokenDispatcher: permute in
// dispatch_preprocess, all_to_all in token_dispatch, sort_chunks_by_idxs in dispatch_postprocess
// and its inverse in combine_preprocess when the rank holds more than one expert, all_to_all back
// in token_combine). None of these copies is saved (all_to_all's autograd keeps the split sizes,
// the fused permute an int32 row map); the sorted copy is the fc1 input, counted as saved.
// S = tokens x top_k sent, R = the routed rows received (as for the fc1 input).
// - alltoall, more than one local expert: at combine_preprocess permuted S + all-to-all output R +
//   fc2 output R + unsorted R; at the combine's all-to-all (fc2's output freed) permuted S + R + R +
//   the returned S. The larger: S + 3R when R >= S (always, unless --moe-capacity-factor < 1).
// - alltoall, one local expert: no sort; the all-to-all output is the fc1 input; at the combine
//   permuted S + fc2 output R + the returned S.
// - DeepEP (flex, _DeepepManager; fused_a2a.py fused_dispatch): the received tokens once per
//   (token, destination rank), at most the ep group's tokens and at most R, expanded per expert into
//   the fc1 input; with fc2's output R.
// Copies of each token the dispatch sends: one per routed expert, or under node-limited routing
// (DeepSeek-V3 §3.2.2: each token to at most 4 nodes, sent over InfiniBand once per node and
// forwarded over NVLink there) one per destination node when the expert group spans nodes of 8
// GPUs, one per destination GPU within a node.
std::int64_t dispatch_copies(const ActivationContext& c) {
  const std::int64_t top_k = c.model.moe.top_k, limit = c.training.dispatch_node_limit, ep = c.layout.config.ep;
  if (limit <= 0) return top_k;
  constexpr std::int64_t kGpusPerNode = 8;
  const std::int64_t destinations = ep > kGpusPerNode ? std::min(limit, (ep + kGpusPerNode - 1) / kGpusPerNode) : ep;
  return std::min(top_k, destinations);
}

void megatron_moe_dispatch_transient(const ActivationContext& c, Terms& t, std::int64_t routed) {
  const auto& m = c.model;
  const auto d = megatron_dims(c);
  const auto& p = c.layout.config;
  const std::int64_t sent = d.tokens_sp * dispatch_copies(c);
  const std::uint16_t rerun = kRecomputeMoe;
  if (c.training.deepep) {
    const std::int64_t received = std::min(d.tokens_sp * p.ep, routed);
    t.transient("moe.deepep_received_tokens (transient)", Module::routed_experts, elems({received, m.hidden}), rerun,
                "min(tokens x ep, R) x h");
    t.transient("experts.fc2_output (transient)", Module::routed_experts, elems({routed, m.hidden}), rerun, "R x h");
    return;
  }
  if (c.training.allgather) {
    // Megatron's allgather dispatcher (token_dispatcher.py MoEAllGatherTokenDispatcher) over the
    // expert tensor x expert parallel group (pg_collection.tp_ep): every rank gathers the group's
    // N = tokens x etp x ep rows into the global memory buffer (counted there, overheads.cpp) and
    // their fp32 probabilities; the local experts' rows are permuted out of them (R, as alltoall's
    // received rows). masked_select saves the local routing map, [local experts, N] bools, for the
    // probabilities' gradient. At the combine, unpermute restores [N, h] and token_combine casts it
    // to the probabilities' fp32 for the reduce-scatter: both alive at once (none saved; backward
    // gathers an fp32 gradient of that size and casts it back).
    const std::int64_t gathered = d.tokens_sp * p.etp_degree() * p.ep;
    t.add("moe.local_map (masked_select mask)", Module::routed_experts,
          elems({gathered, m.moe.num_routed_experts / p.ep}), DType::int8, kRecomputeMoe,
          "N x experts/ep (a bool each), N = tokens x etp x ep");
    t.transient("moe.unpermuted_output (transient)", Module::routed_experts, elems({gathered, m.hidden}), rerun, "N x h");
    t.transient("moe.combine_input_fp32 (transient)", Module::routed_experts, elems({gathered, m.hidden}), DType::fp32, rerun,
                "N x h, fp32 (cast for the reduce-scatter)");
    return;
  }
  // The dispatch side in FP8 where the recipe quantizes before dispatching (DeepSeek-V3 §3.3.2:
  // one byte per element and an fp32 scale per 128), the combine side in the activation dtype.
  const bool fp8 = c.training.fp8_dispatch;
  const auto dispatched = [&](const char* name, const char* scales, std::int64_t rows, const char* rule) {
    t.transient(name, Module::routed_experts, elems({rows, m.hidden}), fp8 ? DType::fp8 : t.a, rerun, rule);
    if (fp8) {
      t.transient(scales, Module::routed_experts, elems({rows, (m.hidden + 127) / 128}), DType::fp32, rerun,
                  "rows x h/128");
    }
  };
  dispatched("moe.permuted_tokens (transient)", "moe.permuted_tokens.scales (transient)", sent,
             c.training.dispatch_node_limit > 0 ? "S x h, S = tokens x destination nodes (at most the node limit)"
                                                 : "S x h, S = tokens x top_k");
  const bool one_expert = m.moe.num_routed_experts / p.ep == 1;
  if (!one_expert) {
    dispatched("moe.a2a_output (transient)", "moe.a2a_output.scales (transient)", routed, "R x h");
    t.transient("moe.unsorted_output (transient)", Module::routed_experts, elems({routed, m.hidden}), rerun, "R x h");
  }
  if (one_expert || routed >= sent) {
    t.transient("experts.fc2_output (transient)", Module::routed_experts, elems({routed, m.hidden}), rerun, "R x h");
  }
  if (one_expert || routed < sent) {
    t.transient("moe.combine_output (transient)", Module::routed_experts, elems({sent, m.hidden}), rerun, "S x h");
  }
}

// The MoE block after its norm: router, the routed experts of the hottest expert rank, and the
// shared experts.
// Balanced routing: the expert-parallel group's tokens, top-k copies each, spread evenly over
// its ep ranks, every expert-tensor-parallel rank of an expert seeing all of its tokens. The
// hottest rank receives --moe-imbalance times that, at most --moe-capacity-factor times.
std::int64_t megatron_routed_tokens(const ActivationContext& c) {
  const auto d = megatron_dims(c);
  double factor = c.training.moe_imbalance;  // validated >= 1 in validate_training
  if (c.training.moe_capacity_factor) factor = std::min(factor, *c.training.moe_capacity_factor);
  const auto base = static_cast<double>(elems({d.tokens_sp, c.model.moe.top_k, c.layout.config.etp_degree()}).value());
  return static_cast<std::int64_t>(std::ceil(base * factor));
}

void megatron_moe_block(const ActivationContext& c, Terms& t) {
  const auto& m = c.model;
  const auto d = megatron_dims(c);
  const auto& e = m.moe;
  const auto& p = c.layout.config;
  // Router: fp32 scores for the score function's backward and a boolean routing map.
  t.add("router.scores", Module::router, elems({d.tokens_sp, e.num_routed_experts}), DType::fp32, kRecomputeMoe,
        "tokens x experts");
  t.add("router.routing_map", Module::router, elems({d.tokens_sp, e.num_routed_experts}), DType::int8, kRecomputeMoe,
        "tokens x experts (a bool each)");
  const std::int64_t routed = megatron_routed_tokens(c);
  const std::uint16_t moe = kRecomputeMoe;
  t.linear_input("experts.fc1_input (dispatched tokens)", "experts.fc1_input.scales", Module::routed_experts,
                 elems({routed, m.hidden}), moe, "R x h, R = tokens x top_k x etp x imbalance");
  if (c.training.fp8_swiglu_input) {
    t.linear_input("experts.fc1_output (SwiGLU input)", "experts.fc1_output.scales", Module::routed_experts,
                   elems({routed, 2 * e.expert_ffn}, p.etp_degree()), moe, "R x 2 ffn/etp");
  } else {
    // Nemotron-H's experts are ungated (squared ReLU): fc1 yields ffn, not 2 ffn.
    const std::int64_t width = m.gated_mlp ? 2 * e.expert_ffn : e.expert_ffn;
    t.add("experts.fc1_output (SwiGLU input)", Module::routed_experts, elems({routed, width}, p.etp_degree()), t.a, moe,
          m.gated_mlp ? "R x 2 ffn/etp" : "R x ffn/etp (ungated)");
  }
  // Megatron-Core's grouped MLP applies the routing probabilities inside the activation
  // (activation_func_with_probs), which keeps fc1's output and the probabilities; fc2 keeps the
  // product as its input, and the unpermute that follows only sums (nothing saved).
  t.linear_input("experts.act_output (fc2 input)", "experts.act_output.scales", Module::routed_experts,
                 elems({routed, e.expert_ffn}, p.etp_degree()), kRecomputeMoe | kRecomputeMoeAct, "R x ffn/etp");
  if (c.training.megatron_version == MegatronVersion::current) {
    t.add("experts.probs", Module::routed_experts, elems({routed}), DType::fp32, moe, "R");
  } else {
    // Up to 0.12 the probabilities were applied in unpermute (moe_utils.py unpermute at
    // core_v0.6.0..core_v0.12.0: reshape to tokens x top_k x h, multiply by probs, sum), which saves
    // the unweighted expert output and the probabilities on the source rank; commit 2659630721
    // (0.13) moved the multiply into the fused activation.
    t.add("experts.unweighted_output (unpermute input)", Module::routed_experts, elems({d.tokens_sp, e.top_k, m.hidden}), t.a,
          moe, "tokens x top_k x h");
    t.add("unpermute.probs", Module::routed_experts, elems({d.tokens_sp, e.top_k}), DType::fp32, moe, "tokens x top_k");
  }
  if (c.training.megatron_version == MegatronVersion::v0_6) {
    // 0.6's GroupedMLP runs an unfused glu (experts.py: chunk, silu(x0) * x1), keeping silu's output too.
    t.add("experts.silu_output", Module::routed_experts, elems({routed, e.expert_ffn}, p.etp_degree()), t.a, moe, "R x ffn/etp");
  }
  megatron_moe_dispatch_transient(c, t, routed);
  if (e.shared_ffn > 0) {
    // --moe-shared-expert-overlap (shared_experts.py, SharedExpertMLP with overlap): the shared
    // experts all-gather the sequence-parallel input themselves and keep the full-sequence copy
    // for backward; their own checkpointing (shared_experts) is not available then.
    const bool overlap = c.training.shared_expert_overlap;
    if (overlap && p.sp && p.tp > 1) {
      t.add("shared.gathered_input (overlap)", Module::shared_experts, elems({d.tokens, m.hidden}), t.a, moe,
            "b*s/cp x h (all-gathered over tp)");
    }
    const std::uint16_t shared = overlap ? kRecomputeMoe : kRecomputeMoe | kRecomputeSharedExperts;
    if (c.training.fp8_swiglu_input) {
      // DeepSeek-V3 §3.3.3 (2): the SwiGLU inputs of the MoE layer, its shared experts' too, are
      // cached in FP8 and the SwiGLU output is recomputed in backward (not kept as fc2's input).
      t.linear_input("shared.fc1_output (SwiGLU input)", "shared.fc1_output.scales", Module::shared_experts,
                     elems({d.tokens, 2 * e.shared_ffn}, d.tp), shared, "b*s/cp x 2 ffn/tp");
    } else {
      megatron_mlp(c, t, e.shared_ffn, Module::shared_experts, "shared.fc1_output", "shared.act_output (fc2 input)",
                   "shared.act_output.scales", shared, m.gated_mlp);
    }
  }
}

// Hidden dropout: the transformer layer's bias-dropout-add after the attention block and after the
// MLP (megatron/core/fusions/fused_bias_dropout.py: torch's dropout inside the fused function)
// keeps a bool mask of its input, one byte per element, for backward. No selective module
// recomputes it; full recomputation keeps only the layer input.
void megatron_dropout_mask(const ActivationContext& c, Terms& t, const char* name, Module mod) {
  if (c.training.hidden_dropout <= 0) return;
  const auto d = megatron_dims(c);
  t.add(name, mod, elems({d.tokens_sp, c.model.hidden}), DType::int8, 0, "b*s/cp/(tp if sp) x h (a bool each)");
}

// Nemotron-H's blocks (Megatron-LM d98e8a64 models/hybrid/hybrid_layer_specs.py): one mixer each (Mamba-2,
// attention, squared-ReLU MLP or MoE), the input its residual, the norm fused into the first linear but the
// MoE block's (a TENorm whose output router and dispatch keep); a Nemotron-NAS no_op-attention layer's MLP.
void megatron_hybrid_block(const ActivationContext& c, LayerKind kind, Terms& t) {
  const auto& m = c.model;
  const auto d = megatron_dims(c);
  if (c.mixer == MixerKind::mamba2) megatron_mamba_mixer(c, t);  // megatron_mamba.cpp
  else if (c.mixer == MixerKind::attention) megatron_attention(c, t);
  else {
    const Module block = kind == LayerKind::moe ? Module::router : Module::dense_mlp;
    t.add("mlp.input (layer input)", block, elems({d.tokens_sp, m.hidden}), t.a, 0, "b*s/cp/(tp if sp) x h", true);
    if (kind == LayerKind::dense) {
      t.linear_input("mlp.norm_output (fc1 input)", "mlp.norm_output.scales", block, elems({d.tokens_sp, m.hidden}),
                     kRecomputeMlp, "b*s/cp/(tp if sp) x h");
      megatron_mlp(c, t, m.dense_ffn, Module::dense_mlp, "mlp.fc1_output", "mlp.act_output (fc2 input)",
                   "mlp.act_output.scales", kRecomputeMlp, m.gated_mlp);
    } else {
      t.add("mlp.norm_output (router input)", block, elems({d.tokens_sp, m.hidden}), t.a, kRecomputeLayernorm,
            "b*s/cp/(tp if sp) x h");
      megatron_moe_block(c, t);
    }
  }
  megatron_dropout_mask(c, t, "block.dropout_mask (hidden dropout)", Module::attention);
}

// A Nemotron-NAS block (Megatron-LM d98e8a64 models/gpt/heterogeneous/heterogeneous_layer_specs.py,
// Transformer Engine): each part full (SelfAttention or the MLP, as any layer's), no_op (IdentityOp
// for the part and its norm, IdentityFuncOp for its bias-dropout-add: nothing saved), or a linear
// replacement: TELayerNormColumnParallelLinearGathered (transformer/heterogeneous/
// linear_replacements.py), an h x h/tp LayerNormLinear that saves its input and its norm's output,
// then the output gathered (with sp: padded to h and reduce-scattered), which saves nothing, and
// the part's bias-dropout-add. The replaced FFN is the layer's `mlp` module (the mlp recompute
// module checkpoints it); the replaced attention is no core attention, so no module recomputes it.
// The first part present takes the layer input, kept under full recomputation.
void megatron_nas_block(const ActivationContext& c, Terms& t) {
  const auto& m = c.model;
  const NasBlock& b = *m.nas_block;
  const auto d = megatron_dims(c);
  const Count rows = elems({d.tokens_sp, m.hidden});
  const char* rule = "b*s/cp/(tp if sp) x h";
  const auto linear = [&](const char* input, const char* norm, const char* scales, Module mod, std::uint16_t recompute, bool first) {
    t.add(input, mod, rows, t.a, 0, rule, first);
    t.linear_input(norm, scales, mod, rows, recompute, rule);
  };
  if (b.attention == NasPart::full) {
    megatron_attention(c, t);
  } else if (b.attention == NasPart::linear) {
    linear("linear_attn.input (layer input)", "linear_attn.norm_output", "linear_attn.norm_output.scales", Module::attention, 0, true);
  }
  if (b.attention != NasPart::none) megatron_dropout_mask(c, t, "attn.dropout_mask (hidden dropout)", Module::attention);
  const bool first = b.attention == NasPart::none;
  if (b.ffn == NasPart::full) {
    t.add(first ? "mlp.input (layer input)" : "mlp.input", Module::dense_mlp, rows, t.a, 0, rule, first);
    t.linear_input("mlp.norm_output (fc1 input)", "mlp.norm_output.scales", Module::dense_mlp, rows, kRecomputeMlp, rule);
    megatron_mlp(c, t, m.dense_ffn, Module::dense_mlp, "mlp.fc1_output", "mlp.act_output (fc2 input)", "mlp.act_output.scales",
                 kRecomputeMlp, m.gated_mlp);
  } else if (b.ffn == NasPart::linear) {
    linear(first ? "linear_mlp.input (layer input)" : "linear_mlp.input", "linear_mlp.norm_output", "linear_mlp.norm_output.scales",
           Module::dense_mlp, kRecomputeMlp, first);
  }
  if (b.ffn != NasPart::none) {
    megatron_dropout_mask(c, t, first ? "block.dropout_mask (hidden dropout)" : "mlp.dropout_mask (hidden dropout)",
                          first ? Module::attention : Module::dense_mlp);
  }
}

// One decoder layer: the attention block, then the dense MLP or the MoE block.
void megatron_layer_activations(const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out) {
  const auto& m = c.model;
  const auto d = megatron_dims(c);
  Terms t{c, out};
  if (m.nas_block) return megatron_nas_block(c, t);
  if (m.naming == NamingStyle::nemotron_h || c.mixer == MixerKind::none) return megatron_hybrid_block(c, kind, t);
  if (c.mixer == MixerKind::gated_delta_net) megatron_gdn_mixer(c, t);  // megatron_gdn.cpp
  else megatron_attention(c, t);
  megatron_dropout_mask(c, t, "attn.dropout_mask (hidden dropout)", Module::attention);
  const Module block = kind == LayerKind::moe ? Module::router : Module::dense_mlp;
  t.add("mlp.input", block, elems({d.tokens_sp, m.hidden}), t.a, 0, "b*s/cp/(tp if sp) x h");
  if (kind == LayerKind::dense) {
    // The dense MLP's norm is fused into fc1 (Transformer Engine's LayerNormLinear,
    // TELayerNormColumnParallelLinear in gpt_layer_specs.py; pre_mlp_layernorm is an IdentityOp),
    // which saves its own ln_out: the layernorm module skips it (transformer_layer.py, research
    // notes D5(a)), so nothing frees it but the mlp module's checkpoint.
    t.linear_input("mlp.norm_output (fc1 input)", "mlp.norm_output.scales", block, elems({d.tokens_sp, m.hidden}),
                   kRecomputeMlp, "b*s/cp/(tp if sp) x h");
    megatron_mlp(c, t, m.dense_ffn, Module::dense_mlp, "mlp.fc1_output", "mlp.act_output (fc2 input)",
                 "mlp.act_output.scales", kRecomputeMlp, m.gated_mlp);
    megatron_dropout_mask(c, t, "mlp.dropout_mask (hidden dropout)", Module::dense_mlp);
    if (c.training.finetune == Finetune::lora) lora_layer_terms(c, kind, t, 0);
    return;
  }
  // The MoE block's norm output feeds the router (bf16) and the dispatch.
  t.add("mlp.norm_output (router input)", block, elems({d.tokens_sp, m.hidden}), t.a, kRecomputeLayernorm,
        "b*s/cp/(tp if sp) x h");
  megatron_moe_block(c, t);
  megatron_dropout_mask(c, t, "mlp.dropout_mask (hidden dropout)", Module::router);
  if (c.training.finetune == Finetune::lora) lora_layer_terms(c, kind, t, megatron_routed_tokens(c));
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

// The loss's backward returns the logits' gradient in the dtype the loss keeps them in, and the
// autograd engine casts it to the dtype of the head's output (the activation dtype) while the
// loss's own copy is alive.
// - fp32 (default): megatron/core/tensor_parallel/cross_entropy.py calculate_logits_max upcasts
//   (.float()), _VocabParallelCrossEntropy saves the fp32 softmax and its backward returns the
//   fp32 gradient computed in place in it; so does the native fused path
//   (megatron/core/fusions/fused_cross_entropy.py, --cross-entropy-fusion-impl native), and
//   Transformer Engine's parallel_cross_entropy from 2.18 (transformer_engine/pytorch/triton/
//   cross_entropy.py cross_entropy_forward: "Store the input gradient in FP32", PR 3193). The
//   cast adds one b*s/cp x vocab/tp tensor in the activation dtype.
// - logits kept in the activation dtype (--logits-dtype bf16): Transformer Engine's
//   parallel_cross_entropy before 2.18 (--cross-entropy-loss-fusion --cross-entropy-fusion-impl
//   te) writes the gradient in place into the bf16 logits it saved (cross_entropy_forward
//   returned `_input`; CrossEntropyFunction.backward returns it scaled in place), so there is no
//   cast and no further tensor.
LossPeak megatron_loss_peak(const ActivationContext& c) {
  if (c.training.logits_dtype == c.training.activation_dtype) {
    return {Bytes{}, Bytes{}, "none: the logits' gradient is written in place into the saved logits"};
  }
  const auto d = megatron_dims(c);
  return {bytes_of(elems({d.tokens, c.padded_vocab}, d.tp), c.training.activation_dtype), Bytes{},
          "bf16 copy of the logits' fp32 gradient"};
}

// The batch of one micro-batch on a rank that receives it (Megatron-LM d98e8a64 pretrain_gpt.py
// get_batch: the first and last pipeline stages and MTP ranks; megatron/core/utils.py
// get_batch_on_this_tp_rank): position ids (int64) where the embedding or MTP is, labels (int64)
// and the loss mask (fp32) where the loss is, each b x s; and, unless
// --no-create-attention-mask-in-dataloader, the [b, 1, s, s] boolean mask the GPT dataset builds
// (megatron/core/datasets/gpt_dataset.py _get_ltor_masks_and_position_ids: torch.tril(...) < 0.5),
// copied or broadcast to every tp rank. get_batch_on_this_cp_rank then keeps this rank's s/cp
// slice of each (the mask along its query dimension: [b, 1, s/cp, s]) and the full tensors are
// freed. The token ids are the embedding's saved term. Nothing here is saved for backward under
// the fused attention kernels, which take the causal mask type and not the tensor; forward_step
// drops the batch when it returns.
InputBatch megatron_input_batch(const ActivationContext& c, bool embedding, bool loss) {
  const auto& p = c.layout.config;
  const std::int64_t b = c.training.micro_batch, s = c.training.seq_len;
  const auto batch = [&](std::int64_t rows) {
    Bytes x;
    if (embedding) x += bytes_of(elems({b, rows}), DType::int64);  // position ids
    if (loss) x += bytes_of(elems({b, rows}), DType::int64) + bytes_of(elems({b, rows}), DType::fp32);
    if (c.training.dataloader_attention_mask) x += bytes_of(elems({b, rows, s}), DType::int8);
    return x;
  };
  const Bytes local = batch(s / p.cp);
  // While the batch is split, index_select's slices are made beside the whole tensors, the token
  // ids among them (their slice is the embedding's saved term).
  const Bytes whole = p.cp > 1 ? batch(s) + local + (embedding ? bytes_of(elems({b, s}), DType::int64) : Bytes{}) : Bytes{};
  return {local, whole,
          c.training.dataloader_attention_mask
              ? "the data loader's batch: b x s x s boolean attention mask (Megatron's default), position ids, labels, loss mask"
              : "the data loader's batch: position ids, labels, loss mask (--no-create-attention-mask-in-dataloader)"};
}

// Megatron-Core's tensor-parallel divisibility of the MLP sizes: ColumnParallelLinear splits its
// output and RowParallelLinear its input over the tp group with divide(), which asserts that the
// size divides (megatron/core/tensor_parallel/layers.py). So the dense MLP's intermediate size
// and the shared experts' (SharedExpertMLP, an MLP over the same group) must divide by tp. (Heads
// and key/value groups over tp, and the routed experts' size over etp, are check_layout's rules.)
std::optional<InputError> megatron_tp_divisibility(const ModelSpec& m, const ParallelConfig& p) {
  if (p.tp <= 1) return std::nullopt;
  const bool dense_layers = std::find(m.layer_kinds.begin(), m.layer_kinds.end(), LayerKind::dense) != m.layer_kinds.end() ||
                            (m.mtp_layers > 0 && m.mtp_kind() == LayerKind::dense);
  if (dense_layers && m.dense_ffn % p.tp != 0) {
    return InputError("--tp", std::to_string(p.tp),
                      fmt::format("a divisor of the dense MLP's intermediate_size ({}): Megatron-Core splits fc1's output "
                                  "and fc2's input over tp and refuses sizes that do not divide",
                                  m.dense_ffn));
  }
  if (m.is_moe() && m.moe.shared_ffn > 0 && m.moe.shared_ffn % p.tp != 0) {
    return InputError("--tp", std::to_string(p.tp),
                      fmt::format("a divisor of the shared experts' intermediate size ({}): Megatron-Core splits the "
                                  "shared-expert MLP over tp and refuses sizes that do not divide",
                                  m.moe.shared_ffn));
  }
  return std::nullopt;
}

// Megatron-Core models FP8, routing imbalance and the flash kernel; it refuses torchtitan's
// settings, routing options for a model without routed experts, and MLP sizes tp does not divide.
std::optional<InputError> megatron_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t) {
  if (auto e = refuse_routing_without_experts(m, t)) return e;
  if (auto e = refuse_fsdp2_options(kMegatron.name, t)) return e;
  if (auto e = refuse_transformers_options(kMegatron.name, t)) return e;
  if (auto e = check_cuda_graphs(m, t)) return e;
  if (auto e = refuse_finetune(kMegatron.name, t, true,
                               {OptimizerKind::adamw, OptimizerKind::sgd, OptimizerKind::lion, OptimizerKind::muon})) {
    return e;
  }
  // LoRA's A of a column-parallel linear is a ColumnParallelLinear(in, r): Megatron divides r by tp (Bridge peft/utils.py).
  if (t.finetune == Finetune::lora && (t.lora_rank % layout.config.tp != 0 || t.lora_rank % layout.config.etp_degree() != 0)) {
    return InputError("--lora-rank", std::to_string(t.lora_rank),
                      fmt::format("a multiple of tp = {} and etp = {} (Megatron splits A's r rows over them)", layout.config.tp,
                                  layout.config.etp_degree()));
  }
  if (t.recompute == Recompute::selective && (t.recompute_modules & kRecomputeMoeAct) != 0 &&
      t.megatron_version != MegatronVersion::current) {
    return InputError("--recompute-modules", "moe_act", "Megatron-Core 0.13 or later (--megatron-version current)");
  }
  if (t.shared_expert_overlap && m.moe.shared_ffn == 0) {
    return InputError("--moe-shared-expert-overlap", "set", fmt::format("a model with shared experts ({} has none)", m.name));
  }
  if (auto e = ep_overlap_check(m, layout, t)) return e;
  if (auto e = userbuffers_check(layout, t)) return e;
  if (auto e = cpu_offload_check(m, layout, t)) return e;
  if (auto e = megatron_dsa_check(m, layout, t)) return e;
  if (auto e = megatron_layer_shape_check(m, layout, t)) return e;
  if (t.deepep && m.is_moe()) {
    if (auto e = detail::deepep_group_check(layout.config.ep * layout.config.etp_degree())) return e;
  }
  return megatron_tp_divisibility(m, layout.config);
}

}  // namespace

const Profile kMegatron{
    .name = "megatron",
    .summary = "Megatron-Core: what its modules allocate and save (TP rules per matrix, distributed optimizer, "
               "fused attention, pipeline schedules)",
    .assumptions =
        {
            "MLA down-projections duplicated on every TP rank, up-projections column- and o_proj row-parallel; "
            "dense and shared-expert MLPs split by TP; routed experts over ep x etp; router and norms replicated",
            "embedding and output head vocab-parallel, vocabulary padded to a multiple of 128 x tp "
            "(--make-vocab-size-divisible-by)",
            // Replaced by the ZeRO stage's own line when it is not 1 (analyze.cpp zero_assumption).
            "distributed optimizer (--distributed-optimizer, = --zero 1): master weights and moments over dp*cp, "
            "routed experts over edp; main gradients whole in their own dtype",
            "activations per module with sequence parallelism as set, fused attention by default (--attention eager "
            "keeps the softmax output and K, V repeated to every query head, with attention dropout its mask and "
            "output too); hidden dropout (Megatron's default 0.1, --hidden-dropout 0 to turn off) keeps a one-byte mask "
            "after attention and after the MLP; balanced routing",
            "last stage: final norm, head and fp32 logits of the loss; MTP depths with their own logits and a copy "
            "of the embedding where it is not already on the rank",
            "micro-batches in flight from the schedule; full recomputation keeps each layer's input plus one "
            "layer's activations while it is recomputed",
            "FP8 recipes (--fp8) cache linear-layer inputs in FP8 with their scales and keep FP8 weight copies "
            "(row- and column-wise); --moe-imbalance/--moe-capacity-factor size the hottest expert rank",
            "device total = allocated + fragmentation (5% of allocated, --fragmentation-pct) + CUDA context 0.52 GiB "
            "+ each NCCL communicator the run uses (24 channels x 12 MiB per collective group, send/recv buffers for "
            "pipeline and all-to-all peers; H100 node of 8, NCCL >= 2.22); with --moe-token-dispatcher "
            "deepep, DeepEP's NVLink buffer, workspace and (across nodes) NVSHMEM heap as Megatron sizes them",
            "loss backward: the fp32 gradient of the logits is cast to bf16 for the head (one more b*s/cp x vocab/tp "
            "bf16 tensor on the last stage), before any layer is recomputed; none with --logits-dtype bf16 (the "
            "gradient written in place into the saved logits, as Transformer Engine's fused cross entropy before 2.18)",
        },
    .check = megatron_check,
    .tp_split = megatron_tp_split,
    .zero_group = megatron_zero_group,
    .accounts = megatron_accounts,
    .states = &detail::kZeroStates,
    // Megatron's default mixed precision: bf16 weights, fp32 main grads, fp32 master and moments
    // (18 bytes per parameter, 6 + 12/d with the distributed optimizer).
    .default_precision = {.weights = DType::bf16,
                          .gradients = DType::fp32,
                          .master = DType::fp32,
                          .exp_avg = DType::fp32,
                          .exp_avg_sq = DType::fp32},
    .include_mtp_by_default = true,
    .vocab_multiple = 128,
    .default_attention = AttentionKernel::flash,
    // Megatron-Core's TransformerConfig: hidden_dropout = attention_dropout = 0.1 unless the
    // script sets them (--hidden-dropout, --attention-dropout; recipes usually set 0).
    .default_dropout = 0.1,
    // megatron/training/arguments.py validate_args: "if args.expert_tensor_parallel_size is None:
    // args.expert_tensor_parallel_size = args.tensor_model_parallel_size".
    .etp_follows_tp = true,
    .supports_flash = true,
    .selective_recompute = true,
    .models_fp8_and_routing = true,
    .layer_activations = megatron_layer_activations,
    .chunk_activations = megatron_chunk_activations,
    .loss_peak = megatron_loss_peak,
    .single_microbatch = false,
    .recompute_transient = true,
    // Allocator fragmentation (reserved - allocated) 5% of allocated, the low end of the report's
    // 5-30% (published Megatron runs: 0.2-8 GiB); outside the allocator: the CUDA context, 0.52 GiB
    // measured on an H100 MoE trainer (mlc-ai/pith-train tools/memory_estimator; PyTorch PR 86509
    // measured 0.27-0.62 GiB with and without lazy module loading), and each NCCL communicator
    // the run uses, from NCCL's buffer sizes (src/analyze/overheads.cpp); DeepEP's buffers from its size
    // hints (src/analyze/deepep.cpp). See docs/formulas.md.
    .overhead = {.buffers_low = Bytes{},
                 .buffers_high = Bytes{},
                 .fragmentation_pct_low = 5,
                 .fragmentation_pct_high = 5,
                 .cuda_context = Bytes::from_gib(0.52),
                 .nccl_communicators = true,
                 .gemm_workspaces = true},
    .input_batch = megatron_input_batch,
    // megatron/core/tensor_parallel/random.py CheckpointFunction.backward: detach_variable(inputs)
    // and run_function on them, so the kept input is not copied by the rerun.
    .recompute_reuses_input = true,
};
}  // namespace moemem::profiles
