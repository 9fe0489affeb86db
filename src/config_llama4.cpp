// Reader for Meta's Llama-4 (llama4_text, and the multimodal llama4 config that wraps it with a
// vision tower), following transformers' models/llama4/configuration_llama4.py and
// modeling_llama4.py; src/config.cpp dispatches on model_type and src/inventory.cpp spells the
// tensors (NamingStyle::llama4, Builder::llama4_moe and Builder::vision_tower).
#include <set>
#include <string>

#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

namespace {

// A list of layer indices or flags with its entries checked; null or absent: empty.
const json* list_key(const json& j, std::string_view key, const std::string& source) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  if (!it->is_array()) throw InputError(source_field(source, key), it->dump(), "a list");
  return &*it;
}

// Which layers are MoE (Llama4TextConfig.__post_init__): moe_layers when given, otherwise every
// interleave_moe_layer_step-th layer from index step - 1 (1: every layer; Maverick's 2: the odd ones).
void llama4_layer_kinds(const json& j, const std::string& source, ModelSpec& m) {
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::dense);
  const std::int64_t step = get_int(j, "interleave_moe_layer_step", source, 1, 1, kMaxCount);
  if (const json* list = list_key(j, "moe_layers", source)) {
    for (const auto& v : *list) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= m.num_layers) {
        throw InputError(source_field(source, "moe_layers"), v.dump(), fmt::format("layer indices from 0 to {}", m.num_layers - 1));
      }
      m.layer_kinds[static_cast<std::size_t>(v.get<std::int64_t>())] = LayerKind::moe;
    }
    return;
  }
  for (std::int64_t i = step - 1; i < m.num_layers; i += step) m.layer_kinds[static_cast<std::size_t>(i)] = LayerKind::moe;
}

// The NoPE layers (no_rope_layers: 1 rotates, 0 does not; empty or absent: every
// no_rope_layer_interval-th layer is NoPE, as Llama4TextConfig.__post_init__ builds the list). A
// NoPE layer has no q/k L2 norm and attends to the whole sequence; neither changes a tensor.
std::int64_t llama4_nope_layers(const json& j, const std::string& source, const ModelSpec& m) {
  const std::int64_t interval = get_int(j, "no_rope_layer_interval", source, 4, 1, kMaxCount);
  const json* list = list_key(j, "no_rope_layers", source);
  if (list == nullptr || list->empty()) return m.num_layers / interval;
  if (list->size() < static_cast<std::size_t>(m.num_layers)) {
    throw InputError(source_field(source, "no_rope_layers"), fmt::format("a list of {} entries", list->size()),
                     fmt::format("at least num_hidden_layers ({}) entries of 0 (NoPE) or 1 (RoPE)", m.num_layers));
  }
  std::int64_t nope = 0;
  for (std::int64_t i = 0; i < m.num_layers; ++i) {
    const json& v = (*list)[static_cast<std::size_t>(i)];
    if (v != 0 && v != 1) throw InputError(source_field(source, "no_rope_layers"), v.dump(), "0 (NoPE) or 1 (RoPE)");
    if (v == 0) ++nope;
  }
  return nope;
}

}  // namespace

// Llama-4 text (Llama4TextConfig, Llama4ForCausalLM). Llama4TextAttention: q, k, v, o of head_dim
// (128 when the key is absent, as Llama4TextConfig's default; null: hidden / heads), with biases
// on all four when attention_bias, and on the RoPE layers a weightless Llama4TextL2Norm of q and k
// (use_qk_norm). Each decoder layer has input_layernorm and post_attention_layernorm; an MoE layer
// (moe_layers, interleave_moe_layer_step) holds Llama4TextMoe — router, num_local_experts experts
// of intermediate_size, one shared expert of intermediate_size — and a dense layer a
// Llama4TextMLP of intermediate_size_mlp. The router's sigmoid top-k score multiplies the expert's
// input (routed_in * router_scores). no_rope_layers, attention_chunk_size, attn_temperature_tuning,
// floor_scale and attn_scale change the computation, not the tensors; layer_types may name
// chunked_attention. num_key_value_heads is required: Llama4TextConfig's default (8) is Scout's,
// not a property of the config at hand.
void parse_llama4_text(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  const bool has_head_dim = j.contains("head_dim");
  parse_gqa_common(j, source, m, used);
  if (!has_head_dim) m.head_dim = 128;
  (void)get_int(j, "num_key_value_heads", source);
  for (const char* k : {"attention_bias", "intermediate_size_mlp", "num_local_experts", "num_experts_per_tok", "moe_layers",
                        "interleave_moe_layer_step", "use_qk_norm", "no_rope_layers", "no_rope_layer_interval",
                        "attention_chunk_size", "attn_temperature_tuning", "floor_scale", "attn_scale", "layer_types",
                        "cache_implementation", "rope_parameters", "for_llm_compressor"}) {
    used.insert(k);
  }
  m.naming = NamingStyle::llama4;
  m.qkv_bias = m.o_bias = get_bool(j, "attention_bias", source, false);
  m.qk_l2_norm = get_bool(j, "use_qk_norm", source, true);
  m.attention_chunk_size = get_int(j, "attention_chunk_size", source, 8192, 0);
  if (j.contains("attention_chunk_size") && j.at("attention_chunk_size").is_null()) m.attention_chunk_size = 0;
  m.nope_layers = llama4_nope_layers(j, source, m);
  if (const json* types = list_key(j, "layer_types", source)) {
    for (const auto& kind : *types) {
      if (kind != "full_attention" && kind != "chunked_attention") {
        throw InputError(source_field(source, "layer_types"), kind.dump(), "full_attention or chunked_attention (Llama-4's layer kinds)");
      }
    }
  }
  llama4_layer_kinds(j, source, m);
  const std::int64_t moe_layers = m.num_moe_layers();
  if (moe_layers < m.num_layers) m.dense_ffn = get_int(j, "intermediate_size_mlp", source);
  if (moe_layers > 0) {
    m.moe.num_routed_experts = get_int(j, "num_local_experts", source, std::nullopt, 1, kMaxCount);
    m.moe.top_k = get_int(j, "num_experts_per_tok", source, 1);
    m.moe.expert_ffn = m.moe.shared_ffn = get_int(j, "intermediate_size", source);
    m.moe.num_shared_experts = 1;
    m.moe_probs_on_input = true;
  }
}

namespace {

// vision_config keys that change no tensor: activations, norms' epsilon, the feature selection,
// dropout, the 2D RoPE's base (Llama4VisionRotaryEmbedding holds no parameter), the pixel-shuffle
// ratio (a reshape), and multi_modal_projector_bias, which Llama4MultiModalProjector ignores.
const std::set<std::string, std::less<>> kVisionNoTensor = {
    "hidden_act", "norm_eps", "vision_feature_select_strategy", "vision_feature_layer", "initializer_range",
    "pixel_shuffle_ratio", "multi_modal_projector_bias", "projector_dropout", "attention_dropout", "rope_theta",
    "rope_parameters", "model_type", "_attn_implementation_autoset", "torch_dtype", "dtype"};

}  // namespace

// The multimodal wrapper's keys beside text_config: the vision tower's config and the image
// tokens' ids (boi_token_index, eoi_token_index; image_token_index is every wrapper's).
bool is_llama4_wrapper_key(std::string_view key) {
  return key == "vision_config" || key == "boi_token_index" || key == "eoi_token_index";
}

// Llama4VisionConfig's sizes, each required: Llama4Config would build its default tower (or a
// default size) where one is missing, which would be a silent default that changes the count.
void parse_llama4_vision(const json& wrapper, const std::string& source, ModelSpec& m) {
  const std::string src = source + ": vision_config";
  const auto it = wrapper.find("vision_config");
  if (it == wrapper.end() || !it->is_object()) {
    throw InputError(src, it == wrapper.end() ? "missing" : it->dump(),
                     "a JSON object (Llama4VisionConfig) for model_type llama4: its vision tower is counted");
  }
  const json& vc = *it;
  auto& v = m.vision;
  v.present = true;
  v.hidden = get_int(vc, "hidden_size", src);
  v.intermediate = get_int(vc, "intermediate_size", src);
  v.layers = get_int(vc, "num_hidden_layers", src, std::nullopt, 0, kMaxCount);
  v.heads = get_int(vc, "num_attention_heads", src);
  v.channels = get_int(vc, "num_channels", src, std::nullopt, 1, 1024);
  v.image_size = get_int(vc, "image_size", src, std::nullopt, 1, 1 << 20);
  v.patch_size = get_int(vc, "patch_size", src, std::nullopt, 1, v.image_size);
  v.projector_input = get_int(vc, "projector_input_dim", src);
  v.projector_output = get_int(vc, "projector_output_dim", src);
  v.output_dim = get_int(vc, "vision_output_dim", src);
  if (v.hidden % v.heads != 0) {
    throw InputError(source_field(src, "num_attention_heads"), std::to_string(v.heads),
                     fmt::format("a divisor of hidden_size ({}): Llama4VisionAttention's head_dim is hidden_size / heads", v.hidden));
  }
  const std::set<std::string, std::less<>> read = {
      "hidden_size",         "intermediate_size",    "num_hidden_layers", "num_attention_heads", "num_channels",
      "image_size",          "patch_size",           "projector_input_dim", "projector_output_dim", "vision_output_dim"};
  for (const auto& [key, value] : vc.items()) {
    if (read.contains(key) || kVisionNoTensor.contains(key)) continue;
    if (m.unrecognised_keys.size() < 100) m.unrecognised_keys.push_back("vision_config." + key);
  }
}

}  // namespace moemem::config_detail
