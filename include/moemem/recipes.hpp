// Published training recipes: named sets of settings that fill in what a request leaves unset.
#pragma once

#include <cstdint>
#include <string_view>

namespace moemem {

struct TrainingRequest;

enum class Recipe : std::uint8_t { deepseek_v3 };
[[nodiscard]] Recipe parse_recipe(std::string_view text, std::string_view field);  // deepseek-v3
[[nodiscard]] std::string_view name_of(Recipe r);

// Fills the settings `r` leaves unset with the recipe's (settings already given take precedence).
void apply_recipe(Recipe recipe, TrainingRequest& r);

}  // namespace moemem
