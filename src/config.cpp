#include "moemem/config.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "config_internal.hpp"
#include "config_keys.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"
#include "moemem/json_limits.hpp"
#include "moemem/presets.hpp"

namespace moemem {

namespace {

using nlohmann::json;

// Keys that describe the model but do not change how much memory training needs. Keys that add
// or reshape tensors are never here: config_keys.cpp refuses them where a family does not read
// them. quantization_config describes the checkpoint's storage (FP8 blocks with scales, MXFP4
// experts), not the parameters, which train in the training dtype; layer_types is checked to
// name only full or sliding-window attention (config_keys.cpp), which have the same tensors.
const std::set<std::string, std::less<>> kNoMemoryEffect = {
    "architectures", "auto_map", "model_type", "torch_dtype", "dtype", "transformers_version",
    "bos_token_id", "eos_token_id", "pad_token_id", "hidden_act", "initializer_range",
    "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "use_cache",
    "attention_dropout", "routed_scaling_factor", "topk_method", "n_group", "topk_group",
    "norm_topk_prob", "scoring_func", "seq_aux", "aux_loss_alpha", "ep_size",
    "pretraining_tp", "quantization_config", "router_aux_loss_coef", "output_router_logits",
    "sliding_window", "use_sliding_window", "max_window_layers", "tie_word_embeddings",
    "_name_or_path", "layer_types", "attn_implementation", "rope_type", "partial_rotary_factor",
    "moe_router_dtype", "router_jitter_noise", "num_nextn_predict_layers_note",
    // transformers 5 writes rope_theta, rope_type and partial_rotary_factor into one dict (read
    // nowhere for memory, as those keys are not); Gemma 3's sliding-window layer period, which
    // layer_types (checked) spells out.
    "rope_parameters", "_sliding_window_pattern"};

}  // namespace

namespace config_detail {

std::string source_field(const std::string& source, std::string_view key) {
  return fmt::format("{}: {}", source, key);
}

std::int64_t get_int(const json& j, std::string_view key, const std::string& source,
                     std::optional<std::int64_t> fallback, std::int64_t min, std::int64_t max) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    throw InputError(source_field(source, key), "missing", "an integer key in config.json");
  }
  if (!it->is_number_integer()) {
    throw InputError(source_field(source, key), it->dump(), "an integer");
  }
  // Unsigned values above INT64_MAX are refused rather than wrapped.
  if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
    throw InputError(source_field(source, key), it->dump(), fmt::format("an integer from {} to {}", min, max));
  }
  const auto v = it->get<std::int64_t>();
  if (v < min || v > max) {
    throw InputError(source_field(source, key), it->dump(), fmt::format("an integer from {} to {}", min, max));
  }
  return v;
}

bool get_bool(const json& j, std::string_view key, const std::string& source, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw InputError(source_field(source, key), it->dump(), "true or false");
  return it->get<bool>();
}

// The sizes every supported family names alike.
void parse_core_sizes(const json& j, const std::string& source, ModelSpec& m) {
  m.hidden = get_int(j, "hidden_size", source);
  m.vocab = get_int(j, "vocab_size", source);
  m.num_layers = get_int(j, "num_hidden_layers", source, std::nullopt, 1, kMaxCount);
  m.num_heads = get_int(j, "num_attention_heads", source);
  m.num_kv_heads = get_int(j, "num_key_value_heads", source, m.num_heads);
}

// DeepSeek's MoE fields (V1, V2, V3): routed and shared experts, and which layers are MoE —
// DeepSeek's modelling code makes layer i MoE when routed experts exist, i >= first_k_dense_replace
// and i % moe_layer_freq == 0.
void parse_deepseek_moe(const json& j, const std::string& source, ModelSpec& m) {
  m.moe.num_routed_experts = get_int(j, "n_routed_experts", source, 0, 0, kMaxCount);
  if (m.moe.num_routed_experts > 0) {
    m.moe.num_shared_experts = get_int(j, "n_shared_experts", source, 0, 0);
    m.moe.top_k = get_int(j, "num_experts_per_tok", source);
    m.moe.expert_ffn = get_int(j, "moe_intermediate_size", source);
    m.moe.shared_ffn = m.moe.num_shared_experts * m.moe.expert_ffn;
  }
  const std::int64_t first_dense = get_int(j, "first_k_dense_replace", source, 0, 0);
  const std::int64_t freq = get_int(j, "moe_layer_freq", source, 1);
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::dense);
  for (std::int64_t i = 0; i < m.num_layers; ++i) {
    if (m.moe.num_routed_experts > 0 && i >= first_dense && i % freq == 0) {
      m.layer_kinds[static_cast<std::size_t>(i)] = LayerKind::moe;
    }
  }
}

void parse_deepseek(const json& j, const std::string& source, ModelSpec& m,
                    std::set<std::string, std::less<>>& used) {
  for (const char* k : {"hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "attention_bias",
                        "intermediate_size", "moe_intermediate_size", "n_routed_experts",
                        "n_shared_experts", "num_experts_per_tok", "first_k_dense_replace",
                        "moe_layer_freq", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                        "qk_rope_head_dim", "v_head_dim", "num_nextn_predict_layers", "topk_method"}) {
    used.insert(k);
  }
  m.attention = AttentionKind::mla;
  parse_core_sizes(j, source, m);
  m.dense_ffn = get_int(j, "intermediate_size", source);
  m.mla.q_lora_rank = get_int(j, "q_lora_rank", source, 0, 0);  // null: plain q_proj
  m.mla.kv_lora_rank = get_int(j, "kv_lora_rank", source);
  m.mla.qk_nope_head_dim = get_int(j, "qk_nope_head_dim", source);
  m.mla.qk_rope_head_dim = get_int(j, "qk_rope_head_dim", source);
  m.mla.v_head_dim = get_int(j, "v_head_dim", source);
  parse_deepseek_moe(j, source, m);
  if (get_bool(j, "attention_bias", source, false)) {
    throw InputError(source_field(source, "attention_bias"), "true", "false (MLA projections with biases are not modelled)");
  }
  // DeepSeek-V3's "noaux_tc" routing keeps a per-expert score-correction bias in each router.
  const auto tm = j.find("topk_method");
  m.moe.router_bias = m.is_moe() && tm != j.end() && tm->is_string() && tm->get<std::string>() == "noaux_tc";
  // Both group-limited methods pick topk_group of n_group expert groups per token first
  // (DeepSeek-V3 §2.1.2 node-limited routing; transformers' DeepseekV3 router, DeepSeek-V2's
  // MoEGate under group_limited_greedy); "greedy" takes the top-k of all experts.
  if (m.is_moe() && tm != j.end() && tm->is_string() && (*tm == "noaux_tc" || *tm == "group_limited_greedy")) {
    m.moe.n_group = get_int(j, "n_group", source, 1, 1, m.moe.num_routed_experts);
    m.moe.topk_group = get_int(j, "topk_group", source, m.moe.n_group, 1, m.moe.n_group);
    if (m.moe.num_routed_experts % m.moe.n_group != 0) {
      throw InputError(source_field(source, "n_group"), std::to_string(m.moe.n_group),
                       fmt::format("a divisor of n_routed_experts ({}): the router views the experts as n_group equal groups",
                                   m.moe.num_routed_experts));
    }
  }
  m.mtp_layers = get_int(j, "num_nextn_predict_layers", source, 0, 0, 16);
}

void require_derived_head_dim(const ModelSpec& m, const std::string& source, std::string_view attention) {
  if (m.head_dim * m.num_heads == m.hidden) return;
  throw InputError(source_field(source, "head_dim"), std::to_string(m.head_dim),
                   fmt::format("absent or hidden_size / num_attention_heads ({}): {} derives it so", m.hidden / m.num_heads,
                               attention));
}

// Multi-head / grouped-query attention families (Llama, Mistral, Mixtral, Qwen2/3, DeepSeek-V1).
void parse_gqa_common(const json& j, const std::string& source, ModelSpec& m,
                      std::set<std::string, std::less<>>& used) {
  for (const char* k : {"hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "head_dim", "intermediate_size"}) {
    used.insert(k);
  }
  m.attention = AttentionKind::gqa;
  parse_core_sizes(j, source, m);
  // An absent num_key_value_heads is the config class's default, which for these families is not
  // num_attention_heads (transformers MistralConfig and MixtralConfig 8, Qwen3MoeConfig 4,
  // Qwen3Config 32); a null one, as LlamaConfig's None, falls back to num_attention_heads.
  if (!j.contains("num_key_value_heads")) {
    static const std::map<std::string, std::int64_t, std::less<>> kKvDefault = {
        {"mistral", 8}, {"mixtral", 8}, {"qwen3_moe", 4}, {"qwen3", 32}};
    if (const auto it = kKvDefault.find(m.model_type); it != kKvDefault.end()) m.num_kv_heads = it->second;
  }
  if (m.num_heads % m.num_kv_heads != 0) {
    throw InputError(source_field(source, "num_key_value_heads"), std::to_string(m.num_kv_heads),
                     fmt::format("a divisor of num_attention_heads ({})", m.num_heads));
  }
  if (const auto it = j.find("head_dim"); it != j.end() && !it->is_null()) {
    m.head_dim = get_int(j, "head_dim", source);
  } else if (it == j.end() && m.model_type == "qwen3") {
    m.head_dim = 128;  // Qwen3Config.head_dim's default (not hidden_size / num_attention_heads)
  } else {
    if (m.hidden % m.num_heads != 0) {
      throw InputError(source_field(source, "num_attention_heads"), std::to_string(m.num_heads),
                       fmt::format("a divisor of hidden_size ({}) when no head_dim is given", m.hidden));
    }
    m.head_dim = m.hidden / m.num_heads;
  }
  m.dense_ffn = get_int(j, "intermediate_size", source);
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::dense);
}

void set_qwen_moe_layers(const json& j, const std::string& source, ModelSpec& m) {
  const std::int64_t step = get_int(j, "decoder_sparse_step", source, 1);
  std::set<std::int64_t> dense_only;
  if (const auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw InputError(source_field(source, "mlp_only_layers"), it->dump(), "a list of layer indices");
    for (const auto& v : *it) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= m.num_layers) {
        throw InputError(source_field(source, "mlp_only_layers"), v.dump(),
                         fmt::format("layer indices from 0 to {}", m.num_layers - 1));
      }
      dense_only.insert(v.get<std::int64_t>());
    }
  }
  for (std::int64_t i = 0; i < m.num_layers; ++i) {
    if (!dense_only.contains(i) && (i + 1) % step == 0) m.layer_kinds[static_cast<std::size_t>(i)] = LayerKind::moe;
  }
}

}  // namespace config_detail

namespace {

using namespace config_detail;

void parse_llama(const json& j, const std::string& source, ModelSpec& m, std::set<std::string, std::less<>>& used) {
  parse_gqa_common(j, source, m, used);
  m.naming = NamingStyle::llama;
  // LlamaAttention and LlamaMLP take their biases from attention_bias and mlp_bias; Mistral's
  // modelling code builds every projection without a bias whatever the keys say, so there a set
  // key is refused by name (refuse_tensor_keys) rather than counted.
  if (m.model_type == "mistral") return;
  used.insert("attention_bias");
  used.insert("mlp_bias");
  m.qkv_bias = m.o_bias = get_bool(j, "attention_bias", source, false);
  m.mlp_bias = get_bool(j, "mlp_bias", source, false);
}

void parse_mixtral(const json& j, const std::string& source, ModelSpec& m, std::set<std::string, std::less<>>& used) {
  parse_gqa_common(j, source, m, used);
  used.insert("num_local_experts");
  used.insert("num_experts_per_tok");
  m.naming = NamingStyle::mixtral;
  m.moe.num_routed_experts = get_int(j, "num_local_experts", source, std::nullopt, 1, kMaxCount);
  m.moe.top_k = get_int(j, "num_experts_per_tok", source);
  m.moe.expert_ffn = m.dense_ffn;
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::moe);
}

// Qwen2 (q/k/v biases), Qwen3 (q/k norms, attention_bias), and their MoE variants: layer i is
// sparse unless listed in mlp_only_layers, when (i + 1) % decoder_sparse_step == 0.
void parse_qwen(const json& j, const std::string& source, ModelSpec& m, std::set<std::string, std::less<>>& used) {
  parse_gqa_common(j, source, m, used);
  const bool v3 = m.model_type == "qwen3" || m.model_type == "qwen3_moe";
  const bool moe = m.model_type == "qwen2_moe" || m.model_type == "qwen3_moe";
  m.naming = moe ? NamingStyle::qwen_moe : NamingStyle::llama;
  used.insert("attention_bias");
  if (v3) {
    // Qwen3Attention builds q_norm and k_norm whatever use_qk_norm says (Qwen3-Coder's config sets
    // it true): the key describes what is counted. qkv_bias false likewise (transformers reads
    // attention_bias); true is refused by name.
    (void)get_bool(j, "use_qk_norm", source, true);
    used.insert("use_qk_norm");
    if (j.contains("qkv_bias") && j.at("qkv_bias").is_boolean() && !j.at("qkv_bias").get<bool>()) used.insert("qkv_bias");
    m.qk_norm = true;
    m.qkv_bias = m.o_bias = get_bool(j, "attention_bias", source, false);
  } else {
    m.qkv_bias = true;  // Qwen2's modelling code always puts biases on q, k and v
  }
  if (!moe) return;
  for (const char* k : {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                        "mlp_only_layers", "shared_expert_intermediate_size"}) {
    used.insert(k);
  }
  m.moe.num_routed_experts = get_int(j, "num_experts", source, std::nullopt, 1, kMaxCount);
  m.moe.top_k = get_int(j, "num_experts_per_tok", source);
  m.moe.expert_ffn = get_int(j, "moe_intermediate_size", source);
  if (m.model_type == "qwen2_moe") {
    m.moe.shared_ffn = get_int(j, "shared_expert_intermediate_size", source, 0, 0);
    m.moe.shared_expert_gate = m.moe.shared_ffn > 0;
    m.moe.num_shared_experts = m.moe.shared_ffn > 0 ? 1 : 0;
  }
  set_qwen_moe_layers(j, source, m);
}

// DeepSeek-MoE (V1): multi-head attention with DeepSeek's MoE layout.
void parse_deepseek_v1(const json& j, const std::string& source, ModelSpec& m,
                       std::set<std::string, std::less<>>& used) {
  parse_gqa_common(j, source, m, used);
  for (const char* k : {"n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                        "first_k_dense_replace", "moe_layer_freq", "attention_bias"}) {
    used.insert(k);
  }
  m.naming = NamingStyle::deepseek;
  m.qkv_bias = m.o_bias = get_bool(j, "attention_bias", source, false);
  parse_deepseek_moe(j, source, m);
}

// GLM-4.5 / 4.6 (transformers models/glm4_moe/modeling_glm4_moe.py): grouped-query attention
// with biases on q, k and v only (Glm4MoeAttention: o_proj has none), per-head q/k RMSNorm when
// use_qk_norm, DeepSeek-V3's MoE layout (first_k_dense_replace dense layers, one fused shared
// MLP of n_shared_experts x moe_intermediate_size, Glm4MoeTopkRouter's sigmoid scores with an
// e_score_correction_bias per expert, always present) and num_nextn_predict_layers MTP layers
// stored as DeepSeek-V3's (layers.<L>.{embed_tokens, enorm, hnorm, eh_proj, shared_head}).
// partial_rotary_factor rotates part of each head and changes no tensor.
void parse_glm4_moe(const json& j, const std::string& source, ModelSpec& m, std::set<std::string, std::less<>>& used) {
  parse_gqa_common(j, source, m, used);
  for (const char* k : {"attention_bias", "use_qk_norm", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
                        "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq", "num_nextn_predict_layers"}) {
    used.insert(k);
  }
  m.naming = NamingStyle::deepseek;
  m.qkv_bias = get_bool(j, "attention_bias", source, false);
  m.qk_norm = get_bool(j, "use_qk_norm", source, false);
  parse_deepseek_moe(j, source, m);
  m.moe.router_bias = m.is_moe();
  m.mtp_layers = get_int(j, "num_nextn_predict_layers", source, 0, 0, 16);
}

// gpt-oss (transformers models/gpt_oss/modeling_gpt_oss.py): grouped-query attention with biases
// on q, k, v and o (attention_bias) and a learned sink per head; every layer MoE, with a router
// bias and biases on every expert's projections (expert size intermediate_size); layer_types
// alternates sliding-window and full attention (same tensors). experts_per_token repeats
// num_experts_per_tok; swiglu_limit clamps the activation; quantization_config (MXFP4 experts)
// describes the checkpoint's storage, not the parameters.
void parse_gpt_oss(const json& j, const std::string& source, ModelSpec& m, std::set<std::string, std::less<>>& used) {
  parse_gqa_common(j, source, m, used);
  for (const char* k : {"attention_bias", "num_local_experts", "num_experts_per_tok", "experts_per_token", "swiglu_limit",
                        "initial_context_length"}) {
    used.insert(k);
  }
  m.naming = NamingStyle::gpt_oss;
  m.qkv_bias = m.o_bias = get_bool(j, "attention_bias", source, true);  // GptOssConfig's default
  m.attention_sinks = true;
  m.moe.num_routed_experts = get_int(j, "num_local_experts", source, std::nullopt, 1, kMaxCount);
  m.moe.top_k = get_int(j, "num_experts_per_tok", source);
  if (get_int(j, "experts_per_token", source, m.moe.top_k) != m.moe.top_k) {
    throw InputError(source_field(source, "experts_per_token"), j.at("experts_per_token").dump(),
                     fmt::format("num_experts_per_tok ({}), which it repeats", m.moe.top_k));
  }
  m.moe.expert_ffn = m.dense_ffn;
  m.moe.router_bias = m.moe.expert_bias = true;
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::moe);
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InputError("--model", path,
                     fmt::format("a preset name ({}) or the path of a readable config.json file",
                                 fmt::join(preset_names(), ", ")));
  }
  if (const auto size = std::filesystem::file_size(path, ec); !ec && size > kConfigJsonLimits.max_bytes) {
    throw InputError("--model", fmt::format("{} ({} bytes)", path, size),
                     fmt::format("a config.json of at most {} bytes (the input size limit)", kConfigJsonLimits.max_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError("--model", path,
                     fmt::format("a preset name ({}) or a readable config.json path",
                                 fmt::join(preset_names(), ", ")));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : preset_texts()) names.emplace_back(p.name);
  return names;
}

namespace {

// Keys of multimodal wrappers (beside text_config) that only number special tokens.
const std::set<std::string, std::less<>> kWrapperTokenKeys = {
    "image_token_index", "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
    "vision_token_id", "ignore_index"};

// Unrecognised keys beyond this many are summarised: a 16 MB config could have a million.
constexpr std::size_t kMaxListedKeys = 100;

void note_unrecognised(ModelSpec& m, const std::string& key) {
  if (m.unrecognised_keys.size() < kMaxListedKeys) {
    m.unrecognised_keys.push_back(key);
  } else if (m.unrecognised_keys.size() == kMaxListedKeys) {
    m.unrecognised_keys.emplace_back("(more keys not listed)");
  }
}

ModelSpec parse_config_object(const json& j, const std::string& source);

}  // namespace

namespace config_detail {

void finish_vision_config(const json& wrapper, const json& vc, const Keys& read, const Keys& no_tensor,
                          const std::string& source, ModelSpec& m) {
  for (const auto& [key, value] : vc.items()) {
    if (read.contains(key) || no_tensor.contains(key)) continue;
    note_unrecognised(m, "vision_config." + key);
  }
  if (const auto t = wrapper.find("tie_word_embeddings"); t != wrapper.end() && !t->is_null() &&
                                                          (!t->is_boolean() || t->get<bool>() != m.tie_embeddings)) {
    throw InputError(source_field(source, "tie_word_embeddings"), t->dump(),
                     fmt::format("{} or absent: text_config's tie_word_embeddings, which decides lm_head", m.tie_embeddings));
  }
}

}  // namespace config_detail

namespace {

// Multimodal wrappers nest the language model's config; the keys beside it (a vision tower, a
// projector) are reported like any other key moemem does not understand.
// Llama-4's multimodal config (Llama4Config) builds Llama4TextConfig from text_config whatever
// model_type it names, and its vision tower from vision_config, which is counted (config_llama4.cpp).
ModelSpec parse_text_config(const json& j, const json& tc, const std::string& source) {
  json inner = tc;  // the text's nesting depth is bounded (check_json_limits), so is this copy's
  const bool llama4 = j.contains("model_type") && j.at("model_type") == "llama4";
  // Qwen3_5MoeConfig likewise builds Qwen3_5MoeTextConfig and its vision tower, Qwen3_5Config
  // Qwen3_5TextConfig and its vision tower (config_qwen3_5.cpp).
  const bool qwen3_5_moe = j.contains("model_type") && j.at("model_type") == "qwen3_5_moe";
  const bool qwen3_5 = qwen3_5_moe || (j.contains("model_type") && j.at("model_type") == "qwen3_5");
  // Gemma3Config likewise builds Gemma3TextConfig, with its defaults, and a SigLIP tower (config_gemma3.cpp).
  const bool gemma3 = j.contains("model_type") && j.at("model_type") == "gemma3";
  if (llama4) inner["model_type"] = "llama4_text";
  if (qwen3_5) inner["model_type"] = qwen3_5_moe ? "qwen3_5_moe_text" : "qwen3_5_text";
  if (gemma3) fill_gemma3_text_defaults(inner);
  if (!inner.contains("model_type") && j.contains("model_type")) inner["model_type"] = j.at("model_type");
  ModelSpec m = parse_config_object(inner, source + " (text_config)");
  if (llama4 || qwen3_5 || gemma3) {
    if (llama4) parse_llama4_vision(j, source, m);
    else if (qwen3_5) parse_qwen3_5_vision(j, source, m);
    else parse_gemma3_vision(j, source, m);
    try {
      (void)build_inventory(m).total();
    } catch (const OverflowError&) {
      throw InputError(source_field(source, "vision_config sizes"), "too large", "sizes whose products fit in 64 bits");
    }
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "text_config" || key == "model_type" || kNoMemoryEffect.contains(key) || kWrapperTokenKeys.contains(key)) continue;
    if (llama4 && is_llama4_wrapper_key(key)) continue;
    if (qwen3_5 && key == "vision_config") continue;
    if (gemma3 && is_gemma3_wrapper_key(key)) continue;
    note_unrecognised(m, key);
  }
  return m;
}

ModelSpec parse_config_object(const json& j, const std::string& source) {
  if (!j.is_object()) throw InputError(source, j.type_name(), "a JSON object (a Hugging Face config.json)");
  const auto mt = j.find("model_type");
  // Gemma-3's multimodal config without text_config is Gemma3TextConfig() (config_gemma3.cpp).
  if (mt != j.end() && *mt == "gemma3") {
    const auto tc = j.find("text_config");
    if (tc == j.end() || tc->is_null()) return parse_text_config(j, json::object(), source);
    if (!tc->is_object()) throw InputError(source_field(source, "text_config"), tc->dump().substr(0, 80), "a JSON object (Gemma3TextConfig)");
  }
  if (const auto tc = j.find("text_config"); tc != j.end() && tc->is_object()) {
    // The multimodal wrappers whose towers moemem counts, or a text type nesting its own config;
    // another wrapper (llava, mistral3, ...) or one with a tower beside text_config would be
    // narrowed silently to its language model.
    const bool counted = mt != j.end() && (*mt == "llama4" || *mt == "qwen3_5" || *mt == "qwen3_5_moe" || *mt == "gemma3");
    if (!counted) {
      const bool text_type = mt != j.end() && mt->is_string() && config_keys::is_supported_type(mt->get<std::string>());
      std::string tower;
      for (const auto& [key, value] : j.items()) {
        if (key.find("vision") != std::string::npos || key.find("audio") != std::string::npos ||
            key.find("projector") != std::string::npos || key.find("image") != std::string::npos) {
          tower = key;
          break;
        }
      }
      if (!text_type || !tower.empty()) {
        throw InputError(source_field(source, tower.empty() ? "model_type" : tower),
                         tower.empty() ? (mt == j.end() ? std::string("missing") : mt->dump()) : std::string("set"),
                         "a text-only config, or a multimodal wrapper whose vision tower moemem counts (gemma3, llama4, "
                         "qwen3_5, qwen3_5_moe); to cost only the language model, give text_config's contents as the "
                         "config");
      }
    }
    return parse_text_config(j, *tc, source);
  }
  if (mt == j.end() || !mt->is_string()) {
    throw InputError(source_field(source, "model_type"), mt == j.end() ? "missing" : mt->dump(),
                     fmt::format("a string naming a supported model type ({})", config_keys::supported_types()));
  }
  ModelSpec m;
  m.name = source;
  m.model_type = mt->get<std::string>();
  std::set<std::string, std::less<>> used;
  if (m.model_type == "deepseek_v2" || m.model_type == "deepseek_v3" || m.model_type == "kimi_k2") {
    // Kimi-K2 ships the DeepSeek-V3 architecture under its own model_type.
    parse_deepseek(j, source, m, used);
  } else if (m.model_type == "deepseek_v32") {
    parse_deepseek_v32(j, source, m, used);
  } else if (m.model_type == "deepseek") {
    parse_deepseek_v1(j, source, m, used);
  } else if (m.model_type == "glm4_moe") {
    parse_glm4_moe(j, source, m, used);
  } else if (m.model_type == "glm4_moe_lite") {
    parse_glm4_moe_lite(j, source, m, used);
  } else if (m.model_type == "glm_moe_dsa") {
    parse_glm_moe_dsa(j, source, m, used);
  } else if (m.model_type == "gpt_oss") {
    parse_gpt_oss(j, source, m, used);
  } else if (m.model_type == "olmoe") {
    parse_olmoe(j, source, m, used);
  } else if (m.model_type == "dots1") {
    parse_dots1(j, source, m, used);
  } else if (m.model_type == "ernie4_5_moe") {
    parse_ernie4_5_moe(j, source, m, used);
  } else if (m.model_type == "gemma2") {
    parse_gemma2(j, source, m, used);
  } else if (m.model_type == "gemma3_text") {
    parse_gemma3_text(j, source, m, used);
  } else if (m.model_type == "phimoe") {
    parse_phimoe(j, source, m, used);
  } else if (m.model_type == "granitemoe" || m.model_type == "granitemoeshared") {
    parse_granitemoe(j, source, m, used);
  } else if (m.model_type == "dbrx") {
    parse_dbrx(j, source, m, used);
  } else if (m.model_type == "minimax_m2") {
    parse_minimax_m2(j, source, m, used);
  } else if (m.model_type == "qwen3_next") {
    parse_qwen3_next(j, source, m, used);
  } else if (m.model_type == "nemotron_h") {
    parse_nemotron_h(j, source, m, used);
  } else if (m.model_type == "hunyuan_v1_moe") {
    parse_hunyuan_v1_moe(j, source, m, used);
  } else if (m.model_type == "llama4_text") {
    parse_llama4_text(j, source, m, used);
  } else if (m.model_type == "mimo_v2_flash") {
    parse_mimo_v2_flash(j, source, m, used);
  } else if (m.model_type == "nemotron-nas") {
    parse_nemotron_nas(j, source, m, used);
  } else if (m.model_type == "qwen3_5_moe_text") {
    parse_qwen3_5_moe_text(j, source, m, used);
  } else if (m.model_type == "qwen3_5_moe") {
    throw InputError(source_field(source, "text_config"), "missing",
                     "a text_config object for model_type qwen3_5_moe (Qwen3_5MoeConfig's text model), or a qwen3_5_moe_text config");
  } else if (m.model_type == "qwen3_5_text") {
    parse_qwen3_5_text(j, source, m, used);
  } else if (m.model_type == "qwen3_5") {
    throw InputError(source_field(source, "text_config"), "missing",
                     "a text_config object for model_type qwen3_5 (Qwen3_5Config's text model), or a qwen3_5_text config");
  } else if (m.model_type == "llama4") {
    throw InputError(source_field(source, "text_config"), "missing",
                     "a text_config object for model_type llama4 (Llama4Config's text model), or a llama4_text config");
  } else if (m.model_type == "llama" || m.model_type == "mistral") {
    parse_llama(j, source, m, used);
  } else if (m.model_type == "mixtral") {
    parse_mixtral(j, source, m, used);
  } else if (m.model_type == "qwen2" || m.model_type == "qwen2_moe" || m.model_type == "qwen3" ||
             m.model_type == "qwen3_moe") {
    parse_qwen(j, source, m, used);
  } else {
    config_keys::refuse_type(source_field(source, "model_type"), m.model_type);
  }
  // Absent: the family's default (Gemma ties, the others do not).
  m.tie_embeddings = get_bool(j, "tie_word_embeddings", source, m.tie_embeddings);
  config_keys::refuse_tensor_keys(j, used, source, m.model_type);
  for (const auto& [key, value] : j.items()) {
    if (!used.contains(key) && !kNoMemoryEffect.contains(key)) note_unrecognised(m, key);
  }
  validate_model(m);
  // Every tensor's size must fit in 64 bits; say which config is to blame if one does not.
  try {
    (void)build_inventory(m).total();
  } catch (const OverflowError&) {
    throw InputError(source_field(source, "hidden_size/intermediate sizes/expert counts"), "too large",
                     "sizes whose products (tensor and model sizes) fit in 64 bits");
  }
  return m;
}

}  // namespace

ModelSpec parse_hf_config(std::string_view json_text, const std::string& source) {
  // Size and depth first: dump() and copies of a deeply nested document would overflow the stack.
  check_json_limits(json_text, kConfigJsonLimits, source);
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw InputError(source, fmt::format("malformed JSON at byte {}", e.byte),
                     "a complete Hugging Face config.json (a JSON object)");
  } catch (const json::out_of_range&) {
    // nlohmann's number overflow (e.g. 1e400) is an out_of_range, not a parse_error.
    throw InputError(source, "a number beyond a 64-bit float", "a Hugging Face config.json with finite numbers");
  } catch (const json::exception& e) {
    throw InputError(source, e.what(), "a Hugging Face config.json");
  }
  try {
    return parse_config_object(j, source);
  } catch (const json::exception& e) {
    // Every key is read with its type checked first; this is the net under that rule.
    throw InputError(source, e.what(), "a Hugging Face config.json whose keys have the documented types");
  }
}

ModelSpec load_model(const std::string& name_or_path) {
  for (const auto& p : preset_texts()) {
    if (name_or_path == p.name) return parse_hf_config(p.json, p.name);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(name_or_path, ec)) {  // a checkpoint directory: its config.json
    const std::string file = (std::filesystem::path(name_or_path) / "config.json").string();
    return parse_hf_config(read_file(file), file);
  }
  if (!std::filesystem::exists(name_or_path, ec)) {  // a preset in any case, or its repository id
    if (const auto preset = match_preset(name_or_path)) return load_model(*preset);
  }
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               name_or_path.find(".json") != std::string::npos;
  // A variant of a preset's model (an instruct or dated release) is not taken for the preset: its
  // config may differ. The error names the preset it begins with.
  std::string hint;
  if (!std::filesystem::exists(name_or_path, ec)) {
    if (const auto near = nearest_preset(name_or_path)) {
      hint = fmt::format(" ('{}' is no preset; it begins like preset {}: pass --model {} if the checkpoint has that "
                         "architecture, or its config.json)",
                         name_or_path, *near, *near);
    }
  }
  if (!looks_like_path) {
    throw InputError("--model", name_or_path,
                     fmt::format("a preset name ({}) or a path to a config.json{}", fmt::join(preset_names(), ", "), hint));
  }
  if (!hint.empty()) {
    throw InputError("--model", name_or_path,
                     fmt::format("a preset name ({}) or the path of a readable config.json file{}",
                                 fmt::join(preset_names(), ", "), hint));
  }
  return parse_hf_config(read_file(name_or_path), name_or_path);
}

void set_mtp_layers(ModelSpec& m, std::optional<std::int64_t> mtp) {
  if (!mtp) return;
  if (*mtp < 0 || *mtp > 16) throw InputError("--mtp", std::to_string(*mtp), "an integer from 0 to 16");
  // DeepSeek-V3's MTP module; GLM-4.5 stores the same module (parse_glm4_moe), ERNIE-4.5 and MiMo-V2-Flash their own.
  if (*mtp > 1 && m.model_type == "qwen3_next") {
    throw InputError("--mtp", std::to_string(*mtp), "0 or 1 for qwen3_next (its checkpoints' one mtp.* layer)");
  }
  if (*mtp > 0 && m.attention != AttentionKind::mla && m.model_type != "glm4_moe" && m.model_type != "ernie4_5_moe" &&
      m.model_type != "mimo_v2_flash" && m.model_type != "qwen3_next") {
    throw InputError("--mtp", std::to_string(*mtp), "0 for models without DeepSeek-style MTP modules");
  }
  m.mtp_layers = *mtp;
}

}  // namespace moemem
