// The reader for Nemotron-H (model_type nemotron_h: NVIDIA-Nemotron-Nano-9B-v2 and 12B-v2, the
// hybrid Mamba-2 models, and Nemotron-3-Nano-30B-A3B, hybrid Mamba-2 + MoE). Each block is one
// norm and one mixer, of the kind hybrid_override_pattern gives per block: M Mamba-2, * attention,
// - MLP, E MoE. Source: transformers models/nemotron_h (configuration_nemotron_h.py
// NemotronHConfig, modeling_nemotron_h.py NemotronHBlock and its mixers); the tensors are built in
// src/inventory_nemotron_h.cpp. src/config.cpp dispatches.
#include <string>

#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

namespace {

// A block kind's pattern character from transformers 5's layers_block_type names, or the legacy
// ones remap_legacy_layer_types accepts (mamba, attention); 0 for any other.
char block_char(const json& kind) {
  if (kind == "mamba" || kind == "linear_attention") return 'M';
  if (kind == "attention" || kind == "full_attention") return '*';
  if (kind == "mlp") return '-';
  if (kind == "moe") return 'E';
  return 0;
}

// The block kinds as a pattern string: hybrid_override_pattern (the released configs), or the
// list transformers 5 writes (layers_block_type, read as layer_types through attribute_map). Both
// given: they must agree (transformers would take the list and drop the pattern). Neither: refused
// (NemotronHConfig's four-block default is no released model).
std::string read_pattern(const json& j, const std::string& source, Keys& used) {
  std::string pattern, listed;
  bool has_pattern = false, has_list = false;
  if (const auto it = j.find("hybrid_override_pattern"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>().empty() || it->get<std::string>().size() > static_cast<std::size_t>(kMaxCount) ||
        it->get<std::string>().find_first_not_of("M*-E") != std::string::npos) {
      throw InputError(source_field(source, "hybrid_override_pattern"), it->dump().substr(0, 80),
                       fmt::format("a string of 1 to {} block kinds: M (Mamba-2), * (attention), - (MLP), E (MoE)", kMaxCount));
    }
    pattern = it->get<std::string>();
    has_pattern = true;
  }
  for (const char* key : {"layers_block_type", "layer_types"}) {
    used.insert(key);
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_array() || it->empty() || it->size() > static_cast<std::size_t>(kMaxCount)) {
      throw InputError(source_field(source, key), it->dump().substr(0, 80), fmt::format("a list of 1 to {} block kinds", kMaxCount));
    }
    std::string kinds;
    for (std::size_t i = 0; i < it->size(); ++i) {
      const char c = block_char((*it)[i]);
      if (c == 0) {
        throw InputError(source_field(source, fmt::format("{}[{}]", key, i)), (*it)[i].dump().substr(0, 80),
                         "mamba (linear_attention), attention (full_attention), mlp or moe");
      }
      kinds += c;
    }
    if (has_list && kinds != listed) {
      throw InputError(source_field(source, key), it->dump().substr(0, 80), "the same blocks as layers_block_type");
    }
    listed = kinds;
    has_list = true;
  }
  if (has_pattern && has_list && pattern != listed) {
    throw InputError(source_field(source, "layers_block_type"), listed, fmt::format("the blocks of hybrid_override_pattern ({})", pattern));
  }
  if (!has_pattern && !has_list) {
    throw InputError(source_field(source, "hybrid_override_pattern"), "missing",
                     "the block kinds: hybrid_override_pattern (M * - E per block) or layers_block_type");
  }
  return has_pattern ? pattern : listed;
}

// A key with a legacy spelling NemotronHConfig.__post_init__ still takes (mamba_n_groups for
// n_groups, ...): either may be given; both must agree.
std::int64_t int_either(const json& j, const char* key, const char* legacy, const std::string& source, Keys& used,
                        std::int64_t fallback, std::int64_t max = kMaxDim) {
  used.insert(key);
  used.insert(legacy);
  const std::int64_t v = get_int(j, key, source, fallback, 1, max);
  const std::int64_t old = get_int(j, legacy, source, v, 1, max);
  if (j.contains(key) && !j[key].is_null() && old != v) {
    throw InputError(source_field(source, legacy), std::to_string(old), fmt::format("absent, or the value of {} ({})", key, v));
  }
  return old;
}

// The MoE blocks' sizes (NemotronHMoE, defaults NemotronHConfig's): n_routed_experts (or
// num_local_experts) experts of moe_intermediate_size, top num_experts_per_tok, one shared expert
// of moe_shared_expert_intermediate_size; moe_latent_size (latent projections around the
// experts) refused. n_shared_experts: transformers builds one shared expert whatever it says, so
// only 1 is read.
void read_moe(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  for (const char* k : {"num_experts_per_tok", "moe_intermediate_size", "moe_shared_expert_intermediate_size", "n_shared_experts",
                        "moe_latent_size"}) {
    used.insert(k);
  }
  if (const auto it = j.find("moe_latent_size"); it != j.end() && !it->is_null()) {
    throw InputError(source_field(source, "moe_latent_size"), it->dump(),
                     "null (a latent size adds fc1_latent_proj and fc2_latent_proj and narrows the experts, which moemem "
                     "does not model)");
  }
  m.moe.num_routed_experts = int_either(j, "n_routed_experts", "num_local_experts", source, used, 8, kMaxCount);
  m.moe.top_k = get_int(j, "num_experts_per_tok", source, 2);
  m.moe.expert_ffn = get_int(j, "moe_intermediate_size", source, 7688);
  m.moe.shared_ffn = get_int(j, "moe_shared_expert_intermediate_size", source, 7688);
  if (get_int(j, "n_shared_experts", source, 1, 0) != 1) {
    throw InputError(source_field(source, "n_shared_experts"), j["n_shared_experts"].dump(),
                     "1 (NemotronHMoE builds one shared expert of moe_shared_expert_intermediate_size)");
  }
  m.moe.num_shared_experts = 1;
  m.moe.router_bias = true;  // NemotronHTopkRouter's e_score_correction_bias, always there
}

}  // namespace

// Keys that change no tensor: Mamba-2's kernel and time-step settings and activations (expand
// included: the inner width is mamba_num_heads x mamba_head_dim), norms' epsilons, init and
// residual options, and the MTP block kinds, which need num_nextn_predict_layers (refused when
// set: config_keys.cpp).
void parse_nemotron_h(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  for (const char* k : {"hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                        "attention_head_dim", "intermediate_size", "hybrid_override_pattern", "mamba_num_heads", "mamba_head_dim",
                        "ssm_state_size", "use_conv_bias", "mamba_conv_bias", "expand", "mamba_expand",
                        "chunk_size", "mamba_chunk_size", "use_mamba_kernels", "mamba_hidden_act", "mlp_hidden_act", "time_step_min",
                        "time_step_max", "time_step_floor", "time_step_limit", "mamba_dt_min", "mamba_dt_max", "mamba_dt_limit",
                        "mamba_dt_init_floor", "mamba_ssm_cache_dtype", "residual_in_fp32", "rescale_prenorm_residual",
                        "hidden_dropout", "layer_norm_epsilon", "norm_eps", "num_logits_to_keep", "moe_shared_expert_overlap",
                        "mtp_hybrid_override_pattern", "mtp_layers_block_type"}) {
    used.insert(k);
  }
  m.naming = NamingStyle::nemotron_h;
  m.attention = AttentionKind::gqa;
  const std::string pattern = read_pattern(j, source, used);
  m.num_layers = static_cast<std::int64_t>(pattern.size());
  // num_hidden_layers is deprecated (the count is the pattern's); one that disagrees is refused.
  if (get_int(j, "num_hidden_layers", source, m.num_layers, 1, kMaxCount) != m.num_layers) {
    throw InputError(source_field(source, "num_hidden_layers"), j["num_hidden_layers"].dump(),
                     fmt::format("absent, or the number of blocks in the pattern ({})", m.num_layers));
  }
  m.hidden = get_int(j, "hidden_size", source);
  m.vocab = get_int(j, "vocab_size", source);
  m.num_heads = get_int(j, "num_attention_heads", source);
  m.num_kv_heads = get_int(j, "num_key_value_heads", source, m.num_heads);
  if (m.num_heads % m.num_kv_heads != 0) {
    throw InputError(source_field(source, "num_key_value_heads"), std::to_string(m.num_kv_heads),
                     fmt::format("a divisor of num_attention_heads ({})", m.num_heads));
  }
  // head_dim (NemotronHConfig's default 128), or attention_head_dim in the first releases' configs.
  m.head_dim = int_either(j, "head_dim", "attention_head_dim", source, used, 128);
  m.dense_ffn = get_int(j, "intermediate_size", source, 21504);
  m.gated_mlp = false;  // NemotronHMLP: up_proj -> relu2 -> down_proj
  // Biases no released Nemotron-H has, refused rather than built: attention_bias (transformers'
  // NemotronHAttention builds none whatever it says; a config setting it means another code), mlp_bias (the
  // MLPs' and shared experts' up/down and the latent projections), use_bias (Mamba-2's in_proj and
  // out_proj), mamba_proj_bias (not read by transformers' mixer).
  for (const char* k : {"attention_bias", "mlp_bias", "use_bias", "mamba_proj_bias"}) {
    used.insert(k);
    if (get_bool(j, k, source, false)) {
      throw InputError(source_field(source, k), "true", "false (Nemotron-H's projection biases are not modelled)");
    }
  }
  // NemotronHConfig's defaults, and the legacy spellings __post_init__ maps (mamba_n_groups, mamba_d_conv).
  m.mamba.num_heads = get_int(j, "mamba_num_heads", source, 128);
  m.mamba.head_dim = get_int(j, "mamba_head_dim", source, 64);
  m.mamba.state_size = get_int(j, "ssm_state_size", source, 128);
  m.mamba.n_groups = int_either(j, "n_groups", "mamba_n_groups", source, used, 8);
  m.mamba.conv_kernel = int_either(j, "conv_kernel", "mamba_d_conv", source, used, 4, 1024);
  m.mamba.conv_bias = get_bool(j, "use_conv_bias", source, true);
  m.mamba.chunk_size = int_either(j, "chunk_size", "mamba_chunk_size", source, used, 128);
  if (get_bool(j, "mamba_conv_bias", source, m.mamba.conv_bias) != m.mamba.conv_bias) {
    throw InputError(source_field(source, "mamba_conv_bias"), j["mamba_conv_bias"].dump(), "absent, or the value of use_conv_bias");
  }
  if (m.mamba.num_heads % m.mamba.n_groups != 0) {
    throw InputError(source_field(source, "n_groups"), std::to_string(m.mamba.n_groups),
                     fmt::format("a divisor of mamba_num_heads ({}): each group's B and C serve whole heads", m.mamba.num_heads));
  }
  m.layer_mixers.assign(pattern.size(), MixerKind::none);
  m.layer_kinds.assign(pattern.size(), LayerKind::dense);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == 'M') m.layer_mixers[i] = MixerKind::mamba2;
    if (pattern[i] == '*') m.layer_mixers[i] = MixerKind::attention;
    if (pattern[i] == 'E') m.layer_kinds[i] = LayerKind::moe;
  }
  // The MoE keys add nothing without E blocks (the dense models' configs carry the defaults).
  for (const char* k : {"n_routed_experts", "num_local_experts"}) used.insert(k);
  if (pattern.find('E') != std::string::npos) read_moe(j, source, m, used);
  else {
    for (const char* k : {"num_experts_per_tok", "moe_intermediate_size", "moe_shared_expert_intermediate_size", "n_shared_experts",
                          "moe_latent_size"}) {
      used.insert(k);
    }
  }
}

}  // namespace moemem::config_detail
