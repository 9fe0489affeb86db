// Google Benchmark for `moemem search`: full per-stage evaluations per second on one core, and
// the wall time of the whole DeepSeek-V3 layout space on 2,048 GPUs.
#include <benchmark/benchmark.h>

#include "moemem/config.hpp"
#include "moemem/search.hpp"

namespace {

using namespace moemem;

struct SearchFixture {
  ModelSpec model = load_model("deepseek-v3");
  Inventory inventory = build_inventory(model);
  CompiledModel cm = compile_model(model, inventory, megatron_profile());
  SearchSpace space;
  SearchFixture() {
    space.gpus = 2048;
    space.capacity = Bytes(81559ull * 1048576ull);  // h800-80g
    space.base.precision = megatron_profile().default_precision;
    space.base.global_batch = 15360;
  }
};

// The whole space (every degree, schedule, split, micro-batch, optimizer and recompute choice),
// every stage of each, on `threads` threads: wall time per search.
void BM_SearchDeepSeekV3_2048Gpus(benchmark::State& state) {
  const SearchFixture f;
  std::int64_t evaluated = 0;
  for (auto _ : state) {
    const SearchResult r = search(f.cm, f.space, static_cast<int>(state.range(0)));
    evaluated = r.evaluated;
    benchmark::DoNotOptimize(r);
  }
  state.counters["layouts"] = static_cast<double>(evaluated);
  state.counters["layouts_per_second"] =
      benchmark::Counter(static_cast<double>(evaluated) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SearchDeepSeekV3_2048Gpus)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same space ranked by the step-time model (H800's figures): every layout that fits timed.
void BM_SearchDeepSeekV3_2048Gpus_Timed(benchmark::State& state) {
  SearchFixture f;
  f.space.perf = lookup_gpu_perf("h800-80g");
  std::int64_t evaluated = 0;
  for (auto _ : state) {
    const SearchResult r = search(f.cm, f.space, static_cast<int>(state.range(0)), nullptr, 5, 10);
    evaluated = r.evaluated;
    benchmark::DoNotOptimize(r);
  }
  state.counters["layouts"] = static_cast<double>(evaluated);
  state.counters["layouts_per_second"] =
      benchmark::Counter(static_cast<double>(evaluated) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SearchDeepSeekV3_2048Gpus_Timed)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// One step-time estimate of DeepSeek-V3's own run (TP1 PP16 DualPipe EP64, DeepSeek's recipe).
void BM_StepTimeDeepSeekV3(benchmark::State& state) {
  const SearchFixture f;
  ParallelConfig p;
  p.pp = 16;
  p.dp = 128;
  p.ep = 64;
  p.schedule = Schedule::dualpipe;
  const Layout l = resolve_layout(f.model, p);
  TrainingConfig t = f.space.base;
  const StepTimeModel sm = make_step_time_model(f.cm);
  const GpuPerf gpu = lookup_gpu_perf("h800-80g");
  for (auto _ : state) benchmark::DoNotOptimize(estimate_step_time(sm, l, t, gpu));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StepTimeDeepSeekV3);

// One full per-stage evaluation of a resolved DeepSeek-V3 layout (PP16, megatron profile).
void BM_EvaluateOneLayoutDeepSeekV3(benchmark::State& state) {
  const SearchFixture f;
  ParallelConfig p;
  p.tp = 2;
  p.pp = 16;
  p.dp = 64;
  p.ep = 8;
  p.sp = true;
  const Layout l = resolve_layout(f.model, p);
  TrainingConfig t = f.space.base;
  t.zero = 1;
  MemoryReport r;
  const EvalCachePtr cache = make_eval_cache();
  for (auto _ : state) {
    analyze_into(f.cm, l, t, r, cache.get(), Detail::totals);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EvaluateOneLayoutDeepSeekV3);

}  // namespace
