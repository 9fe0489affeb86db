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

}  // namespace moemem
