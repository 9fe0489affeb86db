// The reader for DeepSeek sparse attention (DSA) models: DeepSeek-V3.2-Exp and DeepSeek-V3.2
// (model_type deepseek_v32), DeepSeek-V3 with a lightning indexer in every MLA layer. Sources:
// DeepSeek-V3.2-Exp inference/model.py (Indexer, MLA), transformers
// models/deepseek_v32/modular_deepseek_v32.py (DeepseekV32Indexer), Megatron-Core
// transformer/experimental_attention_variant/dsa.py (DSAIndexer). src/config.cpp dispatches.
#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

// DeepSeek-V3's keys (MLA, MoE with noaux_tc routing, num_nextn_predict_layers MTP layers, each
// a full decoder layer with its own indexer) and the indexer's: index_n_heads query heads of
// index_head_dim (wq_b from the compressed query, so q_lora_rank is required), one key of
// index_head_dim (wk, then a LayerNorm k_norm with weight and bias), weights_proj (one weight per
// index head). index_topk sets how many keys each query attends to and adds no tensor. The
// indexer's RoPE covers the first qk_rope_head_dim channels of its heads, so index_head_dim must
// hold them (Indexer.forward splits [rope_head_dim, head_dim - rope_head_dim]).
void parse_deepseek_v32(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_deepseek(j, source, m, used);
  for (const char* k : {"index_n_heads", "index_head_dim", "index_topk"}) used.insert(k);
  if (m.mla.q_lora_rank <= 0) {
    throw InputError(source_field(source, "q_lora_rank"), "null or 0",
                     "a positive rank for deepseek_v32 (the indexer's wq_b reads the compressed query)");
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

}  // namespace moemem::config_detail
