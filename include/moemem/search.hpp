// Layout search: every valid combination of tp, pp, vpp, cp, ep, etp, dp, schedule, optimizer
// sharding, recomputation, micro-batch and pipeline split for a number of GPUs, each evaluated
// on every stage with analyze(), then the ones that fit ranked by a simple, documented cost
// model (pipeline bubble, recomputation, inter-node TP/EP traffic).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moemem/errors.hpp"
#include "moemem/report.hpp"

namespace moemem {

struct RecomputeChoice {
  std::string name;  // none, full, or the selective module set ("layernorm,mla_up_proj")
  Recompute mode = Recompute::none;
  std::uint16_t modules = 0;
};

// The documented family: none; selective core_attn (Megatron's default); selective layernorm and
// mla_up_proj (DeepSeek-V3's, MLA models only), plus moe_act (MoE); selective moe; full.
[[nodiscard]] std::vector<RecomputeChoice> default_recompute_family(const ModelSpec& m);
// Parses "none,full,selective" (selective: the whole selective family) or module sets "a+b".
[[nodiscard]] std::vector<RecomputeChoice> parse_recompute_choices(const std::string& text, const ModelSpec& m);

struct SearchSpace {
  std::int64_t gpus = 0;
  std::string gpu_name;
  Bytes capacity;
  double max_memory_fraction = 1.0;  // usable = capacity x fraction
  std::int64_t gpus_per_node = 8;
  TrainingConfig base;  // precision, FP8, attention, seq_len, global_batch (required), ...
  // Bounds on the degrees (0: none) and fixed values.
  std::int64_t tp_max = 8, pp_max = 0, ep_max = 0, cp_max = 1, vpp_max = 4, micro_batch_max = 4;
  std::optional<std::int64_t> tp, pp, cp, ep, etp, vpp, micro_batch;
  std::vector<Schedule> schedules;          // empty: 1f1b/interleaved, dualpipe
  std::vector<RecomputeChoice> recomputes;  // empty: default_recompute_family
  std::vector<int> zero_stages = {0, 1};    // megatron: without / with the distributed optimizer
  bool sequence_parallel = true;            // sp on whenever tp > 1
};

struct CostBreakdown {
  double bubble = 0, recompute = 0, communication = 0;
  [[nodiscard]] double total() const { return bubble + recompute + communication; }
};

struct SearchEntry {
  std::int64_t index = 0;  // position in the enumeration (a stable tie-breaker)
  ParallelConfig parallel;
  TrainingConfig training;
  std::string recompute_name, split_name;
  std::int64_t peak_stage = 0;
  Bytes peak;  // device total of the fullest stage
  bool fits = false;
  CostBreakdown cost;
};

struct SearchResult {
  std::vector<SearchEntry> feasible;      // ranked: cost, then peak memory, then index
  std::vector<SearchEntry> pareto;        // feasible and not dominated in (peak, cost)
  std::vector<SearchEntry> infeasible;    // the nearest misses, by overflow
  std::int64_t enumerated = 0;            // candidates generated
  std::int64_t evaluated = 0;             // valid layouts evaluated on every stage
  double seconds = 0;
  Bytes usable;
};

// Checks the space (named errors), enumerates, evaluates on `threads` threads (results do not
// depend on the thread count) and ranks. `progress`, if given, counts evaluated candidates.
[[nodiscard]] SearchResult search(const CompiledModel& cm, const SearchSpace& space, int threads,
                                  std::atomic<std::int64_t>* progress = nullptr, std::int64_t keep_infeasible = 5);

// The cost model alone (documented in docs/formulas.md).
[[nodiscard]] CostBreakdown estimate_cost(const ModelSpec& m, const ParallelConfig& p, const TrainingConfig& t,
                                          std::int64_t gpus_per_node);

// Non-throwing form of validate_training (activation.hpp): the first rule `t` breaks against
// `layout`, or none. Defined next to validate_training in src/activation.cpp, which throws it.
[[nodiscard]] std::optional<InputError> check_training(const TrainingConfig& t, const Layout& layout);

}  // namespace moemem
