// Reader for Microsoft's Phi-3.5-MoE (phimoe), following transformers' models/phimoe/
// modeling_phimoe.py (4.46); src/config.cpp dispatches on model_type.
#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

// PhimoeAttention: q, k, v, o with head_dim = hidden_size / num_attention_heads, biases on all
// four when attention_bias. PhimoeSparseMoeBlock in every layer, stored as Mixtral's
// block_sparse_moe: gate (num_local_experts x hidden, no bias) and experts.<e>.w1/w3/w2 of
// intermediate_size. PhimoeDecoderLayer's input_layernorm and post_attention_layernorm and the
// model's final norm are nn.LayerNorm with weight and bias; PhimoeForCausalLM's lm_head has a bias
// when lm_head_bias. input_jitter_noise and router_jitter_noise perturb routing (SparseMixer) and
// add no tensor.
void parse_phimoe(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_gqa_common(j, source, m, used);
  for (const char* k : {"attention_bias", "lm_head_bias", "num_local_experts", "num_experts_per_tok", "input_jitter_noise",
                        "router_jitter_noise", "original_max_position_embeddings"}) {
    used.insert(k);
  }
  require_derived_head_dim(m, source, "PhimoeAttention");
  m.naming = NamingStyle::mixtral;
  m.norm_bias = true;
  m.qkv_bias = m.o_bias = get_bool(j, "attention_bias", source, false);
  m.head_bias = get_bool(j, "lm_head_bias", source, false);
  m.moe.num_routed_experts = get_int(j, "num_local_experts", source, std::nullopt, 1, kMaxCount);
  m.moe.top_k = get_int(j, "num_experts_per_tok", source);
  m.moe.expert_ffn = m.dense_ffn;
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::moe);
}

}  // namespace moemem::config_detail
