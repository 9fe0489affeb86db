// Readers for Google's Gemma-2 (gemma2) and Gemma-3 text-only (gemma3_text) configs, following
// transformers' models/gemma2/modeling_gemma2.py and models/gemma3/modeling_gemma3.py. Their
// tensors are Llama's (q, k, v, o; gate, up, down; tied embedding) with four RMSNorms per layer
// and, in Gemma-3, per-head q/k norms; src/config.cpp dispatches on model_type.
#include <string>

#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

namespace {

// A soft-capping value (Gemma2Config attn_logit_softcapping, final_logit_softcapping): absent or
// null is none; otherwise a positive number (the cap c of c * tanh(x / c)).
double get_softcap(const json& j, std::string_view key, const std::string& source, double fallback) {
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_null()) return 0;
  if (!it->is_number() || !(it->get<double>() > 0) || it->get<double>() > 1e9) {
    throw InputError(source_field(source, key), it->dump(), "null or a positive number (the cap of c * tanh(x / c))");
  }
  return it->get<double>();
}

// What Gemma-2 and Gemma-3 share (Gemma2Attention, Gemma3Attention, Gemma2MLP, Gemma3MLP, the
// decoder layers' four norms). head_dim is its own key (gemma-3-1b: 4 heads of 256 on h 1152),
// 256 when absent as in Gemma2Config and Gemma3TextConfig; q, k, v and o carry biases when
// attention_bias. The MLP is gate_proj, up_proj and down_proj whatever hidden_activation is
// (gelu_pytorch_tanh: GeGLU, the tensors of SwiGLU). The word embedding is tied unless
// tie_word_embeddings is false (both configs default it to true). query_pre_attn_scalar (the
// score scale), sliding_window, sliding_window_size, cache_implementation, layer_types,
// sliding_window_pattern and rope_local_base_freq (Gemma-3's local RoPE base) add no tensor.
void parse_gemma_common(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  const bool has_head_dim = j.contains("head_dim") && !j.at("head_dim").is_null();
  parse_gqa_common(j, source, m, used);
  if (!has_head_dim) m.head_dim = 256;
  // No silent default for the key/value heads: parse_core_sizes falls back to the query heads (as
  // Llama does), Gemma2Config and Gemma3TextConfig to 4.
  (void)get_int(j, "num_key_value_heads", source);
  for (const char* k : {"attention_bias", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                        "hidden_activation", "sliding_window_size", "cache_implementation", "rope_local_base_freq",
                        "sliding_window_pattern"}) {
    used.insert(k);
  }
  m.naming = NamingStyle::llama;
  m.qkv_bias = m.o_bias = get_bool(j, "attention_bias", source, false);
  m.sandwich_norms = true;
  m.tie_embeddings = true;  // read again from tie_word_embeddings by parse_config_object
}

}  // namespace

// Gemma-2 (Gemma2Config's defaults: attn_logit_softcapping 50, final_logit_softcapping 30).
void parse_gemma2(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_gemma_common(j, source, m, used);
  m.attn_logit_softcap = get_softcap(j, "attn_logit_softcapping", source, 50.0);
  m.final_logit_softcap = get_softcap(j, "final_logit_softcapping", source, 30.0);
}

// Gemma-3 text-only (Gemma3ForCausalLM): Gemma-2's layer with q_norm and k_norm, Gemma3RMSNorm
// over head_dim (one weight per channel of a head, shared by the heads); soft-capping off unless
// set (Gemma3TextConfig's defaults are None).
void parse_gemma3_text(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_gemma_common(j, source, m, used);
  m.qk_norm = true;
  m.attn_logit_softcap = get_softcap(j, "attn_logit_softcapping", source, 0);
  m.final_logit_softcap = get_softcap(j, "final_logit_softcapping", source, 0);
}

}  // namespace moemem::config_detail
