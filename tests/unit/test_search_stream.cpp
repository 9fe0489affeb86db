// search() evaluates candidates as it generates them and keeps only the best layouts that fit,
// the Pareto front and the nearest misses (issue 13: with "0 = no bound" limits it held every
// candidate, 10 GB at 4,096 GPUs). What it keeps must be exactly what ranking every candidate
// (the stepwise plan_search / evaluate_candidates / rank_candidates) gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "moemem/config.hpp"
#include "moemem/search.hpp"

namespace {

using namespace moemem;

struct Space {
  ModelSpec model = load_model("mixtral-8x7b");
  Inventory inventory = build_inventory(model);
  CompiledModel cm = compile_model(model, inventory, megatron_profile());
  SearchSpace space;
  Space() {
    space.gpus = 64;
    space.capacity = Bytes(81559ull * 1048576ull);
    space.base.precision = megatron_profile().default_precision;
    space.base.global_batch = 256;
    space.tp_max = space.pp_max = space.ep_max = space.cp_max = 0;  // no bounds
    space.vpp_max = 2;
    space.micro_batch_max = 2;
  }
};

std::vector<std::int64_t> indices(const std::vector<SearchEntry>& entries) {
  std::vector<std::int64_t> out;
  for (const auto& e : entries) out.push_back(e.index);
  return out;
}

std::vector<std::int64_t> first(const std::vector<SearchEntry>& entries, std::size_t n) {
  std::vector<std::int64_t> out = indices(entries);
  out.resize(std::min(n, out.size()));
  return out;
}

TEST(SearchStream, KeepsExactlyWhatRankingEveryCandidateGives) {
  const Space s;
  const SearchPlan plan = plan_search(s.model, s.space);
  SearchResult all;
  rank_candidates(evaluate_candidates(s.cm, plan, s.space.gpus_per_node, 2), 5, all);
  ASSERT_GT(all.feasible.size(), 50u);
  ASSERT_FALSE(all.infeasible.empty());

  const SearchResult streamed = search(s.cm, s.space, 3, nullptr, 5, std::int64_t{1} << 40);
  EXPECT_EQ(streamed.enumerated, static_cast<std::int64_t>(plan.candidates.size()));
  EXPECT_EQ(streamed.evaluated, all.evaluated);
  EXPECT_EQ(streamed.invalid, all.invalid);
  EXPECT_EQ(streamed.invalid_by_field, all.invalid_by_field);
  EXPECT_EQ(streamed.feasible_count, static_cast<std::int64_t>(all.feasible.size()));
  EXPECT_EQ(indices(streamed.feasible), indices(all.feasible));
  EXPECT_EQ(indices(streamed.pareto), indices(all.pareto));
  EXPECT_EQ(indices(streamed.infeasible), indices(all.infeasible));
  for (std::size_t i = 0; i < streamed.feasible.size(); ++i) {
    ASSERT_EQ(streamed.feasible[i].peak, all.feasible[i].peak) << i;
  }

  // Keeping ten: the first ten of the same ranking, every one counted, on any number of threads.
  for (const int threads : {1, 2, 5}) {
    const SearchResult ten = search(s.cm, s.space, threads, nullptr, 3, 10);
    EXPECT_EQ(ten.feasible_count, static_cast<std::int64_t>(all.feasible.size())) << threads;
    EXPECT_EQ(indices(ten.feasible), first(all.feasible, 10))
        << threads;
    EXPECT_EQ(indices(ten.pareto), indices(all.pareto)) << threads;
    EXPECT_EQ(indices(ten.infeasible), first(all.infeasible, 3))
        << threads;
  }
  EXPECT_TRUE(search(s.cm, s.space, 2, nullptr, 0, 0).feasible.empty());
}

}  // namespace

namespace {

using namespace moemem;

SearchEntry timed(std::int64_t tp, const char* recompute, double seconds, std::uint64_t peak) {
  SearchEntry e;
  e.parallel.tp = tp;
  e.training.micro_batch = 1;
  e.recompute_name = recompute;
  e.timed = true;
  e.time.step_seconds = seconds;
  e.peak = Bytes(peak);
  return e;
}

TEST(SearchCollapse, OneEntryPerLayoutTheLeanestOfTheEquallyFast) {
  // TP2's options: none (10 s, 80), a selective set 0.5% slower with 20 less (kept: as fast to
  // the model's resolution, more to spare), full 2% slower with 30 less (not). TP4: one option.
  const std::vector<SearchEntry> ranked = {timed(2, "none", 10.0, 80), timed(4, "none", 10.03, 70),
                                           timed(2, "layernorm", 10.05, 60), timed(2, "full", 10.2, 50)};
  const auto out = collapse_equivalent(ranked);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].parallel.tp, 4);  // 10.03 s now comes first
  EXPECT_EQ(out[1].parallel.tp, 2);
  EXPECT_EQ(out[1].recompute_name, "layernorm");
  EXPECT_EQ(out[1].peak.value(), 60u);
}

}  // namespace
