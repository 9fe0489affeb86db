// The bundled presets (data/models/*.json) by the names users type: the preset's own name in any
// case, or the Hugging Face repository its config.json comes from (data/models/SOURCES.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moemem {

struct PresetSource {
  std::string_view preset;  // data/models/<preset>.json
  std::string_view repo;    // the Hugging Face repository of its config.json
};
// Every preset with its repository, in preset-name order.
[[nodiscard]] const std::vector<PresetSource>& preset_sources();

// The preset a name designates: a preset name in any case ("DeepSeek-V3"), or a repository id in
// any case ("deepseek-ai/DeepSeek-V3"); nothing otherwise.
[[nodiscard]] std::optional<std::string> match_preset(std::string_view name);

// For a name no preset matches: the preset whose repository id (or name) begins it, up to a '-'
// ("Qwen/Qwen3-235B-A22B-Instruct-2507" -> qwen3-235b-a22b), the longest such; nothing otherwise.
// Only a hint for an error message: a variant's config can differ (vocabulary, context length).
[[nodiscard]] std::optional<std::string> nearest_preset(std::string_view name);

}  // namespace moemem
