// The parallel layout: tensor (tp), pipeline (pp), data (dp), context (cp), expert (ep) and
// expert-tensor (etp) parallel degrees, sequence parallelism, virtual pipeline stages and the
// schedule, and the cut of the model into pipeline chunks held by each rank (pipeline.hpp).
// check_layout() checks every rule against the model and derives the expert data-parallel
// degree edp = tp*cp*dp / (ep*etp), the world size and the chunks, or says which rule is broken;
// resolve_layout() is the same check, throwing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moemem/errors.hpp"
#include "moemem/model.hpp"
#include "moemem/pipeline.hpp"

namespace moemem {

// Largest accepted degree and world size: far beyond any cluster, far below overflow.
inline constexpr std::int64_t kMaxDegree = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxWorld = std::int64_t{1} << 24;

struct ParallelConfig {
  std::int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1;
  // Expert-tensor-parallel degree. Unset: the profile's default, which make_scenario puts in
  // (Megatron: tp for a model with routed experts, as megatron/training/arguments.py
  // validate_args sets expert_tensor_parallel_size when it is not given; torchtitan and the
  // reference analysis: 1). A config checked on its own (check_layout) takes 1; its Layout's
  // config always has it set.
  std::optional<std::int64_t> etp;
  [[nodiscard]] std::int64_t etp_degree() const { return etp.value_or(1); }
  bool sp = false;  // sequence parallelism (splits the sequence of non-attention parts over tp)
  std::int64_t vpp = 1;  // virtual pipeline stages (model chunks) per rank, interleaved schedule
  Schedule schedule = Schedule::one_f_one_b;
  // How decoder layers are cut into chunks; at most one of these is used, in this order:
  std::string pipeline_layout;                 // Megatron layout string, e.g. "Et|(tt|)*30mL"
  std::vector<std::int64_t> layers_per_stage;  // decoder layers of each chunk, model order
  std::optional<std::int64_t> first_stage_layers, last_stage_layers;  // Megatron's uneven split
  bool account_for_embedding = false, account_for_loss = false;      // count E / L as a layer
  // A recipe's default (DeepSeek's runs): the embedding, each MTP depth and the loss count as a
  // layer each, units spread as evenly as they go, the extra ones to the middle chunks.
  bool balance_units = false;
  // torchtitan's default (the torchtitan profile): the embedding and the norm + output count as a
  // layer each, every chunk gets floor(units / chunks), the first ones one more while units remain.
  bool titan_split = false;
  // otherwise the default split: ceil(L/chunks) per chunk, the last taking the rest.
};

struct StageRange {
  std::int64_t first_layer = 0;  // first decoder layer of the stage
  std::int64_t num_layers = 0;   // may be 0 (a stage with only the head, say)
  [[nodiscard]] std::int64_t last_layer() const { return first_layer + num_layers - 1; }
};

struct Layout {
  ParallelConfig config;        // as given, with the schedule (vpp > 1: interleaved) and etp resolved
  bool etp_defaulted = false;   // etp was not given: the profile's default (set by make_scenario)
  std::int64_t edp = 1;         // expert data-parallel degree
  std::int64_t world_size = 1;  // tp * pp * cp * dp
  std::vector<StageRange> stages;                      // per rank: first decoder layer, layer count
  std::vector<Chunk> chunks;                           // the model cut into chunks, model order
  std::vector<std::vector<std::int64_t>> rank_chunks;  // chunk indices each rank holds

  [[nodiscard]] std::int64_t chunk_of_layer(std::int64_t layer) const;
  [[nodiscard]] std::int64_t chunk_with_embedding() const;
  [[nodiscard]] std::int64_t chunk_with_loss() const;
  [[nodiscard]] std::int64_t chunk_of_mtp(std::int64_t depth) const;
  [[nodiscard]] bool rank_holds(std::int64_t rank, std::int64_t chunk) const;
};

// Default pipeline split: ceil(L/pp) layers per stage, the last stage taking what remains.
[[nodiscard]] std::vector<std::int64_t> default_layer_split(std::int64_t num_layers, std::int64_t pp);

// A resolved layout, or the first rule `p` breaks (the error resolve_layout would throw: the
// flag, the value and what would be accepted).
struct LayoutVerdict {
  std::optional<Layout> layout;     // set when every rule holds
  std::optional<InputError> error;  // set otherwise
  [[nodiscard]] bool valid() const { return layout.has_value(); }
};

// Checks `p` against `m` without throwing (InputError is not thrown, only returned); the rules
// and their order are resolve_layout's, which is this check.
[[nodiscard]] LayoutVerdict check_layout(const ModelSpec& m, const ParallelConfig& p);

// Validates `p` against `m` and returns the resolved layout. Throws InputError naming the flag
// and the rule broken (check_layout's error).
[[nodiscard]] Layout resolve_layout(const ModelSpec& m, const ParallelConfig& p);

}  // namespace moemem
