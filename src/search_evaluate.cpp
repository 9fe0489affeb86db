// Search, steps 2 and 3: evaluate every candidate on every stage (a Verdict each), then rank
// the ones that fit by cost, find the Pareto front and keep the nearest misses.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "moemem/search.hpp"

namespace moemem {

namespace {

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
  MemoryReport report;  // reused across this thread's candidates
  EvalCachePtr cache = make_eval_cache();

  // The memory of every stage; on InputError the rule broken. The rules of the layout, the
  // training settings and the profile are checked before (as verdicts); what is left is found only
  // while costing: the 64-bit limit on activation sizes for huge batches, and a model whose layers
  // the profile's activation rules do not cover. This is the one place search catches.
  std::optional<InputError> analyze(const Layout& layout, const TrainingConfig& t) {
    try {
      analyze_into(cm, layout, t, report, cache.get(), Detail::totals);
    } catch (const InputError& e) {
      return e;
    }
    return std::nullopt;
  }

  Verdict evaluate(std::size_t i, SearchEntry& e) {
    const Candidate& c = plan.candidates[i];
    const LayoutChoice& lc = plan.layouts.layouts[c.layout];
    if (auto problem = check_training(c.training, lc.layout)) return invalid_verdict(*problem);
    if (auto problem = cm.profile->check(*cm.model, lc.layout, c.training)) return invalid_verdict(*problem);
    if (auto problem = analyze(lc.layout, c.training)) return invalid_verdict(*problem);
    e.index = static_cast<std::int64_t>(i);
    e.parallel = lc.layout.config;
    e.training = c.training;
    e.recompute_name = plan.recomputes[c.recompute].name;
    e.split_name = lc.split;
    e.peak_stage = report.peak_stage;
    e.peak = report.stages[static_cast<std::size_t>(report.peak_stage)].bytes.total();
    e.fits = e.peak <= plan.usable;
    e.cost = estimate_cost(*cm.model, gemms, e.parallel, e.training, gpus_per_node);
    Verdict v;
    v.kind = e.fits ? VerdictKind::fits : VerdictKind::does_not_fit;
    v.margin = e.fits ? Bytes(plan.usable.value() - e.peak.value()) : Bytes(e.peak.value() - plan.usable.value());
    return v;
  }
};

// Ranking orders on candidate indices: by cost (then peak), by peak (then cost); index last.
struct ByCost {
  const std::vector<SearchEntry>& entries;
  bool operator()(std::size_t a, std::size_t b) const {
    const SearchEntry &x = entries[a], &y = entries[b];
    if (x.cost.total() != y.cost.total()) return x.cost.total() < y.cost.total();
    if (x.peak != y.peak) return x.peak < y.peak;
    return a < b;
  }
};
struct ByPeak {
  const std::vector<SearchEntry>& entries;
  bool operator()(std::size_t a, std::size_t b) const {
    const SearchEntry &x = entries[a], &y = entries[b];
    if (x.peak != y.peak) return x.peak < y.peak;
    if (x.cost.total() != y.cost.total()) return x.cost.total() < y.cost.total();
    return a < b;
  }
};

// Pareto front on (peak memory, cost): scanning by increasing peak, keep strictly cheaper ones.
std::vector<SearchEntry> pareto_front(const std::vector<SearchEntry>& entries, std::vector<std::size_t> fit) {
  std::vector<SearchEntry> front;
  std::sort(fit.begin(), fit.end(), ByPeak{entries});
  double best = INFINITY;
  for (const auto i : fit) {
    if (entries[i].cost.total() < best) {
      front.push_back(entries[i]);
      best = entries[i].cost.total();
    }
  }
  return front;
}

}  // namespace

std::string_view name_of(VerdictKind k) {
  switch (k) {
    case VerdictKind::fits: return "fits";
    case VerdictKind::does_not_fit: return "does not fit";
    case VerdictKind::invalid: return "invalid";
  }
  return "?";
}

Evaluation evaluate_candidates(const CompiledModel& cm, const SearchPlan& plan, std::int64_t gpus_per_node, int threads,
                               std::atomic<std::int64_t>* progress) {
  const std::size_t n = plan.candidates.size();
  Evaluation ev;
  ev.verdicts.resize(n);
  ev.entries.resize(n);
  const LayerKindGemms gemms = layer_gemms(cm);
  auto work = [&](std::size_t begin, std::size_t end) {
    Evaluator evaluator{cm, plan, gemms, gpus_per_node, {}, make_eval_cache()};
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
      continue;
    }
    ++result.evaluated;
    (v.kind == VerdictKind::fits ? fit_idx : miss_idx).push_back(i);
  }
  result.pareto = pareto_front(entries, fit_idx);
  std::sort(fit_idx.begin(), fit_idx.end(), ByCost{entries});
  std::sort(miss_idx.begin(), miss_idx.end(), ByPeak{entries});
  if (static_cast<std::int64_t>(miss_idx.size()) > keep_infeasible) miss_idx.resize(static_cast<std::size_t>(keep_infeasible));
  // Entries are large: move each once.
  result.feasible.reserve(fit_idx.size());
  for (const auto i : fit_idx) result.feasible.push_back(std::move(entries[i]));
  for (const auto i : miss_idx) result.infeasible.push_back(std::move(entries[i]));
}

}  // namespace moemem
