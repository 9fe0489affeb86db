// The reader for Xiaomi MiMo-V2-Flash (model_type mimo_v2_flash): grouped-query attention in two
// sizes, full attention and sliding-window attention with a learned sink logit per head,
// interleaved by hybrid_layer_pattern; value heads narrower than query/key heads; DeepSeek-style
// MoE layers (256 routed experts, a sigmoid router with a score-correction bias, no shared
// expert) after a dense first layer, chosen per layer by moe_layer_freq; and MTP layers with a
// sliding-window attention and a dense MLP. Sources: the checkpoint's remote code as ported in
// vLLM (model_executor/models/mimo_v2_flash.py MiMoV2Attention, MiMoV2FlashDecoderLayer,
// MiMoV2MoE; mimo_v2_mtp.py MiMoV2MTPLayer) and Megatron-Bridge's MiMoV2FlashBridge
// (models/mimo_v2_flash). src/config.cpp dispatches; src/inventory.cpp spells the tensors.
#include <vector>

#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

namespace {

// A per-layer list of 0/1 flags (hybrid_layer_pattern: 1 sliding-window attention;
// moe_layer_freq: 1 MoE), one entry per decoder layer, as the modelling code indexes them.
std::vector<bool> layer_flags(const json& j, std::string_view key, const std::string& source, std::int64_t layers,
                              std::string_view meaning) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array() || static_cast<std::int64_t>(it->size()) != layers) {
    throw InputError(source_field(source, key), it == j.end() ? "missing" : it->dump().substr(0, 80),
                     fmt::format("a list of {} flags, one per layer (num_hidden_layers), 1 for {}", layers, meaning));
  }
  std::vector<bool> flags;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const auto& v = (*it)[i];
    if (!v.is_number_integer() || (v.get<std::int64_t>() != 0 && v.get<std::int64_t>() != 1)) {
      throw InputError(source_field(source, fmt::format("{}[{}]", key, i)), v.dump(), fmt::format("0 or 1 (1: {})", meaning));
    }
    flags.push_back(v.get<std::int64_t>() == 1);
  }
  return flags;
}

// The sliding-window layers' attention (MiMoV2FlashDecoderLayer's compressed-softmax branch):
// swa_num_attention_heads, swa_num_key_value_heads and swa_head_dim are read without defaults
// there; swa_v_head_dim falls back to swa_head_dim (MiMoV2Attention: v_head_dim None).
void read_swa(const json& j, const std::string& source, ModelSpec& m) {
  m.swa.heads = get_int(j, "swa_num_attention_heads", source);
  m.swa.kv_heads = get_int(j, "swa_num_key_value_heads", source);
  m.swa.head_dim = get_int(j, "swa_head_dim", source);
  m.swa.v_head_dim = get_int(j, "swa_v_head_dim", source, m.swa.head_dim);
  m.swa.sinks = get_bool(j, "add_swa_attention_sink_bias", source, false);
  if (m.swa.heads % m.swa.kv_heads != 0) {
    throw InputError(source_field(source, "swa_num_key_value_heads"), std::to_string(m.swa.kv_heads),
                     fmt::format("a divisor of swa_num_attention_heads ({})", m.swa.heads));
  }
}

}  // namespace

// Tensors per decoder layer i: input_layernorm; self_attn.{q,k,v,o}_proj with q/k heads of
// head_dim and v heads of v_head_dim (q, k, v biased when attention_bias, o_proj never), sized by
// the swa_* keys where hybrid_layer_pattern[i] is 1 and by the main keys where it is 0;
// self_attn.attention_sink_bias [heads] where the layer's add_*_attention_sink_bias is true;
// post_attention_layernorm; and where moe_layer_freq[i] is 1, mlp.gate [experts, h] with
// mlp.gate.e_score_correction_bias [experts] (MiMoV2MoE builds it whatever topk_method says) and
// experts.<e>.{gate,up,down}_proj of moe_intermediate_size, otherwise a dense SwiGLU MLP of
// intermediate_size. num_nextn_predict_layers MTP layers (model.mtp.layers.<k>), each with a
// sliding-window attention and a dense MLP; the embedding and head are the main model's.
// Not read: n_shared_experts (MiMoV2MoE has no shared expert: a set value is refused by
// config_keys.cpp), and hybrid_block_size (an alternative spelling of the pattern: refused).
// rope_theta, swa_rope_theta, partial_rotary_factor, sliding_window(_size),
// attention_chunk_size, attention_value_scale, layernorm_epsilon and the router's scoring keys
// change no tensor.
void parse_mimo_v2_flash(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_gqa_common(j, source, m, used);
  for (const char* k : {"v_head_dim", "swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim",
                        "swa_v_head_dim", "add_swa_attention_sink_bias", "add_full_attention_sink_bias",
                        "hybrid_layer_pattern", "hybrid_block_size", "moe_layer_freq", "n_routed_experts",
                        "num_experts_per_tok", "moe_intermediate_size", "topk_method", "attention_bias",
                        "num_nextn_predict_layers", "n_shared_experts", "swa_rope_theta", "sliding_window_size", "attention_chunk_size",
                        "attention_value_scale", "layernorm_epsilon", "hidden_dropout"}) {
    used.insert(k);
  }
  m.naming = NamingStyle::mimo_v2;
  m.v_head_dim = get_int(j, "v_head_dim", source);  // MiMoV2FlashConfig documents it; required
  m.qkv_bias = get_bool(j, "attention_bias", source, false);
  m.attention_sinks = get_bool(j, "add_full_attention_sink_bias", source, false);
  if (const auto it = j.find("n_shared_experts"); it != j.end() && !it->is_null() && *it != 0) {
    throw InputError(source_field(source, "n_shared_experts"), it->dump(), "null or 0: MiMoV2MoE has no shared expert");
  }
  if (const auto it = j.find("hybrid_block_size"); it != j.end() && !it->is_null()) {
    throw InputError(source_field(source, "hybrid_block_size"), it->dump(),
                     "null: moemem reads the layer pattern from hybrid_layer_pattern only");
  }
  m.swa_layers = layer_flags(j, "hybrid_layer_pattern", source, m.num_layers, "sliding-window attention");
  read_swa(j, source, m);
  if (const auto it = j.find("moe_layer_freq"); it != j.end() && it->is_number_integer()) {
    // vLLM reads an integer moe_layer_freq as "no MoE layer", Megatron as a period: ambiguous.
    throw InputError(source_field(source, "moe_layer_freq"), it->dump(), "a list of 0/1 flags, one per layer");
  }
  const std::vector<bool> moe = layer_flags(j, "moe_layer_freq", source, m.num_layers, "an MoE layer");
  for (std::size_t i = 0; i < moe.size(); ++i) {
    if (moe[i]) m.layer_kinds[i] = LayerKind::moe;
  }
  if (m.num_moe_layers() > 0) {
    m.moe.num_routed_experts = get_int(j, "n_routed_experts", source, std::nullopt, 1, kMaxCount);
    m.moe.top_k = get_int(j, "num_experts_per_tok", source);
    m.moe.expert_ffn = get_int(j, "moe_intermediate_size", source);
    m.moe.router_bias = true;
  }
  m.mtp_layers = get_int(j, "num_nextn_predict_layers", source, 0, 0, 16);
  m.mtp_dense = true;  // MiMoV2MTPLayer: a dense MLP of intermediate_size
}

}  // namespace moemem::config_detail
