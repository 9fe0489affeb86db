// ModelSpec's derived counts and its consistency checks (a model from any source: a config.json,
// a preset, a Megatron script's architecture flags or a validation record).
#include "moemem/model.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "moemem/errors.hpp"

namespace moemem {

std::int64_t ModelSpec::num_moe_layers() const {
  return std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::moe);
}

bool ModelSpec::is_hybrid() const {
  return std::any_of(layer_mixers.begin(), layer_mixers.end(), [](MixerKind k) { return k != MixerKind::attention; });
}

namespace {

// Per-layer lists (MiMo-V2-Flash's sliding-window flags, Nemotron-NAS's blocks) are indexed by
// layer: one entry per layer, or none; their sizes are bounded like the model-wide ones.
void validate_per_layer(const ModelSpec& m) {
  constexpr std::int64_t kMaxSize = std::int64_t{1} << 31;
  auto check = [&](std::int64_t v, const char* field, std::int64_t max) {
    if (v <= 0 || v > max) {
      throw InputError(fmt::format("model {}: {}", m.name, field), std::to_string(v), fmt::format("an integer from 1 to {}", max));
    }
  };
  for (const auto& [n, field] : {std::pair{m.swa_layers.size(), "sliding-window layer flags"},
                                 std::pair{m.nas_blocks.size(), "NAS blocks"}}) {
    if (n != 0 && static_cast<std::int64_t>(n) != m.num_layers) {
      throw InputError(fmt::format("model {}: {}", m.name, field), std::to_string(n),
                       fmt::format("none, or one per layer ({})", m.num_layers));
    }
  }
  if (m.has_swa_dims()) {
    check(m.swa.heads, "swa_num_attention_heads", kMaxSize);
    check(m.swa.kv_heads, "swa_num_key_value_heads", m.swa.heads);
    check(m.swa.head_dim, "swa_head_dim", kMaxSize);
    check(m.swa.v_head_dim, "swa_v_head_dim", kMaxSize);
  }
  if (m.v_head_dim != 0) check(m.v_head_dim, "v_head_dim", kMaxSize);
  for (const auto& b : m.nas_blocks) {
    if (b.attention == NasPart::full) check(b.kv_heads, "block key/value heads", m.num_heads);
    if (b.ffn == NasPart::full) check(b.ffn_size, "block FFN size", kMaxSize);
  }
}

}  // namespace

void validate_model(const ModelSpec& m) {
  auto positive = [&](std::int64_t v, const char* field) {
    if (v <= 0) throw InputError(fmt::format("model {}: {}", m.name, field), std::to_string(v), "a positive integer");
  };
  positive(m.hidden, "hidden_size");
  positive(m.vocab, "vocab_size");
  positive(m.num_layers, "num_hidden_layers");
  positive(m.num_heads, "num_attention_heads");
  if (static_cast<std::int64_t>(m.layer_kinds.size()) != m.num_layers) {
    throw InputError(fmt::format("model {}: layer kinds", m.name), std::to_string(m.layer_kinds.size()),
                     fmt::format("one per layer ({})", m.num_layers));
  }
  if (m.is_moe()) {
    positive(m.moe.top_k, "num_experts_per_tok");
    positive(m.moe.expert_ffn, "moe_intermediate_size");
    if (m.moe.top_k > m.moe.num_routed_experts) {
      throw InputError(fmt::format("model {}: num_experts_per_tok", m.name), std::to_string(m.moe.top_k),
                       fmt::format("at most the number of routed experts ({})", m.moe.num_routed_experts));
    }
  }
  // Bounds every reader applies, checked again for any source (a validation record's model file,
  // a library caller): 2^40 layers was a bad_alloc, 3,000,000 took 20 s and 2.4 GB.
  auto within = [&](std::int64_t v, const char* field, std::int64_t max) {
    if (v < 0 || v > max) {
      throw InputError(fmt::format("model {}: {}", m.name, field), std::to_string(v), fmt::format("an integer from 0 to {}", max));
    }
  };
  constexpr std::int64_t kMaxSize = std::int64_t{1} << 31, kMaxCount = std::int64_t{1} << 16;
  within(m.num_layers, "num_hidden_layers", kMaxCount);
  within(m.moe.num_routed_experts, "n_routed_experts", kMaxCount);
  within(m.mtp_layers, "mtp layers", 16);
  for (const auto& [v, field] : {std::pair{m.hidden, "hidden_size"}, std::pair{m.vocab, "vocab_size"},
                                 std::pair{m.num_heads, "num_attention_heads"}, std::pair{m.head_dim, "head_dim"},
                                 std::pair{m.dense_ffn, "intermediate_size"}, std::pair{m.moe.expert_ffn, "moe_intermediate_size"},
                                 std::pair{m.moe.shared_ffn, "shared expert intermediate size"},
                                 std::pair{m.moe.num_shared_experts, "n_shared_experts"}, std::pair{m.moe.top_k, "num_experts_per_tok"},
                                 std::pair{m.mla.q_lora_rank, "q_lora_rank"}, std::pair{m.mla.kv_lora_rank, "kv_lora_rank"},
                                 std::pair{m.mla.qk_nope_head_dim, "qk_nope_head_dim"},
                                 std::pair{m.mla.qk_rope_head_dim, "qk_rope_head_dim"}, std::pair{m.mla.v_head_dim, "v_head_dim"},
                                 std::pair{m.learned_positions, "learned position rows"}}) {
    within(v, field, kMaxSize);
  }
  within(m.dsa.index_n_heads, "index_n_heads", kMaxSize);
  within(m.dsa.index_head_dim, "index_head_dim", kMaxSize);
  within(m.dsa.index_topk, "index_topk", kMaxSize);
  // The indexer reads MLA's compressed query (wq_b: q_lora_rank -> heads x index_head_dim).
  if (m.has_indexer() && (m.attention != AttentionKind::mla || m.mla.q_lora_rank <= 0)) {
    throw InputError(fmt::format("model {}: index_n_heads", m.name), std::to_string(m.dsa.index_n_heads),
                     "0 unless the model has MLA with a compressed query (q_lora_rank)");
  }
  if (m.has_indexer()) positive(m.dsa.index_head_dim, "index_head_dim");
  // Key/value heads: at most the query heads (GQA shares each among several query heads).
  within(m.num_kv_heads, "num_key_value_heads", m.num_heads);
  if (m.attention == AttentionKind::gqa) positive(m.num_kv_heads, "num_key_value_heads");
  if (!m.layer_mixers.empty() && static_cast<std::int64_t>(m.layer_mixers.size()) != m.num_layers) {
    throw InputError(fmt::format("model {}: layer mixers", m.name), std::to_string(m.layer_mixers.size()),
                     fmt::format("none, or one per layer ({})", m.num_layers));
  }
  const auto has_mixer = [&](MixerKind k) { return std::find(m.layer_mixers.begin(), m.layer_mixers.end(), k) != m.layer_mixers.end(); };
  if (has_mixer(MixerKind::gated_delta_net)) {
    for (const auto& [v, field] : {std::pair{m.gdn.num_k_heads, "linear_num_key_heads"}, std::pair{m.gdn.num_v_heads, "linear_num_value_heads"},
                                   std::pair{m.gdn.k_head_dim, "linear_key_head_dim"}, std::pair{m.gdn.v_head_dim, "linear_value_head_dim"},
                                   std::pair{m.gdn.conv_kernel, "linear_conv_kernel_dim"}}) {
      within(v, field, kMaxSize);
      positive(v, field);
    }
  }
  if (has_mixer(MixerKind::mamba2)) {
    for (const auto& [v, field] : {std::pair{m.mamba.num_heads, "mamba_num_heads"}, std::pair{m.mamba.head_dim, "mamba_head_dim"},
                                   std::pair{m.mamba.n_groups, "n_groups"}, std::pair{m.mamba.state_size, "ssm_state_size"},
                                   std::pair{m.mamba.conv_kernel, "conv_kernel"}}) {
      within(v, field, kMaxSize);
      positive(v, field);
    }
  }
  // Nemotron-H's blocks (src/inventory_nemotron_h.cpp) are Mamba-2, attention, MLP or MoE, with no
  // MTP depth; Mamba-2 and mixer-less blocks exist only in them.
  const bool nemotron = m.naming == NamingStyle::nemotron_h;
  if (nemotron ? has_mixer(MixerKind::gated_delta_net) || m.mtp_layers != 0 : has_mixer(MixerKind::mamba2) || has_mixer(MixerKind::none)) {
    throw InputError(fmt::format("model {}: layer mixers", m.name), nemotron ? "gated DeltaNet or MTP layers" : "Mamba-2 or mixer-less blocks",
                     "Mamba-2, attention, MLP and MoE blocks without MTP for Nemotron-H's naming, and only there");
  }
  validate_per_layer(m);
  if (m.mtp_layers < 0) {
    throw InputError(fmt::format("model {}: mtp layers", m.name), std::to_string(m.mtp_layers), "0 or more");
  }
  // Qwen3.5's and Qwen3.5-MoE's MTP block (Builder::qwen3_5_mtp) holds one layer; more would share its fc and norms.
  if (m.naming == NamingStyle::qwen3_5 && m.mtp_layers > 1) {
    throw InputError(fmt::format("model {}: mtp layers", m.name), std::to_string(m.mtp_layers), "0 or 1 for Qwen3.5 and Qwen3.5-MoE");
  }
}

}  // namespace moemem
