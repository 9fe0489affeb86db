// Gemma-3's vision tower and multimodal projector (model_type gemma3; the text model is
// gemma3_text's, built in src/inventory.cpp). Sources: transformers models/siglip/modeling_siglip.py
// (SiglipVisionEmbeddings, SiglipEncoderLayer, SiglipAttention, SiglipMLP, SiglipVisionTransformer)
// and models/gemma3/modeling_gemma3.py (Gemma3MultiModalProjector).
#include <string>

#include <fmt/format.h>

#include "inventory_internal.hpp"
#include "moemem/units.hpp"

namespace moemem {

// Named as google/gemma-3-{4b,12b,27b}-it's published safetensors index names them (transformers
// 4.50: vision_tower.vision_model.*, multi_modal_projector.*; recent transformers loads them as
// model.vision_tower.* and model.multi_modal_projector.* through _checkpoint_conversion_mapping).
// - embeddings.patch_embedding: a Conv2d [hidden, channels, patch, patch] with a bias;
//   embeddings.position_embedding: an nn.Embedding of (image_size / patch_size)^2 rows (no class
//   token, no interpolation table).
// - per encoder layer: layer_norm1 and layer_norm2 (LayerNorm, weight and bias), self_attn
//   q_proj, k_proj, v_proj, out_proj [hidden, hidden] with biases, mlp.fc1 [intermediate, hidden]
//   and mlp.fc2 [hidden, intermediate] with biases.
// - post_layernorm (weight and bias); no pooling head (vision_use_head false, config_gemma3.cpp).
// - multi_modal_projector: mm_input_projection_weight, a bare [vision hidden, text hidden]
//   parameter, and mm_soft_emb_norm, a Gemma3RMSNorm of vision hidden (weight only); its
//   AvgPool2d holds no parameter.
void gemma3_vision_tower(const ModelSpec& m, const AddBlockTensor& add) {
  const auto& v = m.vision;
  const auto w = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
    add("vision_tower.vision_model." + name, Role::vision_tower, rows, cols, 1);
  };
  const auto with_bias = [&](const std::string& name, std::int64_t out, std::int64_t in) {
    w(name + ".weight", out, in);
    w(name + ".bias", out, 1);
  };
  const std::int64_t side = v.image_size / v.patch_size;
  w("embeddings.patch_embedding.weight", v.hidden,
    dim_mul(v.channels, dim_mul(v.patch_size, v.patch_size, "patch_size^2"), "channels x patch_size^2"));
  w("embeddings.patch_embedding.bias", v.hidden, 1);
  w("embeddings.position_embedding.weight", dim_mul(side, side, "patches per image"), v.hidden);
  for (std::int64_t i = 0; i < v.layers; ++i) {
    const std::string l = fmt::format("encoder.layers.{}.", i);
    with_bias(l + "layer_norm1", v.hidden, 1);
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) with_bias(l + "self_attn." + proj, v.hidden, v.hidden);
    with_bias(l + "layer_norm2", v.hidden, 1);
    with_bias(l + "mlp.fc1", v.intermediate, v.hidden);
    with_bias(l + "mlp.fc2", v.hidden, v.intermediate);
  }
  with_bias("post_layernorm", v.hidden, 1);
  add("multi_modal_projector.mm_input_projection_weight", Role::mm_projector, v.hidden, m.hidden, 1);
  add("multi_modal_projector.mm_soft_emb_norm.weight", Role::mm_projector, v.hidden, 1, 1);
}

}  // namespace moemem
