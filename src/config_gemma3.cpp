// Reader for Gemma-3's multimodal config (model_type gemma3, Gemma3ForConditionalGeneration),
// following transformers' models/gemma3/configuration_gemma3.py (Gemma3Config, Gemma3TextConfig),
// models/gemma3/modeling_gemma3.py (Gemma3Model: vision_tower, multi_modal_projector,
// language_model) and models/siglip/configuration_siglip.py, modeling_siglip.py (the tower).
// src/config.cpp unwraps text_config and reads it as gemma3_text (config_gemma.cpp); this file
// fills Gemma3TextConfig's defaults into it and reads vision_config; src/inventory_gemma3.cpp
// spells the tower's and the projector's tensors.
#include <cmath>
#include <iterator>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

namespace {

// vision_config keys that change no tensor: the activation, LayerNorm's epsilon, attention
// dropout, the config's own type and dtype, and PaliGemma-era keys SiglipVisionConfig keeps as
// plain attributes (projection_dim, projector_hidden_act, num_image_tokens: Gemma3's projector
// reads none of them).
const std::set<std::string, std::less<>> kSiglipNoTensor = {
    "hidden_act", "layer_norm_eps", "attention_dropout", "model_type", "torch_dtype", "dtype", "initializer_range",
    "projection_dim", "projector_hidden_act", "num_image_tokens", "_attn_implementation_autoset"};

// What SiglipVisionConfig.__init__ reads, with its defaults (used where the key is absent).
struct SiglipKey {
  const char* key;
  std::int64_t fallback;
};
constexpr SiglipKey kSiglipSizes[] = {{"hidden_size", 768},       {"intermediate_size", 3072}, {"num_hidden_layers", 12},
                                      {"num_attention_heads", 12}, {"num_channels", 3},         {"image_size", 224},
                                      {"patch_size", 16}};

}  // namespace

// The wrapper's keys beside text_config: the tower's config, the image tokens' ids and the soft
// tokens per image (Gemma3Config; image_token_index is every wrapper's, config.cpp).
bool is_gemma3_wrapper_key(std::string_view key) {
  return key == "vision_config" || key == "boi_token_index" || key == "eoi_token_index" || key == "mm_tokens_per_image" ||
         key == "boi_token_id" || key == "eoi_token_id";
}

// Gemma3Config builds Gemma3TextConfig(**text_config) whatever model_type text_config names, and
// Gemma3TextConfig() when there is none: the sizes a published config leaves out take
// Gemma3TextConfig.__init__'s defaults (google/gemma-3-27b-it's text_config has no vocab_size,
// gemma-3-4b-it's no head counts either). head_dim's 256 is applied by the gemma3_text reader.
void fill_gemma3_text_defaults(json& text) {
  text["model_type"] = "gemma3_text";
  const std::pair<const char*, std::int64_t> defaults[] = {
      {"vocab_size", 262208},      {"hidden_size", 2304},        {"intermediate_size", 9216}, {"num_hidden_layers", 26},
      {"num_attention_heads", 8}, {"num_key_value_heads", 4}};
  for (const auto& [key, value] : defaults) {
    if (!text.contains(key) || text.at(key).is_null()) text[key] = value;
  }
}

// SiglipVisionConfig's sizes (its defaults where a key is absent, as Gemma3Config builds it from
// the dict; no vision_config at all is SiglipVisionConfig()). SiglipVisionTransformer adds a
// pooling head (SiglipMultiheadAttentionPoolingHead) unless vision_use_head is false; Gemma-3's
// checkpoints have none and moemem does not model it, so a head is refused by name, as is a
// config that leaves vision_use_head out (the attribute is absent, so the head is built).
void parse_gemma3_vision(const json& wrapper, const std::string& source, ModelSpec& m) {
  const std::string src = source + ": vision_config";
  const auto it = wrapper.find("vision_config");
  if (it != wrapper.end() && !it->is_object()) {
    throw InputError(src, it->dump().substr(0, 80), "a JSON object (SiglipVisionConfig) for model_type gemma3");
  }
  const json vc = it == wrapper.end() ? json::object() : *it;
  const auto head = vc.find("vision_use_head");
  if (head == vc.end() || *head != false) {
    throw InputError(source_field(src, "vision_use_head"), head == vc.end() ? "absent (true)" : head->dump(),
                     "false: SiglipVisionTransformer's pooling head (vision_use_head true, the default) is not "
                     "modelled, and Gemma-3's checkpoints have none");
  }
  auto& v = m.vision;
  v.present = true;  // a SigLIP tower: inventory.cpp tells it by the text's model_type, gemma3_text
  std::int64_t sizes[std::size(kSiglipSizes)] = {};
  for (std::size_t i = 0; i < std::size(kSiglipSizes); ++i) {
    const bool count = i == 2;
    sizes[i] = get_int(vc, kSiglipSizes[i].key, src, kSiglipSizes[i].fallback, count ? 0 : 1, count ? kMaxCount : kMaxDim);
  }
  v.hidden = sizes[0];
  v.intermediate = sizes[1];
  v.layers = sizes[2];
  v.heads = sizes[3];
  v.channels = sizes[4];
  v.image_size = sizes[5];
  v.patch_size = sizes[6];
  if (v.channels > 1024) throw InputError(source_field(src, "num_channels"), std::to_string(v.channels), "at most 1024");
  if (v.patch_size > v.image_size) {
    throw InputError(source_field(src, "patch_size"), std::to_string(v.patch_size),
                     fmt::format("at most image_size ({}): the tower's patch grid is image_size / patch_size", v.image_size));
  }
  if (v.hidden % v.heads != 0) {
    throw InputError(source_field(src, "num_attention_heads"), std::to_string(v.heads),
                     fmt::format("a divisor of hidden_size ({}): SiglipAttention's head_dim is hidden_size / heads", v.hidden));
  }
  // Gemma3MultiModalProjector pools the patch grid to sqrt(mm_tokens_per_image) tokens a side
  // (an AvgPool2d, no parameter): a side longer than the grid leaves a kernel of 0.
  const std::int64_t tokens = get_int(wrapper, "mm_tokens_per_image", source, 256, 1, kMaxDim);
  const auto side = static_cast<std::int64_t>(std::sqrt(static_cast<double>(tokens)));
  if (side > v.image_size / v.patch_size) {
    throw InputError(source_field(source, "mm_tokens_per_image"), std::to_string(tokens),
                     fmt::format("at most ({} / {})^2: the projector pools the patch grid to sqrt(mm_tokens_per_image) a side",
                                 v.image_size, v.patch_size));
  }
  const std::set<std::string, std::less<>> read = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                                   "num_channels", "image_size",      "patch_size",        "vision_use_head"};
  finish_vision_config(wrapper, vc, read, kSiglipNoTensor, source, m);
}

}  // namespace moemem::config_detail
