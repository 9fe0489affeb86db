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
  if (m.mtp_layers < 0) {
    throw InputError(fmt::format("model {}: mtp layers", m.name), std::to_string(m.mtp_layers), "0 or more");
  }
}

}  // namespace moemem
