// Qwen3-Next's and Qwen3.5's hybrid layers under the megatron profile: Megatron-Core's Gated
// DeltaNet (Megatron-LM d98e8a64, megatron/core/ssm/gated_delta_net/gdn.py and common.py, as
// Megatron-Bridge's Qwen3-Next and Qwen3.5 providers build it: experimental_attention_variant
// gated_delta_net, get_gated_delta_net_module_spec) with the flash-linear-attention kernels Megatron
// pins (flash-linear-attention 0.5.1, 2e38c1fa), and the sigmoid output gate of their
// full-attention layers (transformer/attention.py _apply_output_gate).
//
// The layer: in_proj is a TELayerNormColumnParallelLinear (the input RMSNorm fused into it, as
// attention's linear_qkv; the layer's input_layernorm is an IdentityOp), whose output holds q, k,
// v, the gate z, beta and alpha per rank; FLA's causal_conv1d (SiLU) over q, k, v; the L2 norm of q
// and k; q and k repeated to the value heads; the gates g = -exp(A_log) softplus(alpha + dt_bias)
// (fp32) and beta = sigmoid(b); FLA's chunk_gated_delta_rule (chunks of 64); the gated RMSNorm
// RMSNorm(o) * silu(z); out_proj a TERowParallelLinear. The gate functions are Megatron's
// jit_fuser (torch.compile from torch 2.2): their saved tensors are taken as the compiled graph's
// (the bf16 operands, silu recomputed), an assumption the report states.
#include <fmt/format.h>

#include "moemem/activation.hpp"
#include "moemem/finetune.hpp"
#include "moemem/profile.hpp"
#include "shared.hpp"

namespace moemem::profiles {

namespace {

// FLA's chunk size (fla/ops/gated_delta_rule/chunk.py: BT = 64).
constexpr std::int64_t kChunk = 64;

struct GdnDimsLocal {
  std::int64_t tokens, tokens_sp, hk, hv, dk, dv, in_proj;  // hk, hv and in_proj per TP rank
};

GdnDimsLocal gdn_dims(const ActivationContext& c) {
  const auto& g = c.model.gdn;
  const auto& p = c.layout.config;
  const std::int64_t tokens = c.training.micro_batch * c.training.seq_len;  // cp 1 (megatron_layer_shape_check)
  // in_proj's output per rank: q, k (num_k_heads x k_head_dim each), v and z (num_v_heads x
  // v_head_dim each), beta and alpha (one per value head), each section split over tp
  // (gdn.py in_proj_split_sections).
  const std::int64_t width = 2 * g.key_dim() + 2 * g.value_dim() + 2 * g.num_v_heads;
  return {tokens, tokens / (p.sp ? p.tp : 1), g.num_k_heads / p.tp, g.num_v_heads / p.tp, g.k_head_dim, g.v_head_dim,
          width / p.tp};
}

}  // namespace

// One Gated DeltaNet mixer, one micro-batch: what autograd keeps from its forward to its backward,
// each storage once.
void megatron_gdn_mixer(const ActivationContext& c, Terms& t) {
  const auto& m = c.model;
  const auto d = gdn_dims(c);
  // TE's fused norm + linear (module/layernorm_linear.py) saves its input, its RMSNorm's rsigma
  // and the norm's output: the local sequence-parallel shard, all-gathered again in backward. No
  // selective module frees them (the layernorm module skips a fused norm: transformer_layer.py).
  t.add("gdn.input (layer input)", Module::attention, elems({d.tokens_sp, m.hidden}), t.a, 0, "b*s/(tp if sp) x h", true);
  t.linear_input("gdn.norm_output (in_proj input)", "gdn.norm_output.scales", Module::attention,
                 elems({d.tokens_sp, m.hidden}), 0, "b*s/(tp if sp) x h");
  t.add("gdn.norm_rsigma", Module::norms, elems({d.tokens_sp}), DType::fp32, 0, "b*s/(tp if sp), fp32");
  // causal_conv1d saves its input x, a strided view of in_proj's output: the whole output stays
  // (fla/modules/conv: save_for_backward(x, weight, ...) without a contiguous copy).
  t.add("gdn.in_proj_output (conv1d input)", Module::attention, elems({d.tokens, d.in_proj}), t.a, 0,
        "b*s x (2 k_heads k_dim + 2 v_heads v_dim + 2 v_heads)/tp (q, k, v, z, beta, alpha)");
  // FLA's l2norm saves its output and rstd (fla/modules/l2norm.py), for q and k together.
  t.add("gdn.qk_l2norm_output", Module::attention, elems({d.tokens, 2 * d.hk, d.dk}), t.a, 0, "b*s x 2 k_heads/tp x k_dim");
  t.add("gdn.qk_l2norm_rstd", Module::attention, elems({d.tokens, 2 * d.hk}), DType::fp32, 0, "b*s x 2 k_heads/tp, fp32");
  // chunk_gated_delta_rule saves q and k (repeated to the value heads), v, the chunk-local
  // cumulative sum of g (fp32), beta and A, the WY matrices of each chunk (chunk.py
  // ChunkGatedDeltaRuleFunction.forward; A in k's dtype, chunk_fwd.py); the chunk states are
  // recomputed in backward.
  t.add("gdn.q", Module::attention, elems({d.tokens, d.hv, d.dk}), t.a, 0, "b*s x v_heads/tp x k_dim");
  t.add("gdn.k", Module::attention, elems({d.tokens, d.hv, d.dk}), t.a, 0, "b*s x v_heads/tp x k_dim");
  t.add("gdn.v", Module::attention, elems({d.tokens, d.hv, d.dv}), t.a, 0, "b*s x v_heads/tp x v_dim");
  t.add("gdn.g_cumsum", Module::attention, elems({d.tokens, d.hv}), DType::fp32, 0, "b*s x v_heads/tp, fp32");
  t.add("gdn.beta", Module::attention, elems({d.tokens, d.hv}), t.a, 0, "b*s x v_heads/tp");
  t.add("gdn.chunk_A", Module::attention, elems({d.tokens, d.hv, kChunk}), t.a, 0, "b*s x v_heads/tp x 64");
  // The gated norm: TE's RMSNorm saves its input (the kernel's output) and rstdevs; the compiled
  // gate product saves the normalised output and the contiguous z; out_proj saves its input.
  // --recompute-modules gdn_norm_out (gdn.py: CheckpointWithoutOutput around the gated norm, its
  // output discarded after out_proj) keeps only the norm's inputs, the kernel output and z.
  const std::uint16_t norm_out = kRecomputeGdnNormOut;
  t.add("gdn.core_output (out_norm input)", Module::attention, elems({d.tokens, d.hv, d.dv}), t.a, 0, "b*s x v_heads/tp x v_dim");
  t.add("gdn.out_norm_rstd", Module::attention, elems({d.tokens, d.hv}), DType::fp32, norm_out, "b*s x v_heads/tp, fp32");
  t.add("gdn.out_norm_output", Module::attention, elems({d.tokens, d.hv, d.dv}), t.a, norm_out, "b*s x v_heads/tp x v_dim");
  t.add("gdn.gate_z", Module::attention, elems({d.tokens, d.hv, d.dv}), t.a, 0, "b*s x v_heads/tp x v_dim (contiguous z)");
  t.linear_input("gdn.gated_output (out_proj input)", "gdn.gated_output.scales", Module::attention,
                 elems({d.tokens, d.hv, d.dv}), norm_out, "b*s x v_heads/tp x v_dim");
  // The chunk kernel's backward (chunk.py chunk_gated_delta_rule_bwd) recomputes w, u, the chunk
  // states h and v_new, and holds them with dh (h's size), dq, dk, dw, dv and the incoming
  // gradient: five b*s x v_heads/tp x k_dim and five x v_dim tensors and two of b x ceil(s/64) x
  // v_heads/tp x k_dim x v_dim, all bf16, until it returns (counted from the code, not measured).
  // The layer's largest transient, beside the other layers' saved tensors.
  const std::int64_t chunks = c.training.micro_batch * ((c.training.seq_len + kChunk - 1) / kChunk);
  t.transient("gdn.chunk_backward (recomputed states and gradients)", Module::attention,
              elems({d.tokens, d.hv, 5 * (d.dk + d.dv)}) + elems({2 * chunks, d.hv, d.dk, d.dv}), 0,
              "b*s x v_heads/tp x 5 (k_dim + v_dim) + 2 b ceil(s/64) x v_heads/tp x k_dim x v_dim");
}

// Qwen3-Next's and Qwen3.5's full-attention layers (attention_output_gate): q_proj also yields a
// per-head gate, and _apply_output_gate (jit_fuser) multiplies the attention output by its
// sigmoid: the compiled product saves the bf16 gate, and o_proj keeps the gated output, a tensor
// apart from the kernel's output.
void megatron_output_gate(const ActivationContext& c, Terms& t, std::int64_t heads, std::int64_t v_dim) {
  const std::int64_t tokens = c.training.micro_batch * (c.training.seq_len / c.layout.config.cp);
  t.add("attn.output_gate", Module::attention, elems({tokens, heads, v_dim}), t.a, 0, "b*s/cp x heads/tp x head_dim");
  t.linear_input("attn.gated_context (o_proj input)", "attn.gated_context.scales", Module::attention,
                 elems({tokens, heads, v_dim}), 0, "b*s/cp x heads/tp x head_dim");
}

namespace {

// Nemotron-NAS as Megatron-Core's heterogeneous layers build it (heterogeneous_layer_specs.py):
// each part full (the block's key/value heads, the block's FFN width), no_op or a linear
// replacement (megatron.cpp megatron_nas_block); a block with both parts no_op is not modelled; tp
// must divide every block's key/value heads and FFN width (Megatron asserts both); context
// parallelism's K/V block is sized by one attention shape; LoRA's terms are not worked for these
// blocks.
std::optional<InputError> megatron_nas_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t) {
  const auto& p = layout.config;
  for (std::size_t i = 0; i < m.nas_blocks.size(); ++i) {
    const NasBlock& b = m.nas_blocks[i];
    // Both parts no_op: a layer that computes nothing, whose full recomputation would still keep
    // its input; not in any published block_configs, not modelled.
    if (b.attention == NasPart::none && b.ffn == NasPart::none) {
      return InputError("--model", fmt::format("block_configs[{}] (attention and ffn both no_op)", i),
                        "blocks with an attention or an FFN part (an identity layer is not modelled; count is exact)");
    }
    if ((b.attention == NasPart::full && b.kv_heads % p.tp != 0) || b.ffn_size % p.tp != 0) {
      return InputError("--tp", std::to_string(p.tp),
                        fmt::format("a divisor of every block's key/value heads and FFN width (block_configs[{}]: {} and "
                                    "{}), as Megatron-Core asserts",
                                    i, b.kv_heads, b.ffn_size));
    }
  }
  if (p.cp > 1) return InputError("--cp", std::to_string(p.cp), "1 for a Nemotron-NAS model (blocks of several attention shapes)");
  if (t.finetune != Finetune::full) {
    return InputError("--finetune", std::string(name_of(t.finetune)), "full for a Nemotron-NAS model (adapters not modelled)");
  }
  return std::nullopt;
}

}  // namespace

// What Megatron-Core's Gated DeltaNet and Mamba-2 mixers need (common.py and mamba_mixer.py assert
// the heads divide over tp) and what this model covers: no context parallelism (their all-to-all
// paths are not modelled), no FP8, no activation offload; MiMo-V2-Flash without cp; Nemotron-NAS
// as megatron_nas_check says.
std::optional<InputError> megatron_layer_shape_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t) {
  if (!m.nas_blocks.empty()) return megatron_nas_check(m, layout, t);
  const bool norm_out = t.recompute == Recompute::selective && (t.recompute_modules & kRecomputeGdnNormOut) != 0;
  if (!m.is_hybrid()) {
    // transformer_config.py: gdn_norm_out needs experimental_attention_variant gdn or gdn2.
    if (norm_out) return InputError("--recompute-modules", "gdn_norm_out", "a model with Gated DeltaNet layers");
    // MiMo-V2-Flash: the context-parallel K/V block is sized by one attention shape.
    if (m.has_swa_dims() && layout.config.cp > 1) {
      return InputError("--cp", std::to_string(layout.config.cp),
                        "1 for a model with attention layers of two shapes (MiMo-V2-Flash; not modelled)");
    }
    return std::nullopt;
  }
  const auto& p = layout.config;
  const auto& g = m.gdn;
  // mamba_mixer.py asserts the heads and the groups of B and C divide over tp.
  if (m.naming == NamingStyle::nemotron_h && (m.mamba.num_heads % p.tp != 0 || m.mamba.n_groups % p.tp != 0)) {
    return InputError("--tp", std::to_string(p.tp),
                      fmt::format("a divisor of the Mamba-2 heads and groups ({} and {}), as Megatron-Core asserts",
                                  m.mamba.num_heads, m.mamba.n_groups));
  }
  if (m.naming != NamingStyle::nemotron_h && (g.num_k_heads % p.tp != 0 || g.num_v_heads % p.tp != 0)) {
    return InputError("--tp", std::to_string(p.tp),
                      fmt::format("a divisor of the Gated DeltaNet's key and value heads ({} and {}), as Megatron-Core asserts",
                                  g.num_k_heads, g.num_v_heads));
  }
  if (p.cp > 1) {
    return InputError("--cp", std::to_string(p.cp),
                      "1 for a model with Gated DeltaNet or Mamba-2 layers (their context-parallel all-to-all is not modelled)");
  }
  if (t.fp8 != Fp8Recipe::none) {
    return InputError("--fp8", std::string(name_of(t.fp8)), "none for a model with Gated DeltaNet or Mamba-2 layers (not modelled)");
  }
  if (t.cpu_offload_layers > 0) {
    return InputError("--cpu-offloading-num-layers", std::to_string(t.cpu_offload_layers),
                      "0 for a model with Gated DeltaNet or Mamba-2 layers (not modelled)");
  }
  return std::nullopt;
}

}  // namespace moemem::profiles
