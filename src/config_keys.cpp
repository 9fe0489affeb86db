#include "config_keys.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "moemem/errors.hpp"

namespace moemem::config_keys {

namespace {

// Every model_type the reader accepts (src/config.cpp parse_config_object), in listing order.
constexpr auto kTypes = std::to_array<std::string_view>({
    "deepseek", "deepseek_v2", "deepseek_v3", "kimi_k2", "llama", "mistral",
    "mixtral",  "qwen2",       "qwen2_moe",   "qwen3",   "qwen3_moe", "glm4_moe", "gpt_oss",
    "olmoe",    "dots1",       "ernie4_5_moe", "deepseek_v32", "glm4_moe_lite", "gemma2", "gemma3_text", "gemma3",
    "phimoe", "granitemoe", "granitemoeshared", "dbrx", "minimax_m2", "hunyuan_v1_moe", "qwen3_next", "llama4_text", "llama4", "glm_moe_dsa",
    "nemotron_h", "mimo_v2_flash", "nemotron-nas", "qwen3_5_moe", "qwen3_5_moe_text",
    "qwen3_5", "qwen3_5_text"});

// Keys that add or reshape tensors in the Hugging Face families that use them, with what they
// add. A family that reads one lists it in `used`; in any other family a set value is refused
// (the tensors would be missing from the count and from memory). Sources: each family's
// modeling_*.py in huggingface/transformers, and DeepSeek-V3.2-Exp's inference/model.py (Indexer).
struct TensorKey {
  std::string_view key;
  std::string_view adds;
};
constexpr auto kTensorKeys = std::to_array<TensorKey>({
    {"index_n_heads", "DeepSeek sparse attention's indexer (wq_b, wk, k_norm, weights_proj per layer)"},
    {"index_head_dim", "DeepSeek sparse attention's indexer (wq_b, wk, k_norm, weights_proj per layer)"},
    {"index_topk", "DeepSeek sparse attention's indexer (wq_b, wk, k_norm, weights_proj per layer)"},
    {"indexer_types", "DeepSeek sparse attention's indexer layers"},
    {"use_qk_norm", "q/k RMSNorm weights"},
    {"qk_norm", "q/k RMSNorm weights"},
    {"qk_layernorm", "q/k LayerNorm weights"},
    {"use_qk_layernorm", "q/k LayerNorm weights"},
    {"qkv_bias", "q/k/v projection biases"},
    {"use_qkv_bias", "q/k/v projection biases"},
    {"attention_bias", "attention projection biases"},
    {"mlp_bias", "MLP projection biases"},
    {"use_bias", "projection biases"},
    {"lm_head_bias", "an output-head bias"},
    {"num_nextn_predict_layers", "multi-token-prediction layers"},
    {"num_mtp_modules", "multi-token-prediction modules"},
    {"mtp_num_layers", "multi-token-prediction layers"},
    {"mtp_num_hidden_layers", "multi-token-prediction layers"},
    {"mtp_use_dedicated_embeddings", "a multi-token-prediction embedding of its own"},
    {"n_routed_experts", "routed experts"},
    {"num_experts", "routed experts"},
    {"num_local_experts", "routed experts"},
    {"moe_num_experts", "routed experts"},
    {"n_shared_experts", "shared experts"},
    {"num_shared_experts", "shared experts"},
    {"num_shared_expert", "shared experts"},
    {"moe_num_shared_experts", "shared experts"},
    {"shared_expert_intermediate_size", "a shared expert"},
    {"moe_intermediate_size", "expert MLPs of another size"},
    {"moe_layer_freq", "MoE layers at another frequency"},
    {"first_k_dense_replace", "dense layers before the MoE layers"},
    {"decoder_sparse_step", "MoE layers at another step"},
    {"interleave_moe_layer_step", "interleaved dense and MoE layers"},
    {"moe_layer_start_index", "dense layers before the MoE layers"},
    {"use_routing_bias", "a router bias per expert"},
    {"q_lora_rank", "MLA's query compression"},
    {"kv_lora_rank", "MLA's key/value compression"},
    {"qk_rope_head_dim", "MLA's decoupled RoPE keys"},
    {"qk_nope_head_dim", "MLA's head split"},
    {"v_head_dim", "MLA's value heads"},
    {"linear_num_value_heads", "gated DeltaNet linear-attention layers"},
    {"linear_num_key_heads", "gated DeltaNet linear-attention layers"},
    {"linear_conv_kernel_dim", "gated DeltaNet short convolutions"},
    {"full_attention_interval", "linear-attention layers between full-attention ones"},
    {"hybrid_override_pattern", "Mamba-2 and MLP-only layers"},
    {"mamba_num_heads", "Mamba-2 SSM layers"},
    {"ssm_state_size", "Mamba-2 SSM layers"},
    {"block_configs", "per-layer heterogeneous blocks"},
    {"ffn_config", "DBRX's expert MLPs"},
    {"attn_config", "DBRX's attention"},
    {"intermediate_size_mlp", "dense MLPs of another size"},
    {"shared_intermediate_size", "a shared MLP (Granite MoE)"},
    {"hybrid_layer_pattern", "sliding-window attention layers of their own sizes (MiMo-V2)"},
    {"swa_num_attention_heads", "sliding-window attention layers of their own sizes (MiMo-V2)"},
    {"swa_num_key_value_heads", "sliding-window attention layers of their own sizes (MiMo-V2)"},
    {"swa_head_dim", "sliding-window attention layers of their own sizes (MiMo-V2)"},
    {"swa_v_head_dim", "sliding-window attention layers of their own sizes (MiMo-V2)"},
    {"add_swa_attention_sink_bias", "attention sink logits (MiMo-V2)"},
    {"add_full_attention_sink_bias", "attention sink logits (MiMo-V2)"},
});

// A value that turns its key off: null, false, 0, or an empty string, list or object.
bool is_set(const nlohmann::json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string() || v.is_array() || v.is_object()) return !v.empty();
  return true;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0u : 1u)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string supported_types() { return fmt::format("{}", fmt::join(kTypes, ", ")); }
bool is_supported_type(std::string_view type) { return std::find(kTypes.begin(), kTypes.end(), type) != kTypes.end(); }

std::string nearest_type(std::string_view type) {
  // A config's model_type is short; a long one is cut so the distance stays cheap.
  const std::string_view t = type.substr(0, 64);
  // Ties go to the longer common prefix, then to the earlier type in kTypes.
  auto prefix = [&](std::string_view c) {
    return static_cast<std::size_t>(std::mismatch(t.begin(), t.end(), c.begin(), c.end()).first - t.begin());
  };
  std::string_view best = kTypes.front();
  std::size_t best_d = edit_distance(t, best);
  for (const auto candidate : kTypes) {
    const std::size_t d = edit_distance(t, candidate);
    if (d < best_d || (d == best_d && prefix(candidate) > prefix(best))) {
      best = candidate;
      best_d = d;
    }
  }
  return std::string(best);
}

void refuse_type(const std::string& field, const std::string& type) {
  // Language models of multimodal families whose text config is a supported type's architecture
  // (transformers modeling_qwen3_vl(_moe): Qwen3-VL's text decoder is Qwen3's / Qwen3-MoE's, its
  // M-RoPE sections adding no tensor): the type to give, not the nearest name, which can be a
  // different architecture (qwen3_5_moe_text's hybrid layers counted +2.6% on Qwen3-VL-30B).
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 2> kSameArchitecture = {
      {{"qwen3_vl_moe_text", "qwen3_moe"}, {"qwen3_vl_text", "qwen3"}}};
  for (const auto& [text, same] : kSameArchitecture) {
    if (type == text) {
      throw InputError(field, type,
                       fmt::format("one of: {} ({}'s decoder is {}'s architecture: give model_type {} to count it)",
                                   supported_types(), type, same, same));
    }
  }
  throw InputError(field, type, fmt::format("one of: {} (nearest by name: {})", supported_types(), nearest_type(type)));
}

void refuse_tensor_keys(const nlohmann::json& j, const KeySet& used, const std::string& source,
                        std::string_view model_type) {
  for (const auto& [key, adds] : kTensorKeys) {
    if (used.contains(key)) continue;
    const auto it = j.find(key);
    if (it == j.end() || !is_set(*it)) continue;
    throw InputError(fmt::format("{}: {}", source, key), it->dump(),
                     fmt::format("absent, null or false for model_type {}: the key adds {}, which moemem does not "
                                 "model for this type (counting without them would be wrong)",
                                 model_type, adds));
  }
  // DeepSeek's noaux_tc routing adds a per-expert correction bias; only the DeepSeek reader
  // reads topk_method.
  if (const auto it = j.find("topk_method"); !used.contains("topk_method") && it != j.end() && *it == "noaux_tc") {
    throw InputError(fmt::format("{}: topk_method", source), it->dump(),
                     fmt::format("a routing without noaux_tc for model_type {}: noaux_tc adds a per-expert "
                                 "e_score_correction_bias, which moemem does not model for this type",
                                 model_type));
  }
  // Per-layer attention kinds: full and sliding-window attention have the same tensors; any
  // other kind (Qwen3-Next's linear_attention, hybrid Mamba layers) has its own.
  // (Llama-4's reader checks its own layer kinds, chunked_attention among them.)
  if (const auto it = j.find("layer_types"); !used.contains("layer_types") && it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw InputError(fmt::format("{}: layer_types", source), it->dump(), "a list of layer kinds");
    for (const auto& kind : *it) {
      if (kind != "full_attention" && kind != "sliding_attention") {
        throw InputError(fmt::format("{}: layer_types", source), kind.dump(),
                         "full_attention or sliding_attention (other layer kinds have tensors moemem does not model)");
      }
    }
  }
}

}  // namespace moemem::config_keys
