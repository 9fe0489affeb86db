// Limits on JSON read from users (config.json files, validation records), checked on the text
// before it is parsed: nlohmann's dump() and copies recurse once per nesting level, so a deeply
// nested document would overflow the stack after parsing; a huge one would only waste memory.
// Real inputs are far inside both limits.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace moemem {

struct JsonLimits {
  std::size_t max_bytes = 0;  // the text's length
  int max_depth = 0;          // objects and arrays inside each other
};

// A Hugging Face config.json: a few KB and 4 levels deep in practice.
inline constexpr JsonLimits kConfigJsonLimits{std::size_t{16} << 20, 32};
// One line of a validation set (a measurement record: about 3 KB, 4 levels deep).
inline constexpr JsonLimits kRecordJsonLimits{std::size_t{1} << 20, 32};

// Throws InputError naming `field` when `text` is longer or nested deeper than `limits` allow.
void check_json_limits(std::string_view text, const JsonLimits& limits, const std::string& field);

}  // namespace moemem
