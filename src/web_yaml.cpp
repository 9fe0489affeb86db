// The web build's stand-in for src/megatron_yaml.cpp (web/CMakeLists.txt): yaml-cpp is a
// compiled library Debian ships for the host only, and the page reads no launch scripts. Text
// without a top-level MODEL_ARGS: is no recipe, as there; a recipe is refused by name.
#include <fmt/format.h>

#include "megatron_internal.hpp"
#include "moemem/accelerate.hpp"
#include "moemem/errors.hpp"

namespace moemem::detail {

namespace {
bool has_model_args(std::string_view text) {
  return text.substr(0, 11) == "MODEL_ARGS:" || text.find("\nMODEL_ARGS:") != std::string_view::npos;
}
}  // namespace

std::optional<std::vector<RecipeArg>> modelzoo_recipe(std::string_view text, const std::string& source) {
  if (!has_model_args(text)) return std::nullopt;
  throw InputError(source, "a ModelZoo YAML recipe", "a launch script (the web build reads no YAML; the CLI does)");
}

std::optional<std::string> modelzoo_yaml_args(std::string_view text, const std::string& source) {
  static_cast<void>(modelzoo_recipe(text, source));  // nullopt, or the refusal of a recipe
  return std::nullopt;
}

}  // namespace moemem::detail

namespace moemem {

// accelerate's YAML config (src/accelerate_yaml.cpp): refused by name, as ModelZoo recipes are.
AccelerateConfig parse_accelerate_config(std::string_view, const std::string& source) {
  throw InputError("--accelerate-config", source, "no accelerate config in the web build (it reads no YAML; the CLI does)");
}
AccelerateConfig read_accelerate_config(const std::string& path) { return parse_accelerate_config({}, path); }

}  // namespace moemem
