// The reader for NVIDIA's Nemotron-NAS models (model_type nemotron-nas, DeciLMForCausalLM:
// Llama-3.3-Nemotron-Super-49B, Llama-3.1-Nemotron-Ultra-253B, Llama-3.1-Nemotron-51B), Llama
// layers pruned per layer by neural architecture search. block_configs gives each layer its
// attention (n_heads_in_group query heads per key/value head; no_op: none, and no
// input_layernorm; replace_with_linear: one h x h self_attn.linear_attn) and its FFN (ffn_mult,
// or intermediate_size; no_op: none, and no post_attention_layernorm; replace_with_linear: one
// h x h mlp.linear_mlp). Sources: the checkpoints' remote code as ported in vLLM
// (model_executor/models/nemotron_nas.py DeciLMDecoderLayer, _ffn_mult_to_intermediate_size) and
// NeMo Automodel (components/models/nemotron_nas: DeciLMLinearAttention, DeciLMLinearMLP, Block).
// src/config.cpp dispatches; src/inventory.cpp spells the tensors.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include <fmt/format.h>

#include "config_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::config_detail {

using nlohmann::json;

namespace {

// Keys of a block's attention and ffn objects that add no tensor: the attention window and the
// sink-token switches (DeciLM's variable-window attention), read by no tensor shape.
const std::set<std::string, std::less<>> kNoTensorBlockKeys = {"window_length", "unshifted_sink",
                                                               "use_prefill_window_in_sink_attention"};

// DeciLM's _ffn_mult_to_intermediate_size: int(2 x ffn_mult x h / 3), rounded up to a multiple of
// 256, in double precision and the same order of operations as the Python.
std::int64_t ffn_size(double mult, std::int64_t hidden) {
  const auto size = static_cast<std::int64_t>(2 * mult * static_cast<double>(hidden) / 3);
  return size % 256 == 0 ? size : size + 256 - size % 256;
}

// no_op and replace_with_linear of one part: none, linear or full; both set is refused.
NasPart part_kind(const json& part, const std::string& field) {
  const bool no_op = get_bool(part, "no_op", field, false);
  const bool linear = get_bool(part, "replace_with_linear", field, false);
  if (no_op && linear) throw InputError(field + ".replace_with_linear", "true", "false when no_op is true");
  return no_op ? NasPart::none : linear ? NasPart::linear : NasPart::full;
}

// Keys moemem does not read are reported; sparsify and num_sink_tokens change the block in ways
// it does not model (sparse weights, extra sink tokens): refused when set.
void check_part_keys(const json& part, const std::string& field, const std::set<std::string, std::less<>>& read,
                     ModelSpec& m) {
  for (const auto& [key, value] : part.items()) {
    if (read.contains(key) || kNoTensorBlockKeys.contains(key)) continue;
    if ((key == "sparsify" || key == "num_sink_tokens") && !value.is_null()) {
      throw InputError(fmt::format("{}.{}", field, key), value.dump(), "null (not modelled)");
    }
    if (key == "sparsify" || key == "num_sink_tokens") continue;
    if (m.unrecognised_keys.size() < 100) m.unrecognised_keys.push_back(fmt::format("{}.{}", field, key));
  }
}

NasBlock read_block(const json& b, std::size_t i, const std::string& source, ModelSpec& m) {
  const std::string field = source_field(source, fmt::format("block_configs[{}]", i));
  if (!b.is_object() || !b.contains("attention") || !b.contains("ffn") || !b.at("attention").is_object() ||
      !b.at("ffn").is_object()) {
    throw InputError(field, b.dump().substr(0, 80), "an object with attention and ffn objects");
  }
  const json& a = b.at("attention");
  const json& f = b.at("ffn");
  NasBlock blk;
  blk.attention = part_kind(a, field + ".attention");
  blk.ffn = part_kind(f, field + ".ffn");
  check_part_keys(a, field + ".attention", {"no_op", "replace_with_linear", "n_heads_in_group"}, m);
  check_part_keys(f, field + ".ffn", {"no_op", "replace_with_linear", "ffn_mult", "intermediate_size"}, m);
  if (blk.attention == NasPart::full) {
    const std::int64_t group = get_int(a, "n_heads_in_group", field + ".attention");
    if (m.num_heads % group != 0) {
      throw InputError(field + ".attention.n_heads_in_group", std::to_string(group),
                       fmt::format("a divisor of num_attention_heads ({})", m.num_heads));
    }
    blk.kv_heads = m.num_heads / group;
  }
  if (blk.ffn == NasPart::full) {
    const auto mult = f.find("ffn_mult");
    if (mult != f.end() && !mult->is_null()) {
      if (!mult->is_number() || !std::isfinite(mult->get<double>()) || mult->get<double>() <= 0 ||
          mult->get<double>() > 1024) {
        throw InputError(field + ".ffn.ffn_mult", mult->dump(), "a number above 0 and at most 1024");
      }
      blk.ffn_size = ffn_size(mult->get<double>(), m.hidden);
      if (blk.ffn_size <= 0) throw InputError(field + ".ffn.ffn_mult", mult->dump(), "a multiplier giving at least one channel");
    } else {
      blk.ffn_size = get_int(f, "intermediate_size", field + ".ffn");  // vLLM's alternative spelling
    }
  }
  return blk;
}

}  // namespace

// Model-wide: Llama's embedding, final norm and (untied) head; q/k/v/o with biases when
// attention_bias, MLP biases when mlp_bias; head_dim from the key or hidden_size /
// num_attention_heads. num_key_value_heads and intermediate_size are null in the published
// configs (per layer instead) and, when set, are overridden by block_configs as in DeciLM.
void parse_nemotron_nas(const json& j, const std::string& source, ModelSpec& m, Keys& used) {
  for (const char* k : {"hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                        "head_dim", "intermediate_size", "block_configs", "attention_bias", "mlp_bias"}) {
    used.insert(k);
  }
  m.attention = AttentionKind::gqa;
  m.naming = NamingStyle::llama;
  parse_core_sizes(j, source, m);
  m.head_dim = get_int(j, "head_dim", source, m.hidden / m.num_heads);
  if (!j.contains("head_dim") && m.hidden % m.num_heads != 0) {
    throw InputError(source_field(source, "num_attention_heads"), std::to_string(m.num_heads),
                     fmt::format("a divisor of hidden_size ({}) when no head_dim is given", m.hidden));
  }
  m.qkv_bias = m.o_bias = get_bool(j, "attention_bias", source, false);
  m.mlp_bias = get_bool(j, "mlp_bias", source, false);
  const auto it = j.find("block_configs");
  if (it == j.end() || !it->is_array() || static_cast<std::int64_t>(it->size()) != m.num_layers) {
    throw InputError(source_field(source, "block_configs"), it == j.end() ? "missing" : it->dump().substr(0, 80),
                     fmt::format("a list of {} blocks, one per layer (num_hidden_layers)", m.num_layers));
  }
  for (std::size_t i = 0; i < it->size(); ++i) m.nas_blocks.push_back(read_block((*it)[i], i, source, m));
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::dense);
  // The distinct block shapes, in order of first appearance: the evaluator's layer classes. A
  // model with more than kNasShapes keeps none (count works; analysis refuses it).
  for (const NasBlock& b : m.nas_blocks) {
    const auto shape = static_cast<std::size_t>(std::find(m.nas_shapes.begin(), m.nas_shapes.end(), b) - m.nas_shapes.begin());
    if (shape == m.nas_shapes.size()) m.nas_shapes.push_back(b);
    m.nas_shape_of.push_back(static_cast<std::uint8_t>(std::min<std::size_t>(shape, 255)));
  }
  if (m.nas_shapes.size() > kNasShapes) m.nas_shape_of.clear();
}

}  // namespace moemem::config_detail
