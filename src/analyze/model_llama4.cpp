// Llama-4 (llama4_text; src/config_llama4.cpp) under the profiles: which setups are analysed, and
// what its training saves beyond a Llama-style MoE layer. Only the megatron profile models it, as
// Megatron-Core runs it with Megatron-Bridge's Llama-4 settings; the paper profile applies its own
// formula to the same layers; torchtitan and hf are refused by name.
//
// Megatron-Bridge's Llama4ModelProvider (src/megatron/bridge/models/llama/llama_provider.py, last
// present at a5d7c58bd6ac before 5d194b9c1 removed the per-size providers; its layer spec,
// models/llama/llama4_utils.py get_llama4_layer_spec and Llama4SelfAttention, is still in the
// tree) sets moe_apply_probs_on_input, moe_router_score_function sigmoid, moe_router_topk 1,
// qk_l2_norm (Scout; not Maverick), nope_layer_interval 4, attention_chunk_size 8192 and
// apply_rope_fusion false, with moe_shared_expert_intermediate_size the expert size (one shared
// expert).
#include <algorithm>

#include <fmt/format.h>

#include "analyze/internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::detail {

namespace {

const ActivationTerm* find(const std::vector<ActivationTerm>& terms, std::string_view name) {
  for (const auto& t : terms) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::optional<InputError> check_llama4_megatron(const ModelSpec& m, const Layout& layout, const TrainingConfig& t,
                                                AttentionKernel attention) {
  // Megatron-LM 4ca43093f8 ("Moe fix for Llama4", first in core_v0.13.0) added
  // moe_apply_probs_on_input; the experts assert moe_router_topk == 1 with it (experts.py).
  if (m.moe_probs_on_input && t.megatron_version != MegatronVersion::current) {
    return InputError("--megatron-version", std::string(name_of(t.megatron_version)),
                      "current for Llama-4: Megatron-Core has moe_apply_probs_on_input (the router score on the expert "
                      "input) from 0.13");
  }
  if (m.moe_probs_on_input && m.moe.top_k != 1) {
    return InputError("--model", fmt::format("num_experts_per_tok {}", m.moe.top_k),
                      "1 for Llama-4 under the megatron profile: Megatron-Core's moe_apply_probs_on_input asserts "
                      "moe_router_topk == 1");
  }
  // Llama4SelfAttention.forward chunks q, k and v (chunkify: padded to a multiple of the chunk,
  // chunks folded into the batch) when a rank's sequence exceeds attention_chunk_size. With a
  // fused kernel and a sequence that is a multiple of the chunk, the saved q, k, v, output and
  // log-sum-exp have the elements of the unchunked ones; padding (a sequence not a multiple),
  // the unfused kernel's chunk x chunk scores and the context-parallel split are not modelled.
  const std::int64_t chunk = m.attention_chunk_size, local = t.seq_len / layout.config.cp;
  if (chunk == 0 || local <= chunk) return std::nullopt;
  if (layout.config.cp > 1) {
    return InputError("--cp", std::to_string(layout.config.cp),
                      fmt::format("1 for Llama-4 when seq_len / cp ({}) exceeds attention_chunk_size ({}): chunked "
                                  "attention under context parallelism is not modelled",
                                  local, chunk));
  }
  if (attention == AttentionKernel::eager) {
    return InputError("--attention", "eager",
                      fmt::format("flash for Llama-4 when seq_len ({}) exceeds attention_chunk_size ({}): the unfused "
                                  "kernel's chunk x chunk scores are not modelled",
                                  t.seq_len, chunk));
  }
  if (t.seq_len % chunk != 0) {
    return InputError("--seq-len", std::to_string(t.seq_len),
                      fmt::format("at most or a multiple of attention_chunk_size ({}) for Llama-4: Llama4SelfAttention "
                                  "pads a partial chunk, which is not modelled",
                                  chunk));
  }
  return std::nullopt;
}

}  // namespace

std::optional<InputError> check_llama4(const ModelSpec& m, const Profile& profile, const Layout& layout,
                                       const TrainingConfig& t, AttentionKernel attention) {
  if (profile.name == "paper") return std::nullopt;
  if (profile.name != "megatron") {
    return InputError("--profile", std::string(profile.name),
                      fmt::format("megatron or paper for model_type llama4_text: the {} profile does not model Llama-4 "
                                  "(its MoE with the score on the expert input, its q/k L2 norm)",
                                  profile.name));
  }
  return check_llama4_megatron(m, layout, t, attention);
}

void llama4_layer_terms(const Profile& profile, const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out) {
  const auto& m = c.model;
  if (profile.name != "megatron" || m.naming != NamingStyle::llama4) return;
  const auto& p = c.layout.config;
  const DType a = c.training.activation_dtype;
  if (m.qk_l2_norm) {
    // Megatron-Core's L2Norm (transformer/torch_norm.py; Bridge's q_layernorm/k_layernorm on RoPE
    // layers) normalises q and k in a torch.compile'd function (jit_fuser), whose backward keeps
    // its input: q and k as the QKV projection gives them, b*s/cp x (heads + kv heads)/tp x
    // head_dim, as the megatron profile counts RMSNorm q/k norms' inputs (a per-row fp32 statistic
    // the compiled graph may keep beside it, 1/head_dim of this, is not counted). moemem's layer
    // terms are per layer kind, so this is counted on the NoPE layers too, which have no q/k norm
    // (m.nope_layers of them): an over-count of one such tensor per NoPE layer.
    const std::int64_t tokens = c.training.micro_batch * (c.training.seq_len / p.cp);
    const std::int64_t heads = m.num_heads / p.tp + m.num_kv_heads / p.tp;  // as megatron_projections
    out.push_back({"attn.qk_l2_norm_inputs", Module::attention,
                   Count(checked_mul(checked_mul(static_cast<std::uint64_t>(tokens), static_cast<std::uint64_t>(heads),
                                                 "activation size"),
                                     static_cast<std::uint64_t>(m.head_dim), "activation size")),
                   a, false, 0, "b*s/cp x (heads + kv heads)/tp x head_dim (every layer: NoPE layers over-counted)"});
  }
  // Llama4ModelProvider sets apply_rope_fusion false (with rotary_interleaved), so RoPE runs
  // Megatron-Core's unfused _apply_rotary_pos_emb_bshd (models/common/embeddings/rope_utils.py):
  // t * cos_ + rotate_half(t) * sin_, where cos_ and sin_ are new [rows, 1, 1, head_dim] tensors
  // in the activation dtype that the two products keep (t needs a gradient, the frequencies do
  // not), for q and for k: 4 x rows x head_dim, rows the rank's s/cp, or the chunk when
  // Llama4SelfAttention chunks (it slices rotary_pos_emb[:attention_chunk_size]). The fused
  // kernel the profile otherwise assumes keeps nothing. Counted on every layer: the NoPE layers,
  // which skip RoPE, are over-counted as for the L2 norm.
  const std::int64_t local = c.training.seq_len / p.cp, chunk = m.attention_chunk_size;
  const std::int64_t rows = chunk > 0 ? std::min(local, chunk) : local;
  out.push_back({"attn.rope_cos_sin (unfused RoPE)", Module::attention,
                 Count(checked_mul(static_cast<std::uint64_t>(4 * rows), static_cast<std::uint64_t>(m.head_dim), "activation size")),
                 a, false, 0, "4 x min(s/cp, attention_chunk_size) x head_dim (every layer: NoPE layers over-counted)"});
  if (kind != LayerKind::moe || !m.moe_probs_on_input) return;
  // moe_apply_probs_on_input (Megatron-LM core_v0.13+, transformer/moe/experts.py TEGroupedMLP.forward
  // and SequentialMLP.forward): permuted_probs x permuted tokens, cast back to the activation
  // dtype, feeds fc1; the probabilities are then reset to ones for the weighted activation. The
  // multiply's backward keeps both operands — the unscaled dispatched tokens (R x h, beside fc1's
  // own scaled input) and the fp32 probabilities (R, beside the activation's ones) — freed with
  // the rest of the experts' tensors by the moe module's recomputation. The product itself is
  // fp32 (fp32 probabilities times bf16 tokens) until the cast: R x h x 4 bytes while the layer
  // holds the permuted tokens S and the all-to-all output R, no more than the S + 3R it holds at
  // the combine (megatron.cpp megatron_moe_dispatch_transient), so the layer's transient stands.
  const ActivationTerm* fc1 = find(out, "experts.fc1_input (dispatched tokens)");
  const ActivationTerm* probs = find(out, "experts.probs");
  if (fc1 == nullptr || probs == nullptr) return;
  out.push_back({"experts.unscaled_input (probs-on-input multiply)", Module::routed_experts, fc1->elements, a, false,
                 fc1->dropped_by, "R x h"});
  out.push_back({"experts.input_probs (probs-on-input multiply)", Module::routed_experts, probs->elements, DType::fp32,
                 false, probs->dropped_by, "R"});
}

}  // namespace moemem::detail
