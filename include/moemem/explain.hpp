// Every byte of one pipeline stage at its peak, itemised: weights by tensor role, gradients and
// optimizer states by ZeRO group, activations by saved tensor (times layers and in-flight
// micro-batches), transients, buffers, fragmentation and runtime. The items add up exactly to
// the stage's total in analyze().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moemem/analyze.hpp"

namespace moemem {

struct ExplainItem {
  std::string category;  // weights, gradients, optimizer, activations, buffers, fragmentation, runtime
  std::string module;
  std::string item;    // tensor (role) or saved-tensor name
  std::string detail;  // how the bytes follow: shape or rule, dtype, multipliers
  Bytes bytes;
};

// Items of pipeline rank `stage` (0 <= stage < pp). Throws InputError for a stage out of range.
[[nodiscard]] std::vector<ExplainItem> explain_stage(const ModelSpec& m, const Inventory& inv, const Profile& profile,
                                                     const Layout& layout, const TrainingConfig& t, std::int64_t stage);

}  // namespace moemem
