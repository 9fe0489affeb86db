// The ledger: a stage's totals are the sums of its items; an evaluation without item detail (as
// search runs it) gives the same totals as one with every item, and so does one stage costed alone
// (search's probe); explain lists the same items.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "moemem/analyze.hpp"
#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/explain.hpp"

namespace {

using namespace moemem;

struct Drawn {
  ParallelConfig p;
  TrainingConfig t;
};

// A random layout and training setting for `m` under `profile` (possibly invalid: the caller skips those).
Drawn draw(std::mt19937_64& rng, const ModelSpec& m, const Profile& profile) {
  const auto pick = [&](std::vector<std::int64_t> v) { return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)]; };
  Drawn d;
  d.p.tp = pick({1, 2, 4, 8});
  d.p.pp = pick({1, 2, 4, 8});
  d.p.dp = pick({1, 2, 4, 8, 16});
  d.p.cp = pick({1, 1, 2});
  d.p.sp = d.p.tp > 1 && pick({0, 1}) == 1;
  if (m.is_moe()) d.p.ep = pick({1, 2, 4, 8});
  const std::vector<Schedule> schedules = {Schedule::one_f_one_b, Schedule::interleaved, Schedule::dualpipe,
                                           Schedule::dualpipev, Schedule::gpipe, Schedule::zb_h1};
  d.p.schedule = d.p.pp > 1 ? schedules[static_cast<std::size_t>(pick({0, 1, 2, 3, 4, 5}))] : Schedule::one_f_one_b;
  if (d.p.schedule == Schedule::interleaved) d.p.vpp = pick({2, 4});
  d.t.precision = profile.default_precision;
  d.t.micro_batch = pick({1, 2});
  d.t.seq_len = pick({1024, 4096});
  d.t.global_batch = pick({0, 1}) == 1 || d.p.schedule == Schedule::gpipe ? std::optional<std::int64_t>(512) : std::nullopt;
  if (profile.name == "torchtitan") {
    d.t.reshard = static_cast<ReshardPolicy>(pick({0, 1, 2}));
    d.t.compile = pick({0, 1}) == 1;
  } else {
    d.t.zero = static_cast<int>(pick({0, 1, 2, 3}));
  }
  d.t.recompute = static_cast<Recompute>(pick({0, 1, 2}));
  if (profile.name == "paper" && d.t.recompute == Recompute::selective) d.t.recompute = Recompute::full;
  if (d.t.recompute == Recompute::full && profile.name != "paper") {
    d.t.recompute_method = static_cast<RecomputeMethod>(pick({0, 1}));
    d.t.recompute_num_layers = pick({1, 2});
  }
  if (profile.models_fp8_and_routing && pick({0, 1, 2}) == 0) d.t.fp8 = static_cast<Fp8Recipe>(pick({1, 2, 3, 4}));
  d.t.overhead = static_cast<OverheadPoint>(pick({0, 1, 2}));
  return d;
}

Bytes item_sum(const StageReport& st, Category c) {
  Bytes b;
  for (const auto& it : st.ledger) {
    if (it.category == c) b += it.bytes;
  }
  return b;
}

void expect_same_totals(const StageBytes& a, const StageBytes& b, const std::string& where) {
  EXPECT_EQ(a.weights, b.weights) << where;
  EXPECT_EQ(a.gradients, b.gradients) << where;
  EXPECT_EQ(a.optimizer, b.optimizer) << where;
  EXPECT_EQ(a.activations, b.activations) << where;
  EXPECT_EQ(a.buffers, b.buffers) << where;
  EXPECT_EQ(a.fragmentation, b.fragmentation) << where;
  EXPECT_EQ(a.runtime, b.runtime) << where;
  EXPECT_EQ(a.host, b.host) << where;
}

TEST(LedgerProperty, ItemDetailAndOneStageAloneNeverChangeTheTotalsOnRandomLayouts) {
  std::mt19937_64 rng(20261201);
  int compared = 0;
  for (const char* preset : {"deepseek-v3", "deepseek-v2-lite", "mixtral-8x7b", "llama-3.1-8b", "qwen3-30b-a3b"}) {
    const ModelSpec m = load_model(preset);
    const Inventory inv = build_inventory(m);
    for (const Profile* profile : {&megatron_profile(), &paper_profile(), &torchtitan_profile()}) {
      if (profile->name == "torchtitan" && m.is_moe()) continue;
      const CompiledModel cm = compile_model(m, inv, *profile);
      const EvalCachePtr cache = make_eval_cache();
      MemoryReport reused;
      StageReport probe;
      for (int i = 0; i < 40; ++i) {
        const Drawn d = draw(rng, m, *profile);
        Layout layout;
        MemoryReport items;
        try {
          layout = resolve_layout(m, d.p);
          items = analyze(cm, layout, d.t, Detail::items);
        } catch (const InputError&) {
          continue;  // an invalid draw
        }
        analyze_into(cm, layout, d.t, reused, cache.get(), Detail::totals);
        ASSERT_EQ(items.stages.size(), reused.stages.size());
        for (std::size_t s = 0; s < items.stages.size(); ++s) {
          const auto& st = items.stages[s];
          const std::string where = std::string(preset) + " " + std::string(profile->name) + " draw " + std::to_string(i) +
                                    " stage " + std::to_string(s);
          expect_same_totals(st.bytes, reused.stages[s].bytes, where);
          EXPECT_TRUE(reused.stages[s].ledger.empty()) << where;
          const StageBytes summed{item_sum(st, Category::weights),     item_sum(st, Category::gradients),
                                  item_sum(st, Category::optimizer),   item_sum(st, Category::activations),
                                  item_sum(st, Category::buffers),     item_sum(st, Category::fragmentation),
                                  item_sum(st, Category::runtime),     item_sum(st, Category::host)};
          expect_same_totals(st.bytes, summed, where);
          // Search's probe: one stage costed alone gives the same total (its bound on the peak).
          EXPECT_EQ(analyze_stage_total(cm, layout, d.t, static_cast<std::int64_t>(s), probe, cache.get()), st.bytes.total())
              << where;
        }
        EXPECT_EQ(items.peak_stage, reused.peak_stage);
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 150);
}

// The reference analysis's layout: TP 2, PP 16, DP 32, EP 8, sequence parallel.
Layout reference_layout(const ModelSpec& m) {
  ParallelConfig p;
  p.tp = 2;
  p.pp = 16;
  p.dp = 32;
  p.ep = 8;
  p.sp = true;
  return resolve_layout(m, p);
}

TEST(Ledger, ExplainIsTheStagesLedger) {
  const ModelSpec m = load_model("deepseek-v3");
  const Inventory inv = build_inventory(m);
  const Layout layout = reference_layout(m);
  TrainingConfig t;
  t.zero = 1;
  const MemoryReport r = analyze(m, inv, megatron_profile(), layout, t, Detail::items);
  const auto items = explain_stage(m, inv, megatron_profile(), layout, t, 15);
  const auto& ledger = r.stages[15].ledger;
  ASSERT_EQ(items.size(), ledger.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(items[i].category, name_of(ledger[i].category));
    EXPECT_EQ(items[i].item, ledger[i].item);
    EXPECT_EQ(items[i].bytes, ledger[i].bytes);
  }
}

// Hand-derived: DeepSeek-V3 under the paper's layout keeps, per micro-batch and device, the
// saved tensors of its layers; every activation item's bytes are elements x dtype width x its
// multiplier (layers x micro-batches in flight).
TEST(Ledger, ActivationItemsAreElementsTimesWidthTimesInstances) {
  const ModelSpec m = load_model("deepseek-v3");
  const Inventory inv = build_inventory(m);
  const Layout layout = reference_layout(m);
  TrainingConfig t;
  const MemoryReport r = analyze(m, inv, megatron_profile(), layout, t, Detail::items);
  int checked = 0;
  for (const auto& st : r.stages) {
    for (const auto& it : st.ledger) {
      if (it.category != Category::activations || !it.dtype || it.elements.value() == 0) continue;
      EXPECT_EQ(it.bytes.value(), it.elements.value() * bits_of(*it.dtype) / 8 * static_cast<std::uint64_t>(it.multiplier))
          << it.item;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
