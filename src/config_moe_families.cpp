// Readers for MoE families added with issue 14 whose tensors are those of families moemem
// already builds, arranged differently: OLMoE and dots.llm1. Each names the Hugging Face
// modelling file it follows; src/config.cpp dispatches on model_type.
#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

// OLMoE (transformers models/olmoe/modeling_olmoe.py). OlmoeAttention: q, k, v, o projections
// with head_dim = hidden_size / num_attention_heads (no head_dim key), biases on all four when
// attention_bias, and q_norm / k_norm RMSNorms over the whole projection (hidden_size weights for
// q, num_key_value_heads x head_dim for k), not per head. OlmoeSparseMoeBlock in every layer:
// gate (num_experts x hidden, no bias) and num_experts SwiGLU experts of intermediate_size; no
// shared expert. clip_qkv clamps q, k, v in place and adds nothing.
void parse_olmoe(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_gqa_common(j, source, m, used);
  for (const char* k : {"attention_bias", "num_experts", "num_experts_per_tok", "clip_qkv"}) used.insert(k);
  require_derived_head_dim(m, source, "OlmoeAttention");
  m.naming = NamingStyle::qwen_moe;  // mlp.gate, mlp.experts.<e>.{gate,up,down}_proj
  m.qkv_bias = m.o_bias = get_bool(j, "attention_bias", source, false);
  m.qk_norm = m.qk_norm_full_width = true;
  m.moe.num_routed_experts = get_int(j, "num_experts", source, std::nullopt, 1, kMaxCount);
  m.moe.top_k = get_int(j, "num_experts_per_tok", source);
  m.moe.expert_ffn = m.dense_ffn;
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::moe);
}

// dots.llm1 (transformers models/dots1/modular_dots1.py): Qwen3's attention (q, k, v, o with
// attention_bias on all four, per-head q/k RMSNorm) with DeepSeek-V3's MLP and MoE: the first
// first_k_dense_replace layers dense (intermediate_size), then n_routed_experts experts of
// moe_intermediate_size, one fused shared MLP of n_shared_experts x moe_intermediate_size, and
// DeepseekV3TopkRouter's e_score_correction_bias per expert (always present). No MTP layers.
void parse_dots1(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_gqa_common(j, source, m, used);
  for (const char* k : {"attention_bias", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
                        "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq", "topk_method"}) {
    used.insert(k);
  }
  m.naming = NamingStyle::deepseek;
  m.qkv_bias = m.o_bias = get_bool(j, "attention_bias", source, false);
  m.qk_norm = true;
  parse_deepseek_moe(j, source, m);
  m.moe.router_bias = m.is_moe();
}

// ERNIE-4.5 MoE (transformers models/ernie4_5_moe/modular_ernie4_5_moe.py): Llama attention
// (head_dim, or hidden / heads) and SwiGLU MLPs; layer i is MoE when (i + 1) %
// moe_layer_interval == 0 and moe_layer_start_index <= i <= moe_layer_end_index (-1: the last
// layer): a gate (moe_num_experts x hidden), Ernie4_5_MoeStatics' e_score_correction_bias
// ([1, experts], always built), moe_num_experts experts of moe_intermediate_size and one shared
// MLP of moe_num_shared_experts x moe_intermediate_size. num_nextn_predict_layers MTP layers as
// the -PT checkpoints store them (inventory.cpp). use_bias (biases on every projection and the
// head) and use_rmsnorm false (LayerNorm) are refused; moe_capacity, moe_gate, moe_use_aux_free,
// moe_norm_min and multi_token_pred_lambda steer routing and the loss and add no tensor.
void parse_ernie4_5_moe(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_gqa_common(j, source, m, used);
  for (const char* k : {"use_bias", "use_rmsnorm", "moe_num_experts", "moe_k", "moe_intermediate_size",
                        "moe_num_shared_experts", "moe_layer_start_index", "moe_layer_end_index", "moe_layer_interval",
                        "num_nextn_predict_layers", "moe_capacity", "moe_gate", "moe_use_aux_free", "moe_norm_min",
                        "multi_token_pred_lambda"}) {
    used.insert(k);
  }
  if (get_bool(j, "use_bias", source, false)) {
    throw InputError(source_field(source, "use_bias"), "true", "false (ERNIE-4.5's projection biases are not modelled)");
  }
  if (!get_bool(j, "use_rmsnorm", source, true)) {
    throw InputError(source_field(source, "use_rmsnorm"), "false", "true (ERNIE-4.5 with LayerNorm is not modelled)");
  }
  m.naming = NamingStyle::ernie;
  m.moe.num_routed_experts = get_int(j, "moe_num_experts", source, std::nullopt, 1, kMaxCount);
  m.moe.top_k = get_int(j, "moe_k", source);
  m.moe.expert_ffn = get_int(j, "moe_intermediate_size", source);
  m.moe.num_shared_experts = get_int(j, "moe_num_shared_experts", source, 0, 0);
  m.moe.shared_ffn = m.moe.num_shared_experts * m.moe.expert_ffn;
  m.moe.router_bias = true;
  const std::int64_t start = get_int(j, "moe_layer_start_index", source, 1, 0, m.num_layers - 1);
  std::int64_t end = m.num_layers - 1;
  if (const auto it = j.find("moe_layer_end_index"); it != j.end() && !it->is_null() && *it != -1) {
    end = get_int(j, "moe_layer_end_index", source, std::nullopt, start, m.num_layers - 1);
  }
  const std::int64_t interval = get_int(j, "moe_layer_interval", source, 1, 1, kMaxCount);
  for (std::int64_t i = start; i <= end; ++i) {
    if ((i + 1) % interval == 0) m.layer_kinds[static_cast<std::size_t>(i)] = LayerKind::moe;
  }
  m.mtp_layers = get_int(j, "num_nextn_predict_layers", source, 0, 0, 16);
  m.mtp_dense = true;
}

// GLM's MoE keys on top of DeepSeek-V3's MLA reader (transformers models/glm4_moe_lite and
// models/glm_moe_dsa): Glm4MoeTopkRouter registers an e_score_correction_bias per expert whatever
// topk_method says (sigmoid scores; one fused shared MLP as DeepSeek-V3's). transformers 5's
// mlp_layer_types spells the dense/sparse split of first_k_dense_replace and must agree with it;
// partial_rotary_factor, n_group, topk_group and routed_scaling_factor change no tensor.
void read_glm_moe_keys(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  for (const char* k : {"partial_rotary_factor", "mlp_layer_types"}) used.insert(k);
  m.moe.router_bias = m.is_moe();
  const auto types = j.find("mlp_layer_types");
  if (types == j.end() || types->is_null()) return;
  const auto expected = [&](std::size_t i) { return m.layer_kinds[i] == LayerKind::moe ? "sparse" : "dense"; };
  bool same = types->is_array() && types->size() == m.layer_kinds.size();
  for (std::size_t i = 0; same && i < types->size(); ++i) same = (*types)[i].is_string() && (*types)[i] == expected(i);
  if (!same) {
    throw InputError(source_field(source, "mlp_layer_types"), types->dump().substr(0, 80),
                     fmt::format("{} entries of \"dense\" or \"sparse\" that agree with first_k_dense_replace ({}) "
                                 "and moe_layer_freq (other patterns are not modelled)",
                                 m.layer_kinds.size(), get_int(j, "first_k_dense_replace", source, 0, 0)));
  }
}

// GLM-4.7-Flash (transformers models/glm4_moe_lite/modular_glm4_moe_lite.py): DeepSeek-V3's
// multi-head latent attention (q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa,
// kv_a_layernorm, kv_b_proj, o_proj) with GLM-4.5's MoE (read_glm_moe_keys), first_k_dense_replace
// dense layers and num_nextn_predict_layers MTP layers stored as DeepSeek-V3's
// (layers.<L>.{enorm, hnorm, eh_proj, ...}).
void parse_glm4_moe_lite(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_deepseek(j, source, m, used);
  read_glm_moe_keys(j, source, m, used);
}

}  // namespace moemem::config_detail
