// Reading a model description: Hugging Face config.json text, a file path, or a preset name
// (the presets in data/models/ are compiled into the library, so nothing is read at run time).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moemem/model.hpp"

namespace moemem {

struct PresetText {
  const char* name;
  const char* json;
};
// Generated at build time from data/models/*.json.
const std::vector<PresetText>& preset_texts();

std::vector<std::string> preset_names();

// Parses config.json text. `source` names the file or preset in error messages and becomes
// ModelSpec::name. Throws InputError on malformed JSON, missing or ill-typed keys, or an
// unsupported model_type.
ModelSpec parse_hf_config(std::string_view json_text, const std::string& source);

// A preset name (see preset_names()) or a path to a config.json.
ModelSpec load_model(const std::string& name_or_path);

// Applies the user's MTP depth (nullopt keeps the config's num_nextn_predict_layers).
void set_mtp_layers(ModelSpec& m, std::optional<std::int64_t> mtp);

}  // namespace moemem
