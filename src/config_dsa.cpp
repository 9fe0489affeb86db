// The reader for DeepSeek sparse attention (DSA) models: DeepSeek-V3.2-Exp and DeepSeek-V3.2
// (model_type deepseek_v32), DeepSeek-V3 with a lightning indexer in every MLA layer. Sources:
// DeepSeek-V3.2-Exp inference/model.py (Indexer, MLA), transformers
// models/deepseek_v32/modular_deepseek_v32.py (DeepseekV32Indexer), Megatron-Core
// transformer/experimental_attention_variant/dsa.py (DSAIndexer). Also GLM-5 (model_type
// glm_moe_dsa, transformers models/glm_moe_dsa): the same indexer on GLM's MLA MoE.
// src/config.cpp dispatches.
#include <algorithm>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

// The indexer's keys, in every MLA layer and MTP decoder: index_n_heads query heads of
// index_head_dim (wq_b from the compressed query, so q_lora_rank is required), one key of
// index_head_dim (wk, then a LayerNorm k_norm with weight and bias), weights_proj (one weight per
// index head). index_topk sets how many keys each query attends to and adds no tensor. The
// indexer's RoPE covers the first qk_rope_head_dim channels of its heads, so index_head_dim must
// hold them (Indexer.forward splits [rope_head_dim, head_dim - rope_head_dim]).
void read_dsa_indexer(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  for (const char* k : {"index_n_heads", "index_head_dim", "index_topk"}) used.insert(k);
  if (m.mla.q_lora_rank <= 0) {
    throw InputError(source_field(source, "q_lora_rank"), "null or 0",
                     fmt::format("a positive rank for {} (the indexer's wq_b reads the compressed query)", m.model_type));
  }
  m.dsa.index_n_heads = get_int(j, "index_n_heads", source);
  m.dsa.index_head_dim = get_int(j, "index_head_dim", source);
  m.dsa.index_topk = get_int(j, "index_topk", source);
  if (m.dsa.index_head_dim < m.mla.qk_rope_head_dim) {
    throw InputError(source_field(source, "index_head_dim"), std::to_string(m.dsa.index_head_dim),
                     fmt::format("at least qk_rope_head_dim ({}): the indexer rotates that many channels of each head",
                                 m.mla.qk_rope_head_dim));
  }
}

// DeepSeek-V3's keys (MLA, MoE with noaux_tc routing, num_nextn_predict_layers MTP layers, each
// a full decoder layer with its own indexer) and the indexer's (read_dsa_indexer).
void parse_deepseek_v32(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_deepseek(j, source, m, used);
  read_dsa_indexer(j, source, m, used);
}

namespace {

// transformers' GlmMoeDsaConfig.__post_init__: a layer whose indexer_types entry is "shared"
// builds no indexer (GlmMoeDsaAttention: indexer None) and reuses the top-k of the last "full"
// layer (IndexCache). The list comes from indexer_types, else index_topk_pattern ("F"/"S" per
// layer), else index_topk_freq (default 1) and index_skip_topk_offset (default 2): layer i is full
// when max(i - offset + 1, 0) % freq == 0. moemem builds an indexer in every layer, so any shared
// layer is refused by the key that makes it; with no key, or freq 1, every layer is full.
void require_every_indexer_full(const json& j, const std::string& source, const ModelSpec& m, Keys& used) {
  for (const char* k : {"indexer_types", "index_topk_pattern", "index_topk_freq", "index_skip_topk_offset",
                        "index_share_for_mtp_iteration"}) {
    used.insert(k);
  }
  const std::string why = "a layer without its own indexer (IndexCache's shared top-k) is not modelled";
  const auto n = static_cast<std::size_t>(m.num_layers);
  // Every entry of `list` (size entries) the string `word`.
  const auto all_are = [](const json& list, std::size_t size, std::string_view word) {
    if (!list.is_array() || list.size() != size) return false;
    return std::all_of(list.begin(), list.end(),
                       [&](const json& v) { return v.is_string() && v.get_ref<const std::string&>() == word; });
  };
  if (const auto it = j.find("indexer_types"); it != j.end() && !it->is_null()) {
    if (!all_are(*it, n, "full")) {
      throw InputError(source_field(source, "indexer_types"), it->dump().substr(0, 80),
                       fmt::format("{} entries, every one \"full\": {}", n, why));
    }
  } else if (const auto p = j.find("index_topk_pattern"); p != j.end() && !p->is_null()) {
    const bool full = p->is_string() ? p->get<std::string>() == std::string(n, 'F')
                                     : all_are(*p, n, "full");
    if (!full) {
      throw InputError(source_field(source, "index_topk_pattern"), p->dump().substr(0, 80),
                       fmt::format("{} layers, every one \"F\" (full): {}", n, why));
    }
  } else {
    const std::int64_t freq = std::max<std::int64_t>(get_int(j, "index_topk_freq", source, 1, 0, kMaxCount), 1);
    const std::int64_t offset = get_int(j, "index_skip_topk_offset", source, 2, 0, kMaxCount);
    for (std::int64_t i = 0; i < m.num_layers; ++i) {
      if (std::max<std::int64_t>(i - offset + 1, 0) % freq == 0) continue;
      throw InputError(source_field(source, "index_topk_freq"), std::to_string(freq),
                       fmt::format("1 (with index_skip_topk_offset {}, layer {} would be shared): {}", offset, i, why));
    }
  }
  if (get_bool(j, "index_share_for_mtp_iteration", source, false)) {
    throw InputError(source_field(source, "index_share_for_mtp_iteration"), "true",
                     "false or absent: an MTP layer reusing the main model's top-k is not modelled");
  }
}

}  // namespace

// GLM-5 (transformers models/glm_moe_dsa/modular_glm_moe_dsa.py): GlmMoeDsaConfig extends
// DeepseekV32Config and GlmMoeDsaAttention is DeepseekV3Attention (MLA) with DeepseekV32Indexer's
// tensors (wq_b, wk, k_norm LayerNorm with bias, weights_proj: read_dsa_indexer); its RoPE is
// interleaved, which adds no tensor. The MLP and MoE are DeepSeek-V3's with GLM's router
// (read_glm_moe_keys: e_score_correction_bias always, mlp_layer_types). num_nextn_predict_layers
// MTP layers (model.layers.<L>, in the checkpoint beside the main layers; the modeling file
// ignores them on load). head_dim is pointed at qk_rope_head_dim for the rotary embedding;
// layer_types must say deepseek_sparse_attention for every layer (the only kind it defines).
void parse_glm_moe_dsa(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_deepseek(j, source, m, used);
  read_glm_moe_keys(j, source, m, used);
  read_dsa_indexer(j, source, m, used);
  require_every_indexer_full(j, source, m, used);
  // GLM-5's model.layers.78 has no embed_tokens or shared_head.head (SOURCES.md).
  m.mtp_stores_embedding_and_head = false;
  for (const char* k : {"head_dim", "rope_parameters", "rope_interleave", "indexer_rope_interleave", "layer_types"}) {
    used.insert(k);
  }
  if (const auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    const bool dsa = it->is_array() && it->size() == static_cast<std::size_t>(m.num_layers) &&
                     std::all_of(it->begin(), it->end(), [](const json& v) {
                       return v.is_string() && v.get_ref<const std::string&>() == "deepseek_sparse_attention";
                     });
    if (!dsa) {
      throw InputError(source_field(source, "layer_types"), it->dump().substr(0, 80),
                       fmt::format("{} entries of \"deepseek_sparse_attention\" (other layer kinds are not modelled)",
                                   m.num_layers));
    }
  }
}

}  // namespace moemem::config_detail
