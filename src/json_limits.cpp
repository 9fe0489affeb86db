#include "moemem/json_limits.hpp"

#include <fmt/format.h>

#include "moemem/errors.hpp"

namespace moemem {

void check_json_limits(std::string_view text, const JsonLimits& limits, const std::string& field) {
  if (text.size() > limits.max_bytes) {
    throw InputError(field, fmt::format("{} bytes", text.size()),
                     fmt::format("JSON of at most {} bytes (the input size limit)", limits.max_bytes));
  }
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > limits.max_depth) {
        throw InputError(field, fmt::format("objects and arrays nested more than {} deep (at byte {})", limits.max_depth, i + 1),
                         fmt::format("JSON nested at most {} levels deep (the nesting depth limit)", limits.max_depth));
      }
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
}

}  // namespace moemem
