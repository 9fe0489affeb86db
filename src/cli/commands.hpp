// The subcommands. Each registers its options on a CLI11 sub-app and runs after parsing.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/common.hpp"
#include "moemem/report.hpp"
#include "moemem/validate.hpp"

namespace moemem::cli {

struct AnalyzeCommand {
  ModelOptions model;
  MegatronScript megatron;  // --megatron-args, read after parsing (cli.cpp)
  LayoutOptions layout;
  TrainingOptions training;
  std::string format = "table";
  std::optional<std::int64_t> explain;  // a stage to itemise (analyze --explain N, explain --stage N)
  bool no_margin = false;               // fit verdict on the prediction alone, without the validation band
  std::string max_memory_fraction = "1";  // --max-memory-fraction: the usable share of the GPU (search's flag)
  bool time = false;                    // --time: itemise the step-time estimate instead (docs/formulas.md, "Step time")
  bool is_explain = false;              // the `explain` subcommand (--stage or --time required)
  std::int64_t gpus_per_node = 8;       // the step-time model's node (search's --gpus-per-node)
  CLI::App* app = nullptr;
  // `name` is "analyze" or "explain" (the same options; explain requires --stage).
  void setup(CLI::App& root, const char* name = "analyze");
  void run(std::ostream& out, std::ostream& err) const;
};

struct CountCommand {
  ModelOptions model;
  std::string megatron_args;  // --megatron-args: the model a Megatron launch script gives
  bool no_router_bias = false;
  std::string by = "module";
  std::string format = "table";
  CLI::App* app = nullptr;
  void setup(CLI::App& root);
  void run(std::ostream& out, std::ostream& err) const;
};

struct ModelsCommand {
  std::string format = "table";
  CLI::App* app = nullptr;
  void setup(CLI::App& root);
  void run(std::ostream& out, std::ostream& err) const;
};

struct PaperCommand {
  ModelOptions model;
  LayoutOptions layout;
  TrainingOptions training;
  std::int64_t stage = 1;
  std::string format = "table";
  std::string recipe;  // deepseek-v3: the report's own run beside the reference (paper_recipe.cpp)
  CLI::App* app = nullptr;
  void setup(CLI::App& root);
  void run(std::ostream& out, std::ostream& err) const;
};
// The table `paper --recipe` adds: the recipe's published run beside the reference, per stage.
[[nodiscard]] Table recipe_run_table(const ModelOptions& model, const MemoryReport& reference, std::string_view recipe);

struct SearchCommand {
  ModelOptions model;
  TrainingOptions training;
  std::int64_t gpus = 0, gpus_per_node = 8, top = 10, threads = 0;
  std::int64_t tp_max = 8, pp_max = 0, ep_max = 0, cp_max = 1, vpp_max = 4, micro_batch_max = 4;
  std::optional<std::int64_t> tp, pp, cp, ep, etp, vpp, micro_batch;
  std::string schedules, recomputes, zero_stages = "0,1", max_memory_fraction = "0.95";
  std::string format = "table";
  CLI::App* app = nullptr;
  void setup(CLI::App& root);
  // Returns the exit code: 0 when some layout fits, 1 when none does.
  int run(std::ostream& out, std::ostream& err) const;
};

struct ValidateCommand {
  // Issue 12's thresholds: allocated and reserved median <= 3%, max <= 10%; device totals median
  // <= 5%; mean signed error not below -2%.
  std::string set, min_confidence = "medium", max_median_error = "3", max_error = "10";
  std::string max_device_median_error = "5", min_mean_error = "-2", format = "table";
  bool throughput = false;  // --throughput: the step-time model against published throughput (median <= 15%, max <= 30%)
  CLI::App* app = nullptr;
  void setup(CLI::App& root);
  // Returns the exit code: 0 within the thresholds, 4 past them.
  int run(std::ostream& out, std::ostream& err) const;
};

// The largest file read_text_file reads: 64 MiB.
inline constexpr std::uintmax_t kMaxInputFileBytes = std::uintmax_t{64} << 20;
// A file's text; the error names `flag` when the path is not a readable file or is larger than
// kMaxInputFileBytes.
std::string read_text_file(const std::string& path, const char* flag);

// The request a validation record's moemem object describes: its arguments parsed as analyze's,
// its model file read from the compiled-in set (set_dir empty) or beside the set's file.
Request record_request_of(const RecordSpec& spec, const std::string& set_dir);
// `validate --throughput` (src/cli/validate_throughput.cpp): the exit code, 0 within the thresholds, 4 past them.
int validate_throughput(const ValidateCommand& c, std::ostream& out, std::ostream& err);

// How far published measurements fell from moemem's predictions, for runs of one profile and
// metric: measured / predicted - 1, its smallest and largest value over the public set's
// predicted records (confidence medium and up). Computed once per process.
struct Band {
  std::int64_t records = 0;
  std::int64_t own = 0;  // of them, measured by moemem's developers (the device set)
  double low_pct = 0, high_pct = 0;
};
std::optional<Band> measured_band(const std::string& profile, const std::string& metric);

// Reads a Megatron script's text (named by c.megatron.path) into c.megatron, as --megatron-args
// does after parsing: its errors, its notes (to `err`), repeated settings, a --model that differs.
void read_megatron_text(AnalyzeCommand& c, const std::string& text, std::ostream& err);

// What moemem assumed, mapped or ignored in the script read (none without one): the notes on
// stderr, which analyze also lists among its assumptions.
std::vector<std::string> megatron_notes(const MegatronScript& m);

// Config keys moemem did not recognise: an error under --strict (`o.strict`), else a "note: ..."
// line on `err` and one warning each, returned for the JSON output's `warnings`.
std::vector<std::string> model_warnings(const ModelSpec& m, const ModelOptions& o, std::ostream& err);

}  // namespace moemem::cli
