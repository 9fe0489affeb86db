// Readers for MoE families added with issue 14 whose expert tensors are stored fused or under
// their own names: IBM Granite MoE (granitemoe, granitemoeshared). Each names the Hugging Face
// modelling file it follows; src/config.cpp dispatches on model_type and src/inventory.cpp
// spells the tensors (NamingStyle::granite).
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
  if (m.head_dim * m.num_heads != m.hidden) {
    throw InputError(source_field(source, "head_dim"), std::to_string(m.head_dim),
                     fmt::format("absent or hidden_size / num_attention_heads ({}): GraniteMoeAttention derives it so",
                                 m.hidden / m.num_heads));
  }
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

}  // namespace moemem::config_detail
