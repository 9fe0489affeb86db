// Names of the training enums, and their parsing from user text: one table per enum, used by the
// CLI, the Megatron script reader and the validation records alike. A name not in the table is
// an InputError naming the field, the text and what is accepted.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "moemem/errors.hpp"
#include "moemem/training.hpp"

namespace moemem {

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

// The value named `text` in `table`; else an InputError(field, text, accepted).
template <class E, std::size_t N>
[[nodiscard]] E parse_enum(std::string_view text, std::string_view field, const std::array<EnumName<E>, N>& table,
                           std::string_view accepted) {
  for (const auto& e : table) {
    if (e.name == text) return e.value;
  }
  throw InputError(std::string(field), std::string(text), std::string(accepted));
}

[[nodiscard]] Recompute parse_recompute(std::string_view text, std::string_view field);  // none|selective|full
[[nodiscard]] RecomputeMethod parse_recompute_method(std::string_view text, std::string_view field);  // uniform|block
[[nodiscard]] std::string_view name_of(RecomputeMethod m);
[[nodiscard]] OverheadPoint parse_overhead_point(std::string_view text, std::string_view field);  // none|low|high
[[nodiscard]] AttentionKernel parse_attention_kernel(std::string_view text, std::string_view field);  // flash|eager

// MoE token dispatchers: all-to-all, or DeepEP (whose communication buffer is resident).
enum class Dispatcher : std::uint8_t { alltoall, allgather, deepep };
[[nodiscard]] Dispatcher parse_dispatcher(std::string_view text, std::string_view field);  // alltoall|allgather|deepep

}  // namespace moemem
