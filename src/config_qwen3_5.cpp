// The readers for Qwen3.5 (model_type qwen3_5: Qwen3.5-0.8B, -2B, -4B, -9B, -27B, Qwen3.6-27B;
// its text model alone is qwen3_5_text) and Qwen3.5-MoE (model_type qwen3_5_moe: Qwen3.5-397B-A17B,
// Qwen3.5-122B-A10B, Qwen3.5/3.6-35B-A3B; its text model alone is qwen3_5_moe_text). The text model
// is Qwen3-Next's hybrid of Gated DeltaNet and gated softmax-attention layers; Qwen3.5's layers
// each have a dense SwiGLU MLP, Qwen3.5-MoE's are all sparse; the multimodal wrappers add Qwen3-VL's
// vision tower. Sources: transformers models/qwen3_5 (configuration_qwen3_5.py Qwen3_5TextConfig,
// Qwen3_5VisionConfig, Qwen3_5Config; modular_qwen3_5.py Qwen3_5GatedDeltaNet, Qwen3_5MLP,
// Qwen3_5DecoderLayer, Qwen3_5VisionModel) and models/qwen3_5_moe (configuration_qwen3_5_moe.py,
// modular_qwen3_5_moe.py Qwen3_5MoeDecoderLayer). src/config.cpp dispatches; src/inventory.cpp
// and src/inventory_qwen3_5.cpp spell the tensors.
#include <set>
#include <string>

#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

namespace {

// Keys Qwen3_5MoeTextConfig removes from Qwen3NextConfig (decoder_sparse_step, mlp_only_layers:
// Qwen3_5MoeDecoderLayer builds the sparse block on every layer). A value that would make a layer
// dense is refused by name; the neutral values (step 1, an empty list) are accepted.
void refuse_dense_layers(const json& j, const std::string& source) {
  if (get_int(j, "decoder_sparse_step", source, 1) != 1) {
    throw InputError(source_field(source, "decoder_sparse_step"), j.at("decoder_sparse_step").dump(),
                     "1 or absent: every Qwen3.5-MoE layer is sparse (Qwen3_5MoeDecoderLayer has no dense MLP)");
  }
  if (const auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null() && !(it->is_array() && it->empty())) {
    throw InputError(source_field(source, "mlp_only_layers"), it->dump().substr(0, 80),
                     "an empty list or absent: every Qwen3.5-MoE layer is sparse (Qwen3_5MoeDecoderLayer has no dense MLP)");
  }
}

// Both text configs' attention and linear-attention layers (Qwen3_5Attention is
// Qwen3NextAttention, Qwen3_5MoeAttention the same): q_proj of 2 x heads x head_dim (each head's
// query, then its output gate), k/v/o, per-head q/k RMSNorm; head_dim 256 when absent (the
// classes' default, not hidden / heads). Linear layers: Qwen3_5GatedDeltaNet, Qwen3-Next's with
// its inputs split (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a; the same sizes).
// mamba_ssm_dtype and rope_parameters change no tensor. `attention` names the class in errors.
void parse_hybrid_layers(const json& j, const std::string& source, ModelSpec& m, Keys& used, const char* attention) {
  for (const char* k : {"hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                        "head_dim", "attention_bias", "attn_output_gate", "layer_types", "full_attention_interval",
                        "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                        "linear_conv_kernel_dim", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings",
                        "mamba_ssm_dtype", "rope_parameters"}) {
    used.insert(k);
  }
  parse_core_sizes(j, source, m);
  m.attention = AttentionKind::gqa;
  m.head_dim = get_int(j, "head_dim", source, 256);
  if (m.num_heads % m.num_kv_heads != 0) {
    throw InputError(source_field(source, "num_key_value_heads"), std::to_string(m.num_kv_heads),
                     fmt::format("a divisor of num_attention_heads ({})", m.num_heads));
  }
  if (get_bool(j, "attention_bias", source, false)) {
    throw InputError(source_field(source, "attention_bias"), "true",
                     "false (biases on Qwen3.5's gated q_proj and the other projections are not modelled)");
  }
  if (!get_bool(j, "attn_output_gate", source, true)) {
    throw InputError(source_field(source, "attn_output_gate"), "false",
                     fmt::format("true or absent: {} always builds the gated q_proj (2 x heads x head_dim rows)", attention));
  }
  m.naming = NamingStyle::qwen3_5;
  m.qk_norm = true;
  m.attn_output_gate = true;
  parse_linear_mixers(j, source, m);
}

// mtp_num_hidden_layers: the checkpoint's mtp.* block (mtp.fc, two pre-fc norms, one
// full-attention decoder layer with the family's MLP, mtp.norm; vLLM qwen3_next_mtp.py
// Qwen3NextMultiTokenPredictor), which shares the main embedding and head unless
// mtp_use_dedicated_embeddings. transformers' Qwen3_5ForCausalLM and Qwen3_5MoeForCausalLM drop
// it on load (_keys_to_ignore_on_load_unexpected), but the checkpoint holds it and
// Megatron-Bridge trains it; `count` reports it, as the published safetensors totals do.
void parse_mtp_block(const json& j, const std::string& source, ModelSpec& m) {
  // One MTP layer in every published checkpoint; more would share mtp.fc and the norms
  // (Qwen3NextMultiTokenPredictor), which the MTP depths moemem builds elsewhere do not.
  m.mtp_layers = get_int(j, "mtp_num_hidden_layers", source, 0, 0, 1);
  m.mtp_stores_embedding_and_head = false;
  if (get_bool(j, "mtp_use_dedicated_embeddings", source, false)) {
    throw InputError(source_field(source, "mtp_use_dedicated_embeddings"), "true",
                     "false or absent (an MTP embedding of its own is not modelled; the published MTP shares the main one)");
  }
}

}  // namespace

// Qwen3_5MoeTextConfig (defaults: Qwen3.5-35B-A3B's sizes, as transformers fills them): the hybrid
// layers above, and on every layer Qwen3NextSparseMoeBlock (router, fused experts of
// moe_intermediate_size, a shared expert of shared_expert_intermediate_size and its 1 x h sigmoid
// gate); the MTP layer's MLP is sparse too.
void parse_qwen3_5_moe_text(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  for (const char* k : {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
                        "decoder_sparse_step", "mlp_only_layers"}) {
    used.insert(k);
  }
  parse_hybrid_layers(j, source, m, used, "Qwen3_5MoeAttention");
  // Qwen3_5MoeTextConfig's default is 2 key/value heads, not one per query head.
  m.num_kv_heads = get_int(j, "num_key_value_heads", source, 2);
  if (m.num_heads % m.num_kv_heads != 0) {
    throw InputError(source_field(source, "num_key_value_heads"), std::to_string(m.num_kv_heads),
                     fmt::format("a divisor of num_attention_heads ({})", m.num_heads));
  }
  refuse_dense_layers(j, source);
  m.moe.num_routed_experts = get_int(j, "num_experts", source, 256, 1, kMaxCount);
  m.moe.top_k = get_int(j, "num_experts_per_tok", source, 8);
  m.moe.expert_ffn = get_int(j, "moe_intermediate_size", source, 512);
  m.moe.shared_ffn = get_int(j, "shared_expert_intermediate_size", source, 512);
  m.moe.num_shared_experts = 1;
  m.moe.shared_expert_gate = true;
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::moe);
  parse_mtp_block(j, source, m);
}

// Qwen3_5TextConfig (defaults: Qwen3.5-9B's text sizes, as transformers fills them): the hybrid
// layers above, and on every layer Qwen3_5MLP (Qwen3NextMLP: gate_proj and up_proj
// [intermediate_size, h], down_proj [h, intermediate_size], no biases); the MTP layer
// (Qwen3_5DecoderLayer as full attention) has the same dense MLP, as the published safetensors
// totals show (tests/unit/test_model_types_qwen3_5_dense.cpp). num_key_value_heads defaults to 4,
// intermediate_size to 12288 (the class's defaults). Qwen3_5TextConfig removes Qwen3-Next's MoE
// keys; a config that still sets num_experts, moe_intermediate_size, decoder_sparse_step and the
// like describes experts this dense reader does not build, and is refused by name
// (config_keys.cpp), as is a non-empty mlp_only_layers (the published configs carry []).
void parse_qwen3_5_text(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  used.insert("intermediate_size");
  used.insert("mlp_only_layers");
  parse_hybrid_layers(j, source, m, used, "Qwen3_5Attention");
  m.num_kv_heads = get_int(j, "num_key_value_heads", source, 4);
  if (m.num_heads % m.num_kv_heads != 0) {
    throw InputError(source_field(source, "num_key_value_heads"), std::to_string(m.num_kv_heads),
                     fmt::format("a divisor of num_attention_heads ({})", m.num_heads));
  }
  if (const auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null() && !(it->is_array() && it->empty())) {
    throw InputError(source_field(source, "mlp_only_layers"), it->dump().substr(0, 80),
                     "an empty list or absent: Qwen3_5TextConfig removes it (every Qwen3.5 layer is dense); a list names "
                     "the dense layers of a sparse model, which model_type qwen3_5_text is not");
  }
  m.dense_ffn = get_int(j, "intermediate_size", source, 12288);
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::dense);
  parse_mtp_block(j, source, m);
}

namespace {

// vision_config keys that change no tensor (activation, initialisation, the config class name),
// and deepstack_visual_indexes, which must be empty (checked below).
const std::set<std::string, std::less<>> kQwenVisionNoTensor = {
    "hidden_act", "initializer_range", "model_type", "torch_dtype", "dtype", "deepstack_visual_indexes"};

}  // namespace

// Qwen3_5VisionConfig's (Qwen3_5MoeVisionConfig's) sizes, each required: Qwen3_5Config would build a default tower (or
// a default size) where one is missing, a silent default that changes the count. The tower is
// Qwen3-VL's without the deepstack mergers (Qwen3_5VisionModel deletes deepstack_merger_list), so
// a non-empty deepstack_visual_indexes describes tensors it does not build: refused by name.
void parse_qwen3_5_vision(const json& wrapper, const std::string& source, ModelSpec& m) {
  const std::string src = source + ": vision_config";
  const auto it = wrapper.find("vision_config");
  if (it == wrapper.end() || !it->is_object()) {
    throw InputError(src, it == wrapper.end() ? "missing" : it->dump().substr(0, 80),
                     fmt::format("a JSON object (Qwen3_5VisionConfig, Qwen3_5MoeVisionConfig) for model_type {}: its "
                                 "vision tower is counted",
                                 wrapper.value("model_type", std::string("qwen3_5"))));
  }
  const json& vc = *it;
  auto& v = m.vision;
  v.present = true;
  v.layers = get_int(vc, "depth", src, std::nullopt, 0, kMaxCount);
  v.hidden = get_int(vc, "hidden_size", src);
  v.intermediate = get_int(vc, "intermediate_size", src);
  v.heads = get_int(vc, "num_heads", src);
  v.channels = get_int(vc, "in_channels", src, std::nullopt, 1, 1024);
  v.patch_size = get_int(vc, "patch_size", src, std::nullopt, 1, 1 << 16);
  v.temporal_patch = get_int(vc, "temporal_patch_size", src, std::nullopt, 1, 1024);
  v.merge_size = get_int(vc, "spatial_merge_size", src, std::nullopt, 1, 1024);
  v.output_dim = get_int(vc, "out_hidden_size", src);
  v.positions = get_int(vc, "num_position_embeddings", src, std::nullopt, 1, kMaxDim);
  if (v.hidden % v.heads != 0) {
    throw InputError(source_field(src, "num_heads"), std::to_string(v.heads),
                     fmt::format("a divisor of hidden_size ({}): Qwen3VLVisionAttention's head_dim is hidden_size / heads", v.hidden));
  }
  if (const auto d = vc.find("deepstack_visual_indexes"); d != vc.end() && !d->is_null() && !(d->is_array() && d->empty())) {
    throw InputError(source_field(src, "deepstack_visual_indexes"), d->dump().substr(0, 80),
                     "an empty list: Qwen3.5's vision tower has no deepstack mergers (Qwen3_5VisionModel)");
  }
  const std::set<std::string, std::less<>> read = {
      "depth",      "hidden_size",         "intermediate_size", "num_heads",       "in_channels",
      "patch_size", "temporal_patch_size", "spatial_merge_size", "out_hidden_size", "num_position_embeddings"};
  finish_vision_config(wrapper, vc, read, kQwenVisionNoTensor, source, m);
}

}  // namespace moemem::config_detail
