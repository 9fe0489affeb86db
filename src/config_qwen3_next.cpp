// The reader for Qwen3-Next (model_type qwen3_next: Qwen3-Next-80B-A3B, Qwen3-Coder-Next), a
// hybrid of Gated DeltaNet linear-attention layers and gated softmax-attention layers, every
// layer with Qwen2-MoE's sparse block. Source: transformers models/qwen3_next
// (configuration_qwen3_next.py Qwen3NextConfig, modular_qwen3_next.py Qwen3NextAttention,
// Qwen3NextGatedDeltaNet, Qwen3NextDecoderLayer). src/config.cpp dispatches.
#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

// layer_types when given ("linear_attention" or "full_attention" per layer); otherwise
// Qwen3NextConfig.__post_init__'s pattern (Qwen3_5MoeTextConfig's too): layer i is full attention
// when (i + 1) is a multiple of full_attention_interval (default 4), linear attention otherwise.
// Shared with config_qwen3_5.cpp.
void parse_linear_mixers(const json& j, const std::string& source, ModelSpec& m) {
  // The Gated DeltaNet's sizes; Qwen3NextConfig's and Qwen3_5MoeTextConfig's defaults are
  // Qwen3-Next-80B-A3B's.
  m.gdn.num_k_heads = get_int(j, "linear_num_key_heads", source, 16);
  m.gdn.num_v_heads = get_int(j, "linear_num_value_heads", source, 32);
  m.gdn.k_head_dim = get_int(j, "linear_key_head_dim", source, 128);
  m.gdn.v_head_dim = get_int(j, "linear_value_head_dim", source, 128);
  m.gdn.conv_kernel = get_int(j, "linear_conv_kernel_dim", source, 4, 1, 1024);
  if (m.gdn.num_v_heads % m.gdn.num_k_heads != 0) {  // the value heads share the q/k heads in groups
    throw InputError(source_field(source, "linear_num_value_heads"), std::to_string(m.gdn.num_v_heads),
                     fmt::format("a multiple of linear_num_key_heads ({})", m.gdn.num_k_heads));
  }
  const auto n = static_cast<std::size_t>(m.num_layers);
  m.layer_mixers.assign(n, MixerKind::gated_delta_net);
  if (const auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->size() != n) {
      throw InputError(source_field(source, "layer_types"), it->dump().substr(0, 80),
                       fmt::format("a list of {} entries (num_hidden_layers)", n));
    }
    for (std::size_t i = 0; i < n; ++i) {
      const auto& kind = (*it)[i];
      if (kind == "full_attention") m.layer_mixers[i] = MixerKind::attention;
      else if (kind != "linear_attention") {
        throw InputError(source_field(source, fmt::format("layer_types[{}]", i)), kind.dump(),
                         "linear_attention or full_attention (Qwen3NextDecoderLayer's two kinds)");
      }
    }
    return;
  }
  const std::int64_t interval = get_int(j, "full_attention_interval", source, 4);
  for (std::int64_t i = 0; i < m.num_layers; ++i) {
    if ((i + 1) % interval == 0) m.layer_mixers[static_cast<std::size_t>(i)] = MixerKind::attention;
  }
}

// Softmax layers: Qwen3-MoE's attention with per-head q/k RMSNorm whose q_proj is twice as wide
// (each head's query, then its output gate: attn_output * sigmoid(gate) before o_proj).
// attention_bias would put biases on all four projections (q_proj's of 2 x heads x head_dim):
// refused, as no released config sets it. Linear layers: Gated DeltaNet of linear_num_key_heads
// query/key heads of linear_key_head_dim and linear_num_value_heads value heads of
// linear_value_head_dim (a multiple of the key heads: fix_query_key_value_ordering groups the
// value heads by key head), conv1d of linear_conv_kernel_dim. MLP: Qwen2-MoE's sparse block
// (router, experts of moe_intermediate_size, a shared expert of shared_expert_intermediate_size
// with its sigmoid shared_expert_gate) unless the layer is in mlp_only_layers or off the
// decoder_sparse_step, then a dense MLP of intermediate_size. The released Instruct and Thinking
// checkpoints also ship a multi-token-prediction block (mtp.*: the one Qwen3.5 describes with
// mtp_num_hidden_layers, vLLM qwen3_next_mtp.py) that transformers drops on load
// (_keys_to_ignore_on_load_unexpected). No key of Qwen3NextConfig says whether a checkpoint has
// it (Qwen3-Coder-Next, the same config, does not): mtp_num_hidden_layers (0 or 1) or --mtp says
// so; absent, none, as transformers builds the model.
void parse_qwen3_next(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  parse_gqa_common(j, source, m, used);
  // Qwen3NextConfig's own defaults where a key is absent: 2 key/value heads and head_dim 256
  // (not one key/value head per query head, nor hidden / heads).
  if (!j.contains("num_key_value_heads")) m.num_kv_heads = 2;
  if (!j.contains("head_dim") || j.at("head_dim").is_null()) m.head_dim = 256;
  if (m.num_heads % m.num_kv_heads != 0) {
    throw InputError(source_field(source, "num_key_value_heads"), std::to_string(m.num_kv_heads),
                     fmt::format("a divisor of num_attention_heads ({})", m.num_heads));
  }
  for (const char* k : {"attention_bias", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                        "decoder_sparse_step", "mlp_only_layers", "shared_expert_intermediate_size", "layer_types",
                        "full_attention_interval", "linear_num_key_heads", "linear_num_value_heads",
                        "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
                        "mtp_num_hidden_layers"}) {
    used.insert(k);
  }
  if (get_bool(j, "attention_bias", source, false)) {
    throw InputError(source_field(source, "attention_bias"), "true",
                     "false (biases on Qwen3-Next's gated q_proj and the other projections are not modelled)");
  }
  m.naming = NamingStyle::qwen_moe;
  m.qk_norm = true;
  m.attn_output_gate = true;
  parse_linear_mixers(j, source, m);
  m.moe.num_routed_experts = get_int(j, "num_experts", source, 512, 1, kMaxCount);
  m.moe.top_k = get_int(j, "num_experts_per_tok", source, 10);
  m.moe.expert_ffn = get_int(j, "moe_intermediate_size", source, 512);
  m.moe.shared_ffn = get_int(j, "shared_expert_intermediate_size", source, 512, 0);
  m.moe.shared_expert_gate = m.moe.shared_ffn > 0;
  m.moe.num_shared_experts = m.moe.shared_ffn > 0 ? 1 : 0;
  set_qwen_moe_layers(j, source, m);
  m.mtp_layers = get_int(j, "mtp_num_hidden_layers", source, 0, 0, 1);
  m.mtp_stores_embedding_and_head = false;
}

}  // namespace moemem::config_detail
