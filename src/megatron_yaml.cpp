// NVIDIA Megatron-MoE-ModelZoo's YAML recipes (model_configs/benchmarking/*.yaml): MODEL_ARGS
// maps each Megatron flag to its value; the ModelZoo's launcher turns true into a bare switch and
// leaves false out (sbatch_benchmarking.sh, its yq query).
#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include "megatron_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::detail {

std::optional<std::vector<RecipeArg>> modelzoo_recipe(std::string_view text, const std::string& source) {
  const bool has_args = text.substr(0, 11) == "MODEL_ARGS:" || text.find("\nMODEL_ARGS:") != std::string_view::npos;
  if (!has_args) return std::nullopt;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    throw InputError(source, e.what(), "a YAML recipe yaml-cpp can read");
  }
  if (!root.IsMap() || !root["MODEL_ARGS"] || !root["MODEL_ARGS"].IsMap()) {
    throw InputError(fmt::format("{}: MODEL_ARGS", source), "not a mapping", "a mapping of Megatron flags to values");
  }
  std::vector<RecipeArg> out;
  for (const auto& kv : root["MODEL_ARGS"]) {
    const std::string flag = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (!v.IsScalar() && !v.IsNull()) {
      throw InputError(fmt::format("{}: MODEL_ARGS {}", source, flag), "a list or mapping", "a scalar value");
    }
    const std::string value = v.IsNull() ? std::string() : v.Scalar();
    if (value == "false") continue;
    out.push_back(RecipeArg{flag, value == "true" ? std::string() : value, kv.first.Mark().line + 1});
  }
  return out;
}

std::optional<std::string> modelzoo_yaml_args(std::string_view text, const std::string& source) {
  const auto args = modelzoo_recipe(text, source);
  if (!args) return std::nullopt;
  std::string out;
  std::int64_t line = 1;
  for (const RecipeArg& a : *args) {
    for (; line < a.line; ++line) out += '\n';
    out += a.flag;
    if (!a.value.empty()) {
      out += " \"";
      for (const char c : a.value) {
        if (c == '"' || c == '\\' || c == '`') out += '\\';
        out += c;
      }
      out += '"';
    }
    out += ' ';
  }
  return out + '\n';
}

}  // namespace moemem::detail
