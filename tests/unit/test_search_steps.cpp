// The search's steps (issue 11): check_layout and check_training say why without throwing and
// say exactly what resolve_layout and validate_training throw; every candidate gets a verdict
// (fits with its headroom, does not fit with its overflow, invalid with the rule broken); the
// results do not depend on the thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>

#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/search.hpp"

namespace {

using namespace moemem;

std::string thrown_by(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

ParallelConfig degrees(std::int64_t tp, std::int64_t pp, std::int64_t dp, std::int64_t ep = 1) {
  ParallelConfig p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.ep = ep;
  p.sp = tp > 1;
  return p;
}

TEST(SearchSteps, CheckLayoutSaysWhatResolveLayoutThrows) {
  const ModelSpec v3 = load_model("deepseek-v3");
  ParallelConfig vpp_dualpipe = degrees(1, 4, 2, 2);
  vpp_dualpipe.vpp = 2;
  vpp_dualpipe.schedule = Schedule::dualpipe;
  ParallelConfig odd_dualpipe = degrees(1, 3, 2, 2);
  odd_dualpipe.schedule = Schedule::dualpipe;
  ParallelConfig bad_split = degrees(1, 4, 2, 2);
  bad_split.layers_per_stage = {20, 20, 20, 2};
  ParallelConfig bad_string = degrees(1, 2, 2, 2);
  bad_string.pipeline_layout = "Et*30|(t";  // a parse error, reported by the parser in pipeline.cpp
  ParallelConfig first_last = degrees(1, 4, 2, 2);
  first_last.first_stage_layers = 100;
  const std::vector<std::pair<ParallelConfig, std::string>> invalid = {
      {degrees(0, 1, 1), "--tp"},
      {degrees(3, 1, 1), "--tp"},        // 128 heads
      {degrees(1, 1, 3, 3), "--ep"},     // 256 experts
      {degrees(1, 1, 2, 4), "--ep/--etp"},
      {vpp_dualpipe, "--schedule"},
      {odd_dualpipe, "--pp"},
      {degrees(1, 64, 1), "--pp"},       // more chunks than layers
      {bad_split, "--layers-per-stage"},
      {bad_string, "--pipeline-model-parallel-layout"},
      {first_last, "--decoder-first-pipeline-num-layers"},
  };
  for (const auto& [p, field] : invalid) {
    const LayoutVerdict v = check_layout(v3, p);
    ASSERT_FALSE(v.valid()) << field;
    ASSERT_TRUE(v.error.has_value()) << field;
    EXPECT_EQ(v.error->field(), field);
    const auto& config = p;  // clang 14 cannot capture a structured binding
    EXPECT_EQ(v.error->what(), thrown_by([&] { (void)resolve_layout(v3, config); })) << field;
  }
  ParallelConfig valid = degrees(2, 8, 4, 8);
  valid.vpp = 2;
  const LayoutVerdict v = check_layout(v3, valid);
  ASSERT_TRUE(v.valid());
  EXPECT_FALSE(v.error.has_value());
  const Layout l = resolve_layout(v3, valid);
  EXPECT_EQ(v.layout->config.schedule, Schedule::interleaved);
  EXPECT_EQ(v.layout->chunks.size(), l.chunks.size());
  EXPECT_EQ(v.layout->rank_chunks, l.rank_chunks);
  EXPECT_EQ(v.layout->edp, l.edp);
  EXPECT_EQ(v.layout->world_size, 2 * 8 * 4);
}

TEST(SearchSteps, CheckTrainingSaysWhatValidateTrainingThrows) {
  const ModelSpec m = load_model("llama-3.1-8b");
  const Layout layout = resolve_layout(m, degrees(2, 1, 4));
  TrainingConfig ok;
  ok.global_batch = 16;
  EXPECT_FALSE(check_training(ok, layout).has_value());
  EXPECT_NO_THROW(validate_training(ok, layout));
  const auto with = [&](const std::function<void(TrainingConfig&)>& change) {
    TrainingConfig t = ok;
    change(t);
    return t;
  };
  const std::vector<std::pair<TrainingConfig, std::string>> bad = {
      {with([](TrainingConfig& t) { t.seq_len = 4097; }), "--seq-len"},  // sp: a multiple of tp
      {with([](TrainingConfig& t) { t.global_batch = 6; }), "--global-batch"},
      {with([](TrainingConfig& t) { t.zero = 4; }), "--zero"},
      {with([](TrainingConfig& t) { t.micro_batch = 0; }), "--micro-batch"},
      {with([](TrainingConfig& t) { t.dp_replicate = 3; }), "--dp-replicate"},
  };
  for (const auto& [t, field] : bad) {
    const auto problem = check_training(t, layout);
    ASSERT_TRUE(problem.has_value()) << field;
    EXPECT_EQ(problem->field(), field);
    const auto& training = t;  // clang 14 cannot capture a structured binding
    EXPECT_EQ(problem->what(), thrown_by([&] { validate_training(training, layout); })) << field;
  }
}

struct Small {
  ModelSpec model;
  Inventory inventory;
  CompiledModel cm;
  SearchSpace space;
  Small(const std::string& name, const Profile& profile, std::int64_t gpus, std::int64_t global_batch)
      : model(load_model(name)), inventory(build_inventory(model)), cm(compile_model(model, inventory, profile)) {
    space.gpus = gpus;
    space.capacity = Bytes(80ull << 30);
    space.base.precision = profile.default_precision;
    space.base.global_batch = global_batch;
  }
};

// Every verdict agrees with its entry: fits with usable - peak, does not fit with peak - usable.
void expect_consistent(const SearchPlan& plan, const Evaluation& ev) {
  ASSERT_EQ(ev.verdicts.size(), plan.candidates.size());
  ASSERT_EQ(ev.entries.size(), plan.candidates.size());
  for (std::size_t i = 0; i < ev.verdicts.size(); ++i) {
    const Verdict& v = ev.verdicts[i];
    const SearchEntry& e = ev.entries[i];
    if (v.kind == VerdictKind::invalid) {
      EXPECT_FALSE(v.reason.empty());
      continue;
    }
    EXPECT_EQ(e.index, static_cast<std::int64_t>(i));
    EXPECT_TRUE(v.reason.empty());
    EXPECT_EQ(v.kind == VerdictKind::fits, e.fits);
    if (e.fits) EXPECT_EQ(v.margin.value(), plan.usable.value() - e.peak.value());
    else EXPECT_EQ(v.margin.value(), e.peak.value() - plan.usable.value());
  }
}

// A sequence of 4097 tokens splits over no tp > 1 with sequence parallelism: those candidates are
// invalid, carrying validate_training's message; the tp = 1 ones are evaluated.
TEST(SearchSteps, InvalidCandidatesCarryTheirReason) {
  Small s("llama-3.1-8b", megatron_profile(), 8, 64);
  s.space.base.seq_len = 4097;
  const SearchPlan plan = plan_search(s.model, s.space);
  const Evaluation ev = evaluate_candidates(s.cm, plan, s.space.gpus_per_node, 2);
  expect_consistent(plan, ev);
  std::int64_t invalid = 0, valid = 0;
  for (std::size_t i = 0; i < ev.verdicts.size(); ++i) {
    const Candidate& c = plan.candidates[i];
    const Layout& layout = plan.layouts.layouts[c.layout].layout;
    const Verdict& v = ev.verdicts[i];
    if (layout.config.tp > 1) {
      ASSERT_EQ(v.kind, VerdictKind::invalid);
      EXPECT_EQ(v.field, "--seq-len");
      EXPECT_EQ(v.reason, thrown_by([&] { validate_training(c.training, layout); }));
      EXPECT_NE(v.reason.find("a multiple of cp*tp (sequence parallelism is on)"), std::string::npos) << v.reason;
      ++invalid;
    } else {
      EXPECT_NE(v.kind, VerdictKind::invalid) << v.reason;
      ++valid;
    }
  }
  EXPECT_GT(invalid, 0);
  EXPECT_GT(valid, 0);
  // search() counts them the same way, by the flag of the rule broken.
  const SearchResult r = search(s.cm, s.space, 2);
  EXPECT_EQ(r.enumerated, invalid + valid);
  EXPECT_EQ(r.evaluated, valid);
  EXPECT_EQ(r.invalid, invalid);
  EXPECT_EQ(r.invalid_by_field.size(), 1u);
  EXPECT_EQ(r.invalid_by_field.at("--seq-len"), invalid);
}

// A rule only the profile knows (torchtitan's FSDP2 takes no --zero) is found while analysing
// and carried the same way.
TEST(SearchSteps, ProfileRulesMakeInvalidVerdicts) {
  Small s("llama-3.1-8b", torchtitan_profile(), 8, 64);
  s.space.zero_stages = {0, 1};
  s.space.schedules = {Schedule::one_f_one_b};  // torchtitan has no DualPipe (its own rule)
  const SearchPlan plan = plan_search(s.model, s.space);
  ASSERT_FALSE(plan.candidates.empty());
  const Evaluation ev = evaluate_candidates(s.cm, plan, s.space.gpus_per_node, 2);
  expect_consistent(plan, ev);
  for (std::size_t i = 0; i < ev.verdicts.size(); ++i) {
    const Verdict& v = ev.verdicts[i];
    if (plan.candidates[i].training.zero == 1) {
      ASSERT_EQ(v.kind, VerdictKind::invalid);
      EXPECT_EQ(v.field, "--zero");
      EXPECT_NE(v.reason.find("0 with the torchtitan profile"), std::string::npos) << v.reason;
    } else {
      EXPECT_NE(v.kind, VerdictKind::invalid) << v.reason;
    }
  }
}

TEST(SearchSteps, VerdictKinds) {
  // 80 GiB: some layouts of Mixtral on 16 GPUs fit, others do not.
  Small s("mixtral-8x7b", megatron_profile(), 16, 64);
  const SearchPlan plan = plan_search(s.model, s.space);
  const Evaluation ev = evaluate_candidates(s.cm, plan, s.space.gpus_per_node, 2);
  expect_consistent(plan, ev);
  std::map<VerdictKind, std::int64_t> kinds;
  for (const auto& v : ev.verdicts) ++kinds[v.kind];
  EXPECT_GT(kinds[VerdictKind::fits], 0);
  EXPECT_GT(kinds[VerdictKind::does_not_fit], 0);
  EXPECT_EQ(name_of(VerdictKind::fits), "fits");
  EXPECT_EQ(name_of(VerdictKind::does_not_fit), "does not fit");
  EXPECT_EQ(name_of(VerdictKind::invalid), "invalid");
  // Ranking keeps every verdict that is not invalid; the nearest misses are the smallest overflows.
  SearchResult r;
  Evaluation copy = ev;
  rank_candidates(std::move(copy), 3, r);
  EXPECT_EQ(r.evaluated, kinds[VerdictKind::fits] + kinds[VerdictKind::does_not_fit]);
  EXPECT_EQ(static_cast<std::int64_t>(r.feasible.size()), kinds[VerdictKind::fits]);
  ASSERT_EQ(r.infeasible.size(), 3u);
  Bytes least = Bytes(~0ull);
  for (std::size_t i = 0; i < ev.verdicts.size(); ++i) {
    if (ev.verdicts[i].kind == VerdictKind::does_not_fit) least = std::min(least, ev.verdicts[i].margin);
  }
  EXPECT_EQ(r.infeasible.front().peak.value() - plan.usable.value(), least.value());
}

// The layouts' splits are checked, not caught: the rejected ones are counted by rule.
TEST(SearchSteps, RejectedLayoutsAreCounted) {
  Small s("deepseek-v3", megatron_profile(), 64, 64);
  const LayoutEnumeration e = enumerate_layouts(s.model, s.space);
  std::int64_t splits = 0;
  for (const auto& p : enumerate_degrees(s.model, s.space)) splits += static_cast<std::int64_t>(pipeline_splits(s.model, p).size());
  EXPECT_EQ(static_cast<std::int64_t>(e.layouts.size()) + e.rejected, splits);
  std::int64_t by_field = 0;
  for (const auto& [field, n] : e.rejected_by_field) by_field += n;
  EXPECT_EQ(by_field, e.rejected);
  EXPECT_GT(e.rejected, 0);  // e.g. dualpipe with an odd pp, tp not dividing the heads
}

bool same_entry(const SearchEntry& a, const SearchEntry& b) {
  const auto bits = [](double x) {
    std::uint64_t u = 0;
    std::memcpy(&u, &x, sizeof u);
    return u;
  };
  return a.index == b.index && a.peak == b.peak && a.peak_stage == b.peak_stage && a.fits == b.fits &&
         a.recompute_name == b.recompute_name && a.split_name == b.split_name &&
         a.training.micro_batch == b.training.micro_batch && a.training.zero == b.training.zero &&
         a.parallel.tp == b.parallel.tp && a.parallel.pp == b.parallel.pp && a.parallel.vpp == b.parallel.vpp &&
         a.parallel.ep == b.parallel.ep && a.parallel.etp == b.parallel.etp && a.parallel.dp == b.parallel.dp &&
         a.parallel.schedule == b.parallel.schedule && bits(a.cost.bubble) == bits(b.cost.bubble) &&
         bits(a.cost.recompute) == bits(b.cost.recompute) && bits(a.cost.communication) == bits(b.cost.communication);
}

void expect_same(const std::vector<SearchEntry>& a, const std::vector<SearchEntry>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(same_entry(a[i], b[i])) << what << " #" << i;
}

TEST(SearchSteps, ResultsDoNotDependOnTheThreadCount) {
  Small s("mixtral-8x7b", megatron_profile(), 16, 64);
  s.space.base.seq_len = 4098;  // some candidates invalid too
  std::atomic<std::int64_t> one_progress{0}, two_progress{0};
  const SearchResult one = search(s.cm, s.space, 1, &one_progress, 1000000);
  const SearchResult two = search(s.cm, s.space, 2, &two_progress, 1000000);
  EXPECT_EQ(one.enumerated, two.enumerated);
  EXPECT_EQ(one_progress.load(), one.enumerated);
  EXPECT_EQ(two_progress.load(), two.enumerated);
  EXPECT_EQ(one.evaluated, two.evaluated);
  EXPECT_EQ(one.invalid, two.invalid);
  EXPECT_GT(one.invalid, 0);
  EXPECT_EQ(one.invalid_by_field, two.invalid_by_field);
  EXPECT_FALSE(one.feasible.empty());
  EXPECT_FALSE(one.infeasible.empty());
  expect_same(one.feasible, two.feasible, "feasible");
  expect_same(one.pareto, two.pareto, "pareto");
  expect_same(one.infeasible, two.infeasible, "infeasible");
  // Each thread fills its own slice: the verdicts are the same with any number of threads.
  const SearchPlan plan = plan_search(s.model, s.space);
  const Evaluation a = evaluate_candidates(s.cm, plan, 8, 1), b = evaluate_candidates(s.cm, plan, 8, 3);
  ASSERT_EQ(a.verdicts.size(), b.verdicts.size());
  for (std::size_t i = 0; i < a.verdicts.size(); ++i) {
    ASSERT_EQ(a.verdicts[i].kind, b.verdicts[i].kind) << i;
    ASSERT_EQ(a.verdicts[i].margin, b.verdicts[i].margin) << i;
    ASSERT_EQ(a.verdicts[i].reason, b.verdicts[i].reason) << i;
  }
}

}  // namespace
