// Readers for MoE families added with issue 14 whose expert tensors are stored fused or under
// their own names: IBM Granite MoE (granitemoe, granitemoeshared), DBRX, MiniMax-M2 and Hunyuan-A13B. Each names the Hugging Face
// modelling file it follows; src/config.cpp dispatches on model_type and src/inventory.cpp
// spells the tensors (NamingStyle::granite, NamingStyle::dbrx, NamingStyle::hunyuan).
#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

// Granite MoE (transformers models/granitemoe/modular_granitemoe.py; the shared variant
// models/granitemoeshared/modular_granitemoeshared.py). GraniteMoeAttention is Llama's q, k, v,
// o with biases on all four when attention_bias, and head_dim = hidden_size /
// num_attention_heads (GraniteMoeConfig has no head_dim key). Every layer is GraniteMoeMoE:
// num_local_experts experts of intermediate_size in two fused tensors and a bias-free router
// (inventory.cpp granite_moe). granitemoeshared adds GraniteMoeSharedMLP of
// shared_intermediate_size (0: none) beside the experts. embedding_multiplier,
// attention_multiplier, residual_multiplier and logits_scaling scale activations and add no tensor.
void parse_granitemoe(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_gqa_common(j, source, m, used);
  for (const char* k : {"attention_bias", "num_local_experts", "num_experts_per_tok", "embedding_multiplier",
                        "attention_multiplier", "residual_multiplier", "logits_scaling"}) {
    used.insert(k);
  }
  require_derived_head_dim(m, source, "GraniteMoeAttention");
  m.naming = NamingStyle::granite;
  m.qkv_bias = m.o_bias = get_bool(j, "attention_bias", source, false);
  m.moe.num_routed_experts = get_int(j, "num_local_experts", source, std::nullopt, 1, kMaxCount);
  m.moe.top_k = get_int(j, "num_experts_per_tok", source);
  m.moe.expert_ffn = m.dense_ffn;
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::moe);
  const std::int64_t shared = get_int(j, "shared_intermediate_size", source, 0, 0);
  if (m.model_type == "granitemoeshared") {
    used.insert("shared_intermediate_size");
    m.moe.shared_ffn = shared;
    m.moe.num_shared_experts = shared > 0 ? 1 : 0;
  } else if (shared > 0) {
    // GraniteMoeConfig has no shared MLP; a config that names one is granitemoeshared's.
    throw InputError(source_field(source, "shared_intermediate_size"), std::to_string(shared),
                     "absent or 0 for model_type granitemoe (a shared MLP is model_type granitemoeshared)");
  }
}

namespace {

// A nested config object (DBRX's attn_config, ffn_config): absent or null reads as empty, so
// each key takes DbrxAttentionConfig's / DbrxFFNConfig's default.
json nested(const json& j, std::string_view key, const std::string& source) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return json::object();
  if (!it->is_object()) throw InputError(source_field(source, key), it->dump(), "a JSON object");
  return *it;
}

// The nested keys DBRX's reader does not use are reported like top-level ones; those that add
// tensors in MosaicML's llm-foundry (q/k LayerNorms, an FFN other than its mb_dmoe) are refused.
void check_nested(const json& sub, const std::string& source, std::string_view name, const Keys& read, ModelSpec& m) {
  for (const auto& [key, value] : sub.items()) {
    if (read.contains(key)) continue;
    const bool adds = ((key == "qk_ln" || key == "qk_gn") && value != false && !value.is_null()) ||
                      (key == "ffn_type" && value != "mb_dmoe");
    if (adds) {
      throw InputError(source_field(source, fmt::format("{}.{}", name, key)), value.dump(),
                       "absent or false for model_type dbrx: the key adds tensors DbrxBlock does not have");
    }
    if (m.unrecognised_keys.size() < 100) m.unrecognised_keys.push_back(fmt::format("{}.{}", name, key));
  }
}

}  // namespace

// DBRX (transformers models/dbrx/modeling_dbrx.py; databricks/dbrx-base). Sizes under their own
// names (d_model, n_heads, n_layers) with attention and FFN keys nested: DbrxAttention is one
// fused Wqkv [d_model + 2 x kv_n_heads x head_dim, d_model] and out_proj, no biases, head_dim =
// d_model / n_heads; every block's DbrxFFN is a bias-free router.layer [moe_num_experts,
// d_model] and DbrxExpertGLU's w1, v1, w2, each [moe_num_experts x ffn_hidden_size, d_model];
// norm_1, norm_2 and norm_f are LayerNorms without a bias (weights only). clip_qkv clamps
// activations; moe_jitter_eps, moe_loss_weight, moe_normalize_expert_weights and
// uniform_expert_assignment steer routing; none adds a tensor. DbrxConfig refuses tied
// embeddings, and so does this reader.
void parse_dbrx(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  for (const char* k : {"d_model", "n_heads", "n_layers", "vocab_size", "max_seq_len", "attn_config", "ffn_config",
                        "resid_pdrop", "emb_pdrop"}) {
    used.insert(k);
  }
  m.attention = AttentionKind::gqa;
  m.naming = NamingStyle::dbrx;
  m.hidden = get_int(j, "d_model", source);
  m.vocab = get_int(j, "vocab_size", source);
  m.num_layers = get_int(j, "n_layers", source, std::nullopt, 1, kMaxCount);
  m.num_heads = get_int(j, "n_heads", source);
  if (m.hidden % m.num_heads != 0) {
    throw InputError(source_field(source, "n_heads"), std::to_string(m.num_heads),
                     fmt::format("a divisor of d_model ({}): DbrxAttention's head_dim is d_model / n_heads", m.hidden));
  }
  m.head_dim = m.hidden / m.num_heads;
  const std::string attn_source = source + ": attn_config";
  const json attn = nested(j, "attn_config", source);
  m.num_kv_heads = get_int(attn, "kv_n_heads", attn_source, 1);  // DbrxAttentionConfig's default
  if (m.num_heads % m.num_kv_heads != 0) {
    throw InputError(source_field(attn_source, "kv_n_heads"), std::to_string(m.num_kv_heads),
                     fmt::format("a divisor of n_heads ({})", m.num_heads));
  }
  check_nested(attn, source, "attn_config", {"kv_n_heads", "clip_qkv", "rope_theta", "attn_pdrop", "model_type"}, m);
  const std::string ffn_source = source + ": ffn_config";
  const json ffn = nested(j, "ffn_config", source);
  m.dense_ffn = m.moe.expert_ffn = get_int(ffn, "ffn_hidden_size", ffn_source, 3584);  // DbrxFFNConfig's defaults
  m.moe.num_routed_experts = get_int(ffn, "moe_num_experts", ffn_source, 4, 1, kMaxCount);
  m.moe.top_k = get_int(ffn, "moe_top_k", ffn_source, 1);
  check_nested(ffn, source, "ffn_config",
               {"ffn_hidden_size", "moe_num_experts", "moe_top_k", "ffn_act_fn", "moe_jitter_eps", "moe_loss_weight",
                "moe_normalize_expert_weights", "uniform_expert_assignment", "model_type"},
               m);
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::moe);
  if (get_bool(j, "tie_word_embeddings", source, false)) {
    throw InputError(source_field(source, "tie_word_embeddings"), "true", "false (DbrxConfig refuses tied embeddings)");
  }
}

// MiniMax-M2 (transformers models/minimax_m2/modular_minimax_m2.py; MiniMaxAI/MiniMax-M2).
// MiniMaxM2Attention is FlexOlmo's: bias-free q, k, v, o of head_dim and q_norm / k_norm RMSNorms
// over the whole projection (num_attention_heads x head_dim and num_key_value_heads x head_dim
// weights: qk_norm_type "per_layer"); rotary_dim rotates part of each head and adds nothing.
// Every layer is MiniMaxM2SparseMoeBlock, stored as Mixtral's block_sparse_moe (gate, experts
// w1 / w3 / w2 of intermediate_size) plus its e_score_correction_bias buffer (num_local_experts
// values, sigmoid routing). use_mtp, num_mtp_modules and mtp_transformer_layers describe MTP
// modules that neither the published checkpoint (its 228,689,764,864 parameters are the main
// model's) nor transformers' MiniMaxM2ForCausalLM nor Megatron-Bridge's MiniMaxM2Bridge holds:
// they are read and counted as none. Keys that would add other tensors are refused by name: a
// shared MLP (shared_intermediate_size), per-head q/k norms, attention biases and
// attn_type_list's linear (lightning) attention layers, which are MiniMax-01's.
void parse_minimax_m2(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_gqa_common(j, source, m, used);
  for (const char* k : {"attention_bias", "num_local_experts", "num_experts_per_tok", "use_qk_norm", "qk_norm_type",
                        "use_routing_bias", "shared_intermediate_size", "attn_type_list", "use_mtp", "num_mtp_modules",
                        "mtp_transformer_layers", "rotary_dim", "rope_parameters"}) {
    used.insert(k);
  }
  m.naming = NamingStyle::mixtral;  // block_sparse_moe.{gate, experts.<e>.{w1, w3, w2}}
  if (get_bool(j, "attention_bias", source, false)) {
    throw InputError(source_field(source, "attention_bias"), "true", "false (MiniMaxM2Attention's projections have no bias)");
  }
  if (const std::int64_t shared = get_int(j, "shared_intermediate_size", source, 0, 0); shared > 0) {
    throw InputError(source_field(source, "shared_intermediate_size"), std::to_string(shared),
                     "absent or 0 for model_type minimax_m2 (MiniMaxM2SparseMoeBlock has no shared MLP)");
  }
  m.qk_norm = get_bool(j, "use_qk_norm", source, true);
  if (const auto it = j.find("qk_norm_type"); m.qk_norm && it != j.end() && !it->is_null() && *it != "per_layer") {
    throw InputError(source_field(source, "qk_norm_type"), it->dump(),
                     "per_layer (q/k norms over the whole projection, as MiniMaxM2Attention builds them)");
  }
  m.qk_norm_full_width = m.qk_norm;
  if (const auto it = j.find("attn_type_list"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw InputError(source_field(source, "attn_type_list"), it->dump(), "a list of 1s");
    for (const auto& v : *it) {
      if (v != 1) {
        throw InputError(source_field(source, "attn_type_list"), v.dump(),
                         "1 (softmax attention) for every layer: MiniMax-01's linear attention layers are not modelled");
      }
    }
  }
  m.moe.num_routed_experts = get_int(j, "num_local_experts", source, std::nullopt, 1, kMaxCount);
  m.moe.top_k = get_int(j, "num_experts_per_tok", source);
  m.moe.expert_ffn = m.dense_ffn;
  m.moe.router_bias = get_bool(j, "use_routing_bias", source, true);
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::moe);
  (void)get_int(j, "num_mtp_modules", source, 0, 0, 16);  // checked, counted as none (above)
  (void)get_int(j, "mtp_transformer_layers", source, 0, 0, 16);
  (void)get_bool(j, "use_mtp", source, false);
}

namespace {

// A Hunyuan per-layer key: one integer, or a list of num_hidden_layers integers, which moemem
// accepts when all are equal (one expert layout for every layer).
std::int64_t uniform_int(const json& j, std::string_view key, const std::string& source, std::int64_t fallback,
                         std::int64_t layers, std::int64_t min, std::int64_t max) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return get_int(j, key, source, fallback, min, max);
  if (it->size() != static_cast<std::size_t>(layers)) {
    throw InputError(source_field(source, key), fmt::format("a list of {} values", it->size()),
                     fmt::format("one integer or a list of num_hidden_layers ({}) integers", layers));
  }
  const json first = json{{"v", it->empty() ? json(fallback) : it->front()}};
  const std::int64_t v = get_int(first, "v", source_field(source, key), std::nullopt, min, max);
  for (const auto& e : *it) {
    if (e != it->front()) {
      throw InputError(source_field(source, key), it->dump(), "the same value for every layer (per-layer expert layouts are not modelled)");
    }
  }
  return v;
}

}  // namespace

// Hunyuan-A13B (transformers models/hunyuan_v1_moe/modular_hunyuan_v1_moe.py; the checkpoint's
// remote modeling_hunyuan.py for the per-layer lists). HunYuanMoEV1Attention is Llama's q, k, v,
// o of head_dim with per-head RMSNorms query_layernorm / key_layernorm (head_dim weights, after
// RoPE). Every layer is HunYuanMoE: a bias-free router gate.wg [num_experts, h], num_experts
// SwiGLU experts of moe_intermediate_size (absent: intermediate_size) and, when
// use_mixed_mlp_moe, shared_mlp of intermediate_size x num_shared_expert. num_experts, moe_topk,
// moe_intermediate_size and num_shared_expert may be per-layer lists; unequal entries, cross-layer
// attention (use_cla: k/v shared between layers), dense leading layers (moe_layer_num_skipped) and
// biases are refused by name. Transformers builds wg in float32; the megatron profile keeps
// Megatron-Core's router, in the training dtype (moe_router_dtype changes the compute only).
void parse_hunyuan_v1_moe(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_gqa_common(j, source, m, used);
  for (const char* k : {"attention_head_dim", "num_experts", "moe_topk", "moe_intermediate_size", "num_shared_expert",
                        "use_mixed_mlp_moe", "use_qk_norm", "use_cla", "cla_share_factor", "moe_layer_num_skipped",
                        "attention_bias", "mlp_bias", "use_rotary_pos_emb", "moe_drop_tokens",
                        "moe_random_routing_dropped_token", "eod_token_id", "sep_token_id", "use_mla"}) {
    used.insert(k);
  }
  m.naming = NamingStyle::hunyuan;
  if (get_int(j, "attention_head_dim", source, m.head_dim) != m.head_dim) {
    throw InputError(source_field(source, "attention_head_dim"), j.at("attention_head_dim").dump(),
                     fmt::format("head_dim ({}), which it repeats", m.head_dim));
  }
  for (const char* k : {"attention_bias", "mlp_bias", "use_cla", "use_mla"}) {
    if (get_bool(j, k, source, false)) {
      throw InputError(source_field(source, k), "true",
                       "false for model_type hunyuan_v1_moe (biases, cross-layer and latent attention are not modelled)");
    }
  }
  if (const std::int64_t skipped = get_int(j, "moe_layer_num_skipped", source, 0, 0); skipped > 0) {
    throw InputError(source_field(source, "moe_layer_num_skipped"), std::to_string(skipped), "0 (every layer MoE)");
  }
  m.qk_norm = get_bool(j, "use_qk_norm", source, true);
  const std::int64_t layers = m.num_layers;
  m.moe.num_routed_experts = uniform_int(j, "num_experts", source, 1, layers, 1, kMaxCount);
  m.moe.top_k = uniform_int(j, "moe_topk", source, 1, layers, 1, kMaxDim);
  m.moe.expert_ffn = uniform_int(j, "moe_intermediate_size", source, m.dense_ffn, layers, 1, kMaxDim);
  if (get_bool(j, "use_mixed_mlp_moe", source, true)) {
    m.moe.num_shared_experts = uniform_int(j, "num_shared_expert", source, 1, layers, 0, kMaxCount);
    m.moe.shared_ffn = m.moe.num_shared_experts * m.dense_ffn;
  }
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::moe);
}

}  // namespace moemem::config_detail
