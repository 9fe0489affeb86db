// Search, steps 2 and 3: evaluate every candidate on every stage (a Verdict each), then rank
// the ones that fit by cost, find the Pareto front and keep the nearest misses.
#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "moemem/search.hpp"

namespace moemem {

namespace {

// Entries of one layout the ranking may hold: ZeRO stages (0, 1) x pipeline splits (even, two
// first/last adjustments, account E+L) x the recomputation family (up to six choices).
constexpr std::int64_t kPlanVariants = 48;

// Within one layout, an option at most this much slower than its fastest counts as equally fast:
// the step-time model does not resolve smaller differences (its recomputation terms are a few
// memory-bound kernels), so the one with more memory to spare is shown.
constexpr double kSameSpeed = 1.01;

Verdict invalid_verdict(const InputError& e) {
  Verdict v;
  v.kind = VerdictKind::invalid;
  v.field = e.field();
  v.reason = e.what();
  return v;
}

// What one thread needs to evaluate candidates (shared read-only) and its own scratch space.
struct Evaluator {
  const CompiledModel& cm;
  const SearchPlan& plan;
  const LayerKindGemms& gemms;
  std::int64_t gpus_per_node;
  const StepTimeModel* time_model = nullptr;  // with `perf`: the step time of each layout that fits
  const GpuPerf* perf = nullptr;
  MemoryReport report;  // reused across this thread's candidates
  EvalCachePtr cache = make_eval_cache();
  StageReport probe;             // the one stage costed first when a bound is given
  std::int64_t last_peak = 0;    // the peak stage of the last layout costed whole: the stage probed
  bool pruned = false;           // the last candidate was not costed past its probed stage

  // The memory of every stage; on InputError the rule broken. The rules of the layout, the
  // training settings and the profile are checked before (as verdicts); what is left is found only
  // while costing: the 64-bit limit on activation sizes for huge batches, and a model whose layers
  // the profile's activation rules do not cover. This is the one place search catches.
  std::optional<InputError> analyze(const Layout& layout, const TrainingConfig& t) {
    try {
      analyze_into(cm, layout, t, report, cache.get(), Detail::totals, Checks::passed);
    } catch (const InputError& e) {
      return e;
    }
    return std::nullopt;
  }

  Verdict evaluate(std::size_t i, SearchEntry& e) { return evaluate(plan.candidates[i], i, e); }

  // A layout's peak is at least any one stage's total. With `above`, the stage that peaked last
  // time is costed first; a candidate whose stage already exceeds `above` is a miss that is not
  // kept, and is not costed further (`pruned`). Its verdict's margin is then a lower bound.
  std::optional<Verdict> probe_exceeds(const Layout& layout, const TrainingConfig& t, Bytes above) {
    const auto stage = std::min<std::int64_t>(last_peak, static_cast<std::int64_t>(layout.rank_chunks.size()) - 1);
    Bytes bound;
    try {
      bound = analyze_stage_total(cm, layout, t, stage, probe, cache.get(), Checks::passed);
    } catch (const InputError& e) {
      return invalid_verdict(e);
    }
    if (bound <= above) return std::nullopt;
    pruned = true;
    Verdict v;
    v.kind = VerdictKind::does_not_fit;
    v.margin = Bytes(bound.value() - plan.usable.value());
    return v;
  }

  // `index`: the candidate's position in the enumeration.
  Verdict evaluate(const Candidate& c, std::size_t index, SearchEntry& e, std::optional<Bytes> above = std::nullopt) {
    pruned = false;
    const LayoutChoice& lc = plan.layouts.layouts[c.layout];
    if (auto problem = check_training(c.training, lc.layout)) return invalid_verdict(*problem);
    if (auto problem = cm.profile->check(*cm.model, lc.layout, c.training)) return invalid_verdict(*problem);
    if (above) {
      if (auto v = probe_exceeds(lc.layout, c.training, *above)) return *v;
    }
    if (auto problem = analyze(lc.layout, c.training)) return invalid_verdict(*problem);
    last_peak = report.peak_stage;
    e.index = static_cast<std::int64_t>(index);
    e.parallel = lc.layout.config;
    e.training = c.training;
    e.recompute_name = plan.recomputes[c.recompute].name;
    e.split_name = lc.split;
    e.peak_stage = report.peak_stage;
    e.peak = report.stages[static_cast<std::size_t>(report.peak_stage)].bytes.total();
    e.fits = e.peak <= plan.usable;
    e.cost = estimate_cost(*cm.model, gemms, e.parallel, e.training, gpus_per_node);
    e.timed = e.fits && perf != nullptr && c.training.global_batch.has_value();
    if (e.timed) e.time = estimate_step_time(*time_model, lc.layout, c.training, *perf);
    Verdict v;
    v.kind = e.fits ? VerdictKind::fits : VerdictKind::does_not_fit;
    v.margin = e.fits ? Bytes(plan.usable.value() - e.peak.value()) : Bytes(e.peak.value() - plan.usable.value());
    return v;
  }
};

// A timed search needs a step time for every layout that fits: refused up front (before any
// thread starts) for a model whose layers the step-time model does not time.
void check_timed(const StepTimeModel& time_model, bool timed, const std::string& gpu) {
  if (!timed || !time_model.untimed_layers) return;
  throw InputError("--gpu", gpu.empty() ? "a named GPU" : gpu,
                   fmt::format("--gpu-memory for model_type {} (search ranks by the step-time model, which does not time "
                               "Gated DeltaNet, Mamba-2, Nemotron-NAS or separately sized sliding-window layers; with --gpu-memory it ranks by "
                               "memory and a relative cost)",
                               time_model.model->model_type));
}

// Ranking orders on candidate indices: by cost (then peak), by peak (then cost); index last.
struct ByCost {
  const std::vector<SearchEntry>& entries;
  bool operator()(std::size_t a, std::size_t b) const {
    const SearchEntry &x = entries[a], &y = entries[b];
    if (x.rank_key() != y.rank_key()) return x.rank_key() < y.rank_key();
    if (x.peak != y.peak) return x.peak < y.peak;
    return a < b;
  }
};
struct ByPeak {
  const std::vector<SearchEntry>& entries;
  bool operator()(std::size_t a, std::size_t b) const {
    const SearchEntry &x = entries[a], &y = entries[b];
    if (x.peak != y.peak) return x.peak < y.peak;
    if (x.rank_key() != y.rank_key()) return x.rank_key() < y.rank_key();
    return a < b;
  }
};

// Pareto front on (peak memory, cost): scanning by increasing peak, keep strictly cheaper ones.
std::vector<SearchEntry> pareto_front(const std::vector<SearchEntry>& entries, std::vector<std::size_t> fit) {
  std::vector<SearchEntry> front;
  std::sort(fit.begin(), fit.end(), ByPeak{entries});
  double best = INFINITY;
  for (const auto i : fit) {
    if (entries[i].rank_key() < best) {
      front.push_back(entries[i]);
      best = entries[i].rank_key();
    }
  }
  return front;
}

// The ranking's orders on entries (ByCost and ByPeak above, on the entries themselves).
bool cheaper(const SearchEntry& x, const SearchEntry& y) {
  if (x.rank_key() != y.rank_key()) return x.rank_key() < y.rank_key();
  if (x.peak != y.peak) return x.peak < y.peak;
  return x.index < y.index;
}
bool smaller(const SearchEntry& x, const SearchEntry& y) {
  if (x.peak != y.peak) return x.peak < y.peak;
  if (x.rank_key() != y.rank_key()) return x.rank_key() < y.rank_key();
  return x.index < y.index;
}

// The first `keep` entries under `before`, of all added: at most 2 x keep are held at a time.
// After a trim, an entry not before the first one dropped cannot be among the first `keep`: it
// is not copied.
struct BestK {
  std::size_t keep = 0;
  bool (*before)(const SearchEntry&, const SearchEntry&) = nullptr;
  std::vector<SearchEntry> entries;
  std::optional<SearchEntry> bound;  // the first entry the last trim dropped

  void add(const SearchEntry& e) {
    if (keep == 0 || (bound && !before(e, *bound))) return;
    entries.push_back(e);
    if (entries.size() >= 2 * keep) trim();
  }
  void trim() {
    if (entries.size() <= keep) return;
    const auto nth = entries.begin() + static_cast<std::ptrdiff_t>(keep);
    std::nth_element(entries.begin(), nth, entries.end(), before);
    bound = std::move(*nth);
    entries.resize(keep);
  }
  std::vector<SearchEntry> take_sorted() {
    trim();
    std::sort(entries.begin(), entries.end(), before);
    return std::move(entries);
  }
};

// The Pareto front of the entries added, as pareto_front() finds it: in `smaller` order, each
// strictly cheaper than every entry before it. Held in that order, costs strictly decreasing.
struct Front {
  std::vector<SearchEntry> entries;
  void add(const SearchEntry& e) {
    auto pos = std::lower_bound(entries.begin(), entries.end(), e, smaller);
    if (pos != entries.begin() && std::prev(pos)->rank_key() <= e.rank_key()) return;  // dominated
    auto last = pos;
    while (last != entries.end() && last->rank_key() >= e.rank_key()) ++last;  // now dominated by e
    entries.insert(entries.erase(pos, last), e);
  }
};

// One refusal message per field: the least, so that the message does not depend on which thread
// saw which candidate first.
void note_reason(std::map<std::string, std::string>& reasons, const std::string& field, const std::string& why) {
  auto [it, added] = reasons.try_emplace(field, why);
  if (!added && why < it->second) it->second = why;
}

// What one thread keeps of the candidates it evaluates (and, merged, what the search keeps).
struct Kept {
  BestK feasible, misses;
  Front pareto;
  std::int64_t evaluated = 0, invalid = 0, feasible_count = 0;
  std::map<std::string, std::int64_t> invalid_by_field;
  std::map<std::string, std::string> invalid_reason;

  Kept(std::int64_t keep_feasible, std::int64_t keep_infeasible)
      : feasible{static_cast<std::size_t>(keep_feasible), cheaper, {}, {}}, misses{static_cast<std::size_t>(keep_infeasible), smaller, {}, {}} {}

  // A candidate whose peak exceeds this neither fits nor is among the nearest misses kept (BestK
  // adds no entry that is not before its bound); nullopt while any miss may still be kept.
  [[nodiscard]] std::optional<Bytes> keeps_nothing_above(Bytes usable) const {
    if (misses.keep == 0) return usable;
    if (!misses.bound) return std::nullopt;
    return std::max(usable, misses.bound->peak);
  }

  // `pruned`: a miss costed only as far as a bound above keeps_nothing_above (counted, not kept).
  void record(const Verdict& v, const SearchEntry& e, bool pruned = false) {
    if (v.kind == VerdictKind::invalid) {
      ++invalid;
      ++invalid_by_field[v.field];
      note_reason(invalid_reason, v.field, v.reason);
      return;
    }
    ++evaluated;
    if (v.kind == VerdictKind::fits) {
      ++feasible_count;
      feasible.add(e);
      pareto.add(e);
    } else if (!pruned) {
      misses.add(e);
    }
  }
  void merge(Kept&& o) {
    for (auto& e : o.feasible.entries) feasible.add(e);
    for (auto& e : o.misses.entries) misses.add(e);
    for (auto& e : o.pareto.entries) pareto.add(e);
    evaluated += o.evaluated;
    invalid += o.invalid;
    feasible_count += o.feasible_count;
    for (const auto& [field, n] : o.invalid_by_field) invalid_by_field[field] += n;
    for (const auto& [field, why] : o.invalid_reason) note_reason(invalid_reason, field, why);
  }
};

bool shown_already(const std::vector<SearchEntry>& shown, const SearchEntry& e) {
  return std::any_of(shown.begin(), shown.end(), [&](const SearchEntry& s) { return s.same_plan(e); });
}

// The nearest misses, one per layout (degrees, schedule, micro-batch, as same_plan compares them):
// its nearest option. Without this one layout fills the list under two split names or two
// recomputation choices that all fall short.
std::vector<SearchEntry> distinct_misses(std::vector<SearchEntry> by_peak, std::int64_t keep) {
  std::vector<SearchEntry> out;
  for (auto& e : by_peak) {
    if (static_cast<std::int64_t>(out.size()) >= keep) break;
    if (!shown_already(out, e)) out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

void stream_candidates(const CompiledModel& cm, const SearchPlan& plan, const SearchSpace& space, int threads,
                       std::int64_t keep_feasible, std::int64_t keep_infeasible, std::atomic<std::int64_t>* progress,
                       SearchResult& result) {
  const auto& layouts = plan.layouts.layouts;
  // Each layout's first candidate's position in the enumeration (the ranking's last tie-breaker).
  std::vector<std::size_t> first(layouts.size() + 1, 0);
  for (std::size_t li = 0; li < layouts.size(); ++li) {
    first[li + 1] = first[li] + layout_candidate_count(layouts[li], space, plan.recomputes.size());
  }
  const LayerKindGemms gemms = layer_gemms(cm);
  const StepTimeModel time_model = make_step_time_model(cm);
  check_timed(time_model, space.perf.has_value(), space.gpu_name);
  std::optional<GpuPerf> perf = space.perf;
  if (perf) perf->gpus_per_node = space.gpus_per_node;
  std::atomic<std::size_t> next{0};
  const auto work = [&](Kept& kept) {
    Evaluator evaluator{cm, plan, gemms, space.gpus_per_node, &time_model, perf ? &*perf : nullptr, {}, make_eval_cache(), {}, 0, false};
    std::vector<Candidate> candidates;
    SearchEntry entry;
    for (std::size_t li = next.fetch_add(1); li < layouts.size(); li = next.fetch_add(1)) {
      const std::size_t n = layout_candidates(li, layouts[li], space, plan.recomputes, candidates, 0);
      for (std::size_t j = 0; j < n; ++j) {
        const Verdict v = evaluator.evaluate(candidates[j], first[li] + j, entry, kept.keeps_nothing_above(plan.usable));
        kept.record(v, entry, evaluator.pruned);
        if (progress != nullptr) progress->fetch_add(1, std::memory_order_relaxed);
      }
    }
  };
  const auto workers = static_cast<std::size_t>(std::clamp<std::int64_t>(threads, 1, std::max<std::int64_t>(1, static_cast<std::int64_t>(layouts.size()))));
  // Timed, equivalent layouts are collapsed after ranking (collapse_equivalent): keep enough that
  // `keep_feasible` distinct plans remain (a plan has at most a few splits x ZeRO stages).
  const std::int64_t held = perf ? std::min<std::int64_t>(keep_feasible * kPlanVariants, std::int64_t{1} << 20) : keep_feasible;
  // Misses are shown one per layout too (distinct_misses): hold enough for `keep_infeasible` of them.
  const std::int64_t held_misses = std::min<std::int64_t>(keep_infeasible * kPlanVariants, std::int64_t{1} << 20);
  std::vector<Kept> kept(workers, Kept(held, held_misses));
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work, std::ref(kept[w]));
  work(kept[0]);
  for (auto& th : pool) th.join();
  for (std::size_t w = 1; w < workers; ++w) kept[0].merge(std::move(kept[w]));
  Kept& all = kept[0];
  result.enumerated = static_cast<std::int64_t>(first.back());
  result.evaluated = all.evaluated;
  result.invalid = all.invalid;
  result.invalid_by_field = std::move(all.invalid_by_field);
  result.invalid_reason = std::move(all.invalid_reason);
  result.feasible_count = all.feasible_count;
  if (perf) {
    result.feasible = collapse_equivalent(all.feasible.take_sorted());
    if (result.feasible.size() > static_cast<std::size_t>(keep_feasible)) result.feasible.resize(static_cast<std::size_t>(keep_feasible));
  } else {
    result.feasible = all.feasible.take_sorted();
  }
  result.infeasible = distinct_misses(all.misses.take_sorted(), keep_infeasible);
  result.pareto = std::move(all.pareto.entries);
}

bool SearchEntry::same_plan(const SearchEntry& o) const {
  const ParallelConfig &a = parallel, &b = o.parallel;
  return a.tp == b.tp && a.pp == b.pp && a.dp == b.dp && a.cp == b.cp && a.ep == b.ep && a.etp_degree() == b.etp_degree() &&
         a.vpp == b.vpp && a.schedule == b.schedule && a.sp == b.sp && training.micro_batch == o.training.micro_batch;
}

std::vector<SearchEntry> collapse_equivalent(std::vector<SearchEntry> ranked) {
  // ranked is fastest first: the first entry of a layout is its fastest option; a later one
  // within kSameSpeed of it replaces the one held when it leaves more memory free.
  std::vector<SearchEntry> out;
  std::vector<double> fastest;
  std::map<std::array<std::int64_t, 10>, std::size_t> held;  // the layout's fields, as same_plan compares them
  for (auto& e : ranked) {
    const ParallelConfig& p = e.parallel;
    const std::array<std::int64_t, 10> key = {p.tp, p.pp, p.dp, p.cp, p.ep, p.etp_degree(), p.vpp,
                                              static_cast<std::int64_t>(p.schedule), p.sp ? 1 : 0, e.training.micro_batch};
    const auto [it, added] = held.try_emplace(key, out.size());
    if (added) {
      fastest.push_back(e.rank_key());
      out.push_back(std::move(e));
    } else if (e.rank_key() <= fastest[it->second] * kSameSpeed && e.peak < out[it->second].peak) {
      out[it->second] = std::move(e);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const SearchEntry& a, const SearchEntry& b) { return a.rank_key() < b.rank_key(); });
  return out;
}

std::string_view name_of(VerdictKind k) {
  switch (k) {
    case VerdictKind::fits: return "fits";
    case VerdictKind::does_not_fit: return "does not fit";
    case VerdictKind::invalid: return "invalid";
  }
  return "?";
}

Evaluation evaluate_candidates(const CompiledModel& cm, const SearchPlan& plan, std::int64_t gpus_per_node, int threads,
                               std::atomic<std::int64_t>* progress, const GpuPerf* perf) {
  const std::size_t n = plan.candidates.size();
  Evaluation ev;
  ev.verdicts.resize(n);
  ev.entries.resize(n);
  const LayerKindGemms gemms = layer_gemms(cm);
  const StepTimeModel time_model = make_step_time_model(cm);
  check_timed(time_model, perf != nullptr, "");
  auto work = [&](std::size_t begin, std::size_t end) {
    Evaluator evaluator{cm, plan, gemms, gpus_per_node, &time_model, perf, {}, make_eval_cache(), {}, 0, false};
    for (std::size_t i = begin; i < end; ++i) {
      ev.verdicts[i] = evaluator.evaluate(i, ev.entries[i]);
      if (progress != nullptr) progress->fetch_add(1, std::memory_order_relaxed);
    }
  };
  const auto workers = static_cast<std::size_t>(std::min<std::int64_t>(threads, std::max<std::int64_t>(1, static_cast<std::int64_t>(n))));
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work, n * w / workers, n * (w + 1) / workers);
  work(0, n / workers);
  for (auto& th : pool) th.join();
  return ev;
}

void rank_candidates(Evaluation&& ev, std::int64_t keep_infeasible, SearchResult& result) {
  std::vector<SearchEntry>& entries = ev.entries;
  std::vector<std::size_t> fit_idx, miss_idx;
  for (std::size_t i = 0; i < ev.verdicts.size(); ++i) {
    const Verdict& v = ev.verdicts[i];
    if (v.kind == VerdictKind::invalid) {
      ++result.invalid;
      ++result.invalid_by_field[v.field];
      note_reason(result.invalid_reason, v.field, v.reason);
      continue;
    }
    ++result.evaluated;
    (v.kind == VerdictKind::fits ? fit_idx : miss_idx).push_back(i);
  }
  result.feasible_count = static_cast<std::int64_t>(fit_idx.size());
  result.pareto = pareto_front(entries, fit_idx);
  std::sort(fit_idx.begin(), fit_idx.end(), ByCost{entries});
  std::sort(miss_idx.begin(), miss_idx.end(), ByPeak{entries});
  // Entries are large: move each once.
  result.feasible.reserve(fit_idx.size());
  for (const auto i : fit_idx) result.feasible.push_back(std::move(entries[i]));
  for (const auto i : miss_idx) {
    if (static_cast<std::int64_t>(result.infeasible.size()) >= keep_infeasible) break;
    if (!shown_already(result.infeasible, entries[i])) result.infeasible.push_back(std::move(entries[i]));
  }
}

}  // namespace moemem
