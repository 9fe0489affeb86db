// The subcommands. Each registers its options on a CLI11 sub-app and runs after parsing.
#pragma once

#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/common.hpp"

namespace moemem::cli {

struct AnalyzeCommand {
  ModelOptions model;
  std::string megatron_args;  // consumed before parsing (see cli.cpp); kept for --help
  LayoutOptions layout;
  TrainingOptions training;
  std::string format = "table";
  std::optional<std::int64_t> explain;  // a stage to itemise (analyze --explain N, explain --stage N)
  CLI::App* app = nullptr;
  // `name` is "analyze" or "explain" (the same options; explain requires --stage).
  void setup(CLI::App& root, const char* name = "analyze");
  void run(std::ostream& out, std::ostream& err) const;
};

struct CountCommand {
  ModelOptions model;
  bool no_router_bias = false;
  std::string by = "module";
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
  CLI::App* app = nullptr;
  void setup(CLI::App& root);
  void run(std::ostream& out, std::ostream& err) const;
};

// Prints "note: ..." lines for config keys moemem did not recognise.
void report_unrecognised_keys(const ModelSpec& m, std::ostream& err);

}  // namespace moemem::cli
