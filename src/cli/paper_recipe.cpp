// `moemem paper --recipe deepseek-v3`: the DeepSeek-V3 report's own training run (arXiv
// 2412.19437 §3.2-3.3: 2,048 H800, TP1, PP16 under DualPipe, EP64 over 8 nodes, ZeRO-1 over
// DP128, FP8, 4K sequences, batch 15,360) beside the reference analysis, stage by stage. The
// reference keeps its own conventions (TP2/PP16/EP8, BF16, no runtime); the run is analyze's
// megatron profile with --recipe deepseek-v3, so its figures are those of a documented command:
//   moemem analyze --model deepseek-v3 --pp 16 --ep 64 --dp 128 --schedule dualpipe
//     --recipe deepseek-v3 --seq-len 4096 --global-batch 15360 --gpu h800-80g --no-margin
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "moemem/analyze.hpp"
#include "moemem/errors.hpp"
#include "moemem/gpu.hpp"

namespace moemem::cli {

namespace {

std::string stage_layers(const StageReport& s) {
  std::string text = s.has_embedding ? "E+" : "";
  text += fmt::format("{} layers", s.layers.num_layers);
  if (s.has_head) text += "+H";
  if (s.mtp_depths > 0) text += fmt::format("+MTP{}", s.mtp_depths);
  return text;
}

}  // namespace

Table recipe_run_table(const ModelOptions& model, const MemoryReport& reference, std::string_view recipe) {
  if (recipe != "deepseek-v3") {
    throw InputError("--recipe", std::string(recipe), "deepseek-v3 (the reference analysis is of DeepSeek-V3)");
  }
  LayoutOptions lo;
  lo.pp = 16;
  lo.ep = 64;
  lo.dp = 128;
  lo.schedule = "dualpipe";
  TrainingOptions to;
  to.numerics.recipe = "deepseek-v3";
  to.batch.seq_len = 4096;
  to.batch.global_batch = 15360;
  const Evaluation e = resolve(model, lo, to);
  const MemoryReport run = analyze(e.model, e.inventory, *e.profile, e.layout, e.training);
  const Bytes h800 = lookup_gpu("h800-80g").capacity;
  Table t;
  t.title = fmt::format(
      "The DeepSeek-V3 report's run (recipe deepseek-v3: TP1, PP16 DualPipe, EP64, DP128 ZeRO-1, FP8, s 4096) beside the "
      "reference analysis (TP{} PP{} EP{}, its conventions), per stage; GiB on one GPU, H800 {:.2f} GiB",
      reference.layout.config.tp, reference.layout.config.pp, reference.layout.config.ep, h800.gib());
  t.columns = {"stage", "reference layers", "reference GiB", "run layers", "run states GiB", "run activations GiB",
               "run total GiB", "H800 headroom GiB", "run host GiB"};
  for (std::size_t s = 0; s < run.stages.size() && s < reference.stages.size(); ++s) {
    const auto& r = reference.stages[s];
    const auto& d = run.stages[s];
    const Bytes states = d.bytes.weights + d.bytes.gradients + d.bytes.optimizer;
    const double headroom = h800.gib() - d.bytes.total().gib();
    t.rows.push_back({std::to_string(s), stage_layers(r), GibBytes{r.bytes.total().value()}, stage_layers(d),
                      GibBytes{states.value()}, GibBytes{d.bytes.activations.value()}, GibBytes{d.bytes.total().value()},
                      fmt::format("{:.2f}", headroom), GibBytes{d.bytes.host.value()}});
  }
  return t;
}

}  // namespace moemem::cli
