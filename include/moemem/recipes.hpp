// Published training recipes: named sets of settings that fill in what a request leaves unset,
// each setting a technique of the report it comes from (listed, with its section, among the
// analysis's assumptions). --recipe-off turns single techniques off to see what each is worth.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moemem {

struct TrainingRequest;
struct TrainingConfig;

enum class Recipe : std::uint8_t { deepseek_v3, deepseek_v2 };
[[nodiscard]] Recipe parse_recipe(std::string_view text, std::string_view field);  // deepseek-v3|deepseek-v2
[[nodiscard]] std::string_view name_of(Recipe r);

// The memory techniques a recipe can carry, one bit each.
enum RecipeTechnique : std::uint16_t {
  kTechRecomputeRmsnorm = 1 << 0,     // rmsnorm-recompute
  kTechRecomputeMlaUp = 1 << 1,       // mla-up-recompute
  kTechSwigluRecompute = 1 << 2,      // fp8-swiglu-input: cached in FP8, output recomputed
  kTechE5m6AttentionOutput = 1 << 3,  // e5m6-attention-output
  kTechFp8Dispatch = 1 << 4,          // fp8-dispatch
  kTechNodeLimitedDispatch = 1 << 5,  // node-limited-dispatch
  kTechBf16Moments = 1 << 6,          // bf16-moments
  kTechEmaOnCpu = 1 << 7,             // ema-on-cpu
  kTechOnlineFp8Weights = 1 << 8,     // online-fp8-weights
  kTechFp8Training = 1 << 9,          // fp8 (blockwise GEMMs and FP8-cached linear inputs)
};
inline constexpr int kTechniqueCount = 10;
[[nodiscard]] std::string_view name_of(RecipeTechnique t);
// A comma-separated list of technique names (for --recipe-off); `field` names the flag.
[[nodiscard]] std::uint16_t parse_techniques(std::string_view text, std::string_view field);
// The techniques a recipe carries.
[[nodiscard]] std::uint16_t techniques_of(Recipe r);
// Technique bits as a comma-separated list of their names.
[[nodiscard]] std::string techniques_text(std::uint16_t techniques);

// Fills the settings `r` leaves unset with the recipe's (settings already given take precedence),
// leaving out the techniques in r.recipe_off.
void apply_recipe(Recipe recipe, TrainingRequest& r);
// The recipe's settings that have no request field (kernels and formats of DeepSeek's framework).
void apply_recipe_numerics(Recipe recipe, std::uint16_t off, TrainingConfig& t);
// One line per technique in effect, with the report section it comes from.
[[nodiscard]] std::vector<std::string> recipe_assumptions(Recipe recipe, const TrainingConfig& t);

}  // namespace moemem
