// Google Benchmark: one full 16-stage DeepSeek-V3 `analyze` evaluation (no I/O), the paper
// layout (PP16/TP2/EP8/DP32), and the parts it is made of.
#include <benchmark/benchmark.h>

#include "moemem/config.hpp"
#include "moemem/analyze.hpp"

namespace {

using namespace moemem;

struct Fixture {
  ModelSpec model = load_model("deepseek-v3");
  Inventory inventory;
  Layout layout;
  TrainingConfig training;
  Fixture() {
    model.mtp_layers = 0;
    inventory = build_inventory(model);
    ParallelConfig p;
    p.tp = 2;
    p.pp = 16;
    p.dp = 32;
    p.ep = 8;
    p.sp = true;
    layout = resolve_layout(model, p);
    training.precision = paper_profile().default_precision;
  }
};

// The whole evaluation of every stage, from a parsed model and built inventory (which this
// overload folds into per-layer-kind tensor groups on every call).
void BM_AnalyzeDeepSeekV3_16Stages(benchmark::State& state) {
  const Fixture f;
  for (auto _ : state) {
    auto r = analyze(f.model, f.inventory, paper_profile(), f.layout, f.training);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AnalyzeDeepSeekV3_16Stages);

// The same from a model compiled once (what a search pays per layout).
void BM_AnalyzeCompiledDeepSeekV3_16Stages(benchmark::State& state) {
  const Fixture f;
  const CompiledModel cm = compile_model(f.model, f.inventory, paper_profile());
  for (auto _ : state) {
    auto r = analyze(cm, f.layout, f.training);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AnalyzeCompiledDeepSeekV3_16Stages);

// The default (megatron) profile on the same layout, 1F1B with 32 micro-batches per step.
void BM_AnalyzeDeepSeekV3_16Stages_Megatron(benchmark::State& state) {
  Fixture f;
  f.model.mtp_layers = 1;
  f.inventory = build_inventory(f.model);
  f.training.precision = megatron_profile().default_precision;
  f.training.global_batch = 1024;
  f.training.zero = 1;
  const CompiledModel cm = compile_model(f.model, f.inventory, megatron_profile());
  for (auto _ : state) {
    auto r = analyze(cm, f.layout, f.training);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AnalyzeDeepSeekV3_16Stages_Megatron);

// Layout validation plus evaluation: what a search would pay per candidate layout.
void BM_ResolveAndAnalyzeDeepSeekV3(benchmark::State& state) {
  const Fixture f;
  for (auto _ : state) {
    const Layout l = resolve_layout(f.model, f.layout.config);
    auto r = analyze(f.model, f.inventory, paper_profile(), l, f.training);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ResolveAndAnalyzeDeepSeekV3);

// Building the tensor inventory (done once per model).
void BM_BuildInventoryDeepSeekV3(benchmark::State& state) {
  const Fixture f;
  for (auto _ : state) {
    auto inv = build_inventory(f.model);
    benchmark::DoNotOptimize(inv);
  }
}
BENCHMARK(BM_BuildInventoryDeepSeekV3);

// Parsing the preset config.json.
void BM_LoadPresetDeepSeekV3(benchmark::State& state) {
  for (auto _ : state) {
    auto m = load_model("deepseek-v3");
    benchmark::DoNotOptimize(m);
  }
}
BENCHMARK(BM_LoadPresetDeepSeekV3);

}  // namespace
