// The parallel layout: tensor (tp), pipeline (pp), data (dp), context (cp), expert (ep) and
// expert-tensor (etp) parallel degrees, sequence parallelism, and the assignment of decoder
// layers to pipeline stages. resolve_layout() checks every rule against the model and derives
// the expert data-parallel degree edp = tp*cp*dp / (ep*etp) and the world size.
#pragma once

#include <cstdint>
#include <vector>

#include "moemem/model.hpp"

namespace moemem {

// Largest accepted degree and world size: far beyond any cluster, far below overflow.
inline constexpr std::int64_t kMaxDegree = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxWorld = std::int64_t{1} << 24;

struct ParallelConfig {
  std::int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, etp = 1;
  bool sp = false;  // sequence parallelism (splits the sequence of non-attention parts over tp)
  std::vector<std::int64_t> layers_per_stage;  // empty: default split
};

struct StageRange {
  std::int64_t first_layer = 0;  // first decoder layer of the stage
  std::int64_t num_layers = 0;   // may be 0 (a stage with only the head, say)
  [[nodiscard]] std::int64_t last_layer() const { return first_layer + num_layers - 1; }
};

struct Layout {
  ParallelConfig config;
  std::int64_t edp = 1;         // expert data-parallel degree
  std::int64_t world_size = 1;  // tp * pp * cp * dp
  std::vector<StageRange> stages;
};

// Default pipeline split: ceil(L/pp) layers per stage, the last stage taking what remains.
[[nodiscard]] std::vector<std::int64_t> default_layer_split(std::int64_t num_layers, std::int64_t pp);

// Validates `p` against `m` and returns the resolved layout. Throws InputError naming the flag
// and the rule broken.
[[nodiscard]] Layout resolve_layout(const ModelSpec& m, const ParallelConfig& p);

}  // namespace moemem
