#include "moemem/tp_rules.hpp"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

namespace moemem {

std::optional<InputError> check_tp_divisibility(const ModelSpec& m, const ParallelConfig& p, const Profile& profile) {
  if (std::string_view(profile.name) != "megatron" || p.tp <= 1) return std::nullopt;
  const bool dense_layers = std::find(m.layer_kinds.begin(), m.layer_kinds.end(), LayerKind::dense) != m.layer_kinds.end() ||
                            (m.mtp_layers > 0 && !m.is_moe());
  if (dense_layers && m.dense_ffn % p.tp != 0) {
    return InputError("--tp", std::to_string(p.tp),
                      fmt::format("a divisor of the dense MLP's intermediate_size ({}): Megatron-Core splits fc1's output "
                                  "and fc2's input over tp and refuses sizes that do not divide",
                                  m.dense_ffn));
  }
  if (m.is_moe() && m.moe.shared_ffn > 0 && m.moe.shared_ffn % p.tp != 0) {
    return InputError("--tp", std::to_string(p.tp),
                      fmt::format("a divisor of the shared experts' intermediate size ({}): Megatron-Core splits the "
                                  "shared-expert MLP over tp and refuses sizes that do not divide",
                                  m.moe.shared_ffn));
  }
  return std::nullopt;
}

}  // namespace moemem
