// What the config reader checks about a config.json's keys beyond the ones each family reads
// (src/config.cpp): the supported model types with the nearest one to an unknown type, and keys
// that would add or reshape tensors moemem does not model for the type, which are refused by
// name rather than noted and dropped (issue 14: a DeepSeek-V3.2 config relabelled deepseek_v3
// lost its sparse-attention indexer, ~0.85 B parameters, with only a note).
#pragma once

#include <functional>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace moemem::config_keys {

using KeySet = std::set<std::string, std::less<>>;

// "deepseek, deepseek_v2, ..." for error messages.
[[nodiscard]] std::string supported_types();
[[nodiscard]] bool is_supported_type(std::string_view type);

// The supported model_type closest to `type` by edit distance (ties: the longer common
// prefix, then the first in the list).
[[nodiscard]] std::string nearest_type(std::string_view type);

// Throws the InputError for an unsupported model_type: the list, and the nearest type.
[[noreturn]] void refuse_type(const std::string& field, const std::string& type);

// Throws InputError naming the first key of `j` that adds or reshapes tensors, is set (not
// null, false, 0 or empty) and was not read by the family's parser (`used`); and for a
// `layer_types` entry other than full or sliding attention (linear attention, Mamba, ...).
void refuse_tensor_keys(const nlohmann::json& j, const KeySet& used, const std::string& source,
                        std::string_view model_type);

}  // namespace moemem::config_keys
