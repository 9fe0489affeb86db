// Layout search: every valid combination of tp, pp, vpp, cp, ep, etp, dp, schedule, optimizer
// sharding, recomputation, micro-batch and pipeline split for a number of GPUs, each evaluated
// on every stage with analyze(), then the ones that fit ranked by a simple, documented cost
// model (pipeline bubble, recomputation, inter-node TP/EP traffic).
//
// search() runs three steps, each public below: enumerate (degree combinations, their pipeline
// splits, each checked by check_layout; then candidates: layout x micro-batch x ZeRO stage x
// recomputation), evaluate (a Verdict per candidate: fits, does not fit, or invalid with the
// rule broken) and rank (feasible by cost, the Pareto front, the nearest misses).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moemem/analyze.hpp"
#include "moemem/errors.hpp"
#include "moemem/gpu.hpp"
#include "moemem/step_time.hpp"

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
  double max_memory_fraction = 0.95;  // usable = capacity x fraction (a margin for what the model misses)
  std::int64_t gpus_per_node = 8;
  // A named GPU's peaks and links: the layouts that fit are ranked by the step-time model's
  // tokens/s per GPU. Without one (only a memory size given), by the overhead cost below.
  std::optional<GpuPerf> perf;
  TrainingConfig base;  // precision, FP8, attention, seq_len, global_batch (required), ...
  // Bounds on the degrees (0: none) and fixed values.
  std::int64_t tp_max = 8, pp_max = 0, ep_max = 0, cp_max = 1, vpp_max = 4, micro_batch_max = 4;
  std::optional<std::int64_t> tp, pp, cp, ep, etp, vpp, micro_batch;
  std::vector<Schedule> schedules;          // empty: 1f1b/interleaved, dualpipe
  std::vector<RecomputeChoice> recomputes;  // empty: default_recompute_family
  std::vector<int> zero_stages = {0, 1};    // megatron: without / with the distributed optimizer
  bool sequence_parallel = true;            // sp on whenever tp > 1
  bool titan_split = false;                 // the unflagged split is torchtitan's default (its profile)
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
  bool timed = false;  // `time` holds the step-time model's estimate (a layout that fits, with a GPU's figures)
  StepTime time;
  // What the ranking sorts on, smaller first: the step time when timed, else the overhead cost.
  [[nodiscard]] double rank_key() const { return timed ? time.step_seconds : cost.total(); }
  // One layout: degrees, schedule, micro-batch (the optimizer sharding, pipeline split and
  // recomputation are its options). The ranking keeps one entry of each (collapse_equivalent).
  [[nodiscard]] bool same_plan(const SearchEntry& o) const;
};

struct SearchResult {
  std::vector<SearchEntry> feasible;      // ranked: cost, then peak memory, then index; the best keep_feasible
  std::int64_t feasible_count = 0;        // all that fit (feasible holds the best of them)
  std::vector<SearchEntry> pareto;        // feasible and not dominated in (peak, cost)
  std::vector<SearchEntry> infeasible;    // the nearest misses, by overflow
  std::int64_t enumerated = 0;            // candidates generated
  std::int64_t evaluated = 0;             // valid layouts evaluated on every stage
  double seconds = 0;
  Bytes usable;
  // Not printed by the CLI: what was refused, by the flag of the rule broken.
  std::int64_t invalid = 0;                              // candidates (enumerated - evaluated)
  std::map<std::string, std::int64_t> invalid_by_field;  // candidates
  std::map<std::string, std::string> invalid_reason;     // per field, one message (the least, for determinism)
  std::int64_t rejected_layouts = 0;                     // degree and split combinations
  std::map<std::string, std::int64_t> rejected_by_field;
};

// How many layouts that fit search() keeps by default (it counts them all).
inline constexpr std::int64_t kKeepFeasible = 1000;

// Checks the space (named errors), enumerates the layouts, then evaluates their candidates on
// `threads` threads as they are generated, keeping only the best `keep_feasible` that fit, the
// Pareto front and the `keep_infeasible` nearest misses: memory stays bounded however large the
// space (an unbounded space at 4,096 GPUs held every candidate: 10 GB). The results do not
// depend on the thread count. `progress`, if given, counts evaluated candidates.
[[nodiscard]] SearchResult search(const CompiledModel& cm, const SearchSpace& space, int threads,
                                  std::atomic<std::int64_t>* progress = nullptr, std::int64_t keep_infeasible = 5,
                                  std::int64_t keep_feasible = kKeepFeasible);

// Throws InputError naming the flag when the space (or the thread count) is out of range.
void check_search_space(const SearchSpace& space, int threads);

// --- Step 1: enumerate. -------------------------------------------------------------------------

// The degree combinations (tp, pp, cp, dp, ep, etp, vpp, schedule; sp on when tp > 1 if the space
// says so), in enumeration order: tp, pp, cp, ep, etp, vpp, schedule, each ascending.
[[nodiscard]] std::vector<ParallelConfig> enumerate_degrees(const ModelSpec& m, const SearchSpace& space);

struct SplitChoice {
  ParallelConfig config;
  std::string name;  // "even", "first X last Y", "account E+L"
};
// The pipeline splits tried for one degree combination: even; for 3 or more chunks the two
// first/last adjustments closest to even; Megatron's account-for-E+L when it divides.
[[nodiscard]] std::vector<SplitChoice> pipeline_splits(const ModelSpec& m, const ParallelConfig& p);

struct LayoutChoice {
  Layout layout;
  std::string split;
};
struct LayoutEnumeration {
  std::vector<LayoutChoice> layouts;  // every split check_layout accepts, in enumeration order
  std::int64_t rejected = 0;          // the others
  std::map<std::string, std::int64_t> rejected_by_field;
};
[[nodiscard]] LayoutEnumeration enumerate_layouts(const ModelSpec& m, const SearchSpace& space);

struct Candidate {
  std::size_t layout = 0;  // index into the layouts
  TrainingConfig training;
  std::size_t recompute = 0;  // index into the recomputation choices
};
// One layout's candidates (its index `layout`): micro-batch x ZeRO stage x recomputation choice,
// written to out[from], out[from + 1], ...; returns the index past the last. Elements already
// there are reused (a search's candidates differ from space.base in those four settings only, so
// only they are written: no copy of the whole TrainingConfig per candidate); out may keep
// elements past the returned index.
[[nodiscard]] std::size_t layout_candidates(std::size_t layout, const LayoutChoice& choice, const SearchSpace& space,
                                            const std::vector<RecomputeChoice>& recomputes, std::vector<Candidate>& out,
                                            std::size_t from);
// How many candidates layout_candidates gives for one layout.
[[nodiscard]] std::size_t layout_candidate_count(const LayoutChoice& choice, const SearchSpace& space, std::size_t recomputes);
// Each layout x micro-batch (divisors of global_batch / dp) x ZeRO stage x recomputation choice.
[[nodiscard]] std::vector<Candidate> enumerate_candidates(const std::vector<LayoutChoice>& layouts,
                                                          const SearchSpace& space,
                                                          const std::vector<RecomputeChoice>& recomputes);

// Everything step 1 produces for a space (checked with check_search_space(space, 1)).
struct SearchPlan {
  Bytes usable;  // capacity x max_memory_fraction
  std::vector<RecomputeChoice> recomputes;
  LayoutEnumeration layouts;
  std::vector<Candidate> candidates;
};
[[nodiscard]] SearchPlan plan_search(const ModelSpec& m, const SearchSpace& space);

// --- Step 2: evaluate. --------------------------------------------------------------------------

enum class VerdictKind : std::uint8_t { fits, does_not_fit, invalid };
[[nodiscard]] std::string_view name_of(VerdictKind k);

// What evaluating one candidate found.
struct Verdict {
  VerdictKind kind = VerdictKind::invalid;
  Bytes margin;        // fits: usable - peak (headroom); does_not_fit: peak - usable (overflow)
  std::string field;   // invalid: the flag of the rule broken (InputError::field())
  std::string reason;  // invalid: the whole message (InputError::what())
};

struct Evaluation {
  std::vector<Verdict> verdicts;     // one per candidate
  std::vector<SearchEntry> entries;  // one per candidate; filled where the verdict is not invalid
};
// Evaluates every candidate of the plan on every stage, on `threads` threads each filling its
// own slice (so the result does not depend on the thread count). `progress`, if given, counts
// evaluated candidates.
[[nodiscard]] Evaluation evaluate_candidates(const CompiledModel& cm, const SearchPlan& plan, std::int64_t gpus_per_node,
                                             int threads, std::atomic<std::int64_t>* progress = nullptr,
                                             const GpuPerf* perf = nullptr);

// --- Step 3: rank. ------------------------------------------------------------------------------

// Fills result.feasible (by cost, then peak, then index), result.pareto, result.infeasible (the
// `keep_infeasible` nearest misses, by peak), result.evaluated and the invalid counts.
void rank_candidates(Evaluation&& ev, std::int64_t keep_infeasible, SearchResult& result);

// Steps 2 and 3 as the candidates are generated: each thread takes the next layout, evaluates its
// candidates and keeps the best `keep_feasible`, its Pareto front and the `keep_infeasible`
// nearest misses; the threads' results are merged in a fixed order. Fills what rank_candidates
// fills (feasible truncated, feasible_count all), plus enumerated; `plan.candidates` is not used.
// With space.perf the layouts that fit are ranked by step time and collapsed per plan.

void stream_candidates(const CompiledModel& cm, const SearchPlan& plan, const SearchSpace& space, int threads,
                       std::int64_t keep_feasible, std::int64_t keep_infeasible, std::atomic<std::int64_t>* progress,
                       SearchResult& result);

// One entry per layout (SearchEntry::same_plan) from entries ranked fastest first: the fastest
// option of each, or the one with the lowest peak among those within 1% of it; fastest first.
[[nodiscard]] std::vector<SearchEntry> collapse_equivalent(std::vector<SearchEntry> ranked);

// --- The cost model (documented in docs/formulas.md). -------------------------------------------

// The parameters one token passes through in the GEMMs of one decoder layer, by the part a
// recomputation choice repeats, from the compiled model's tensors (vectors, i.e. norms and
// biases, are not GEMMs; routed experts count for top_k of num_experts).
struct LayerGemms {
  Count attention;  // every attention projection (q, k, v, o; MLA's down- and up-projections)
  Count mla_up;     // MLA's up-projections from the latents: q_up and q_rope (with a q latent), k_up, v_up
  Count mlp;        // dense MLP
  Count moe;        // router, routed experts (top_k) and shared experts
  Count shared;     // shared experts (and their gate)
};
using LayerKindGemms = std::array<LayerGemms, 2>;  // indexed by LayerKind
[[nodiscard]] LayerKindGemms layer_gemms(const CompiledModel& cm);

[[nodiscard]] CostBreakdown estimate_cost(const CompiledModel& cm, const ParallelConfig& p, const TrainingConfig& t,
                                          std::int64_t gpus_per_node);
// The same with the layers' GEMMs already derived (layer_gemms(cm) for cm.model == &m).
[[nodiscard]] CostBreakdown estimate_cost(const ModelSpec& m, const LayerKindGemms& gemms, const ParallelConfig& p,
                                          const TrainingConfig& t, std::int64_t gpus_per_node);



}  // namespace moemem
