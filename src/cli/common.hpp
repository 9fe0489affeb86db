// Options shared by the subcommands (model, layout, training, output) and their conversion into
// the library's plain structs. All parsing of user text happens here, with named errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/table.hpp"
#include "moemem/activation.hpp"
#include "moemem/config.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"

namespace moemem::cli {

struct ModelOptions {
  std::string model = "deepseek-v3";
  std::optional<std::int64_t> mtp;
};

struct LayoutOptions {
  std::int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, etp = 1;
  bool sp = false;
  std::string layers_per_stage;
};

struct TrainingOptions {
  std::int64_t micro_batch = 1, seq_len = 4096;
  std::int64_t zero = 0;
  std::string recompute = "none";
  std::string overhead = "low";
  std::string profile = "paper";
  std::string params_dtype, main_grads_dtype, main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype;
};

void add_model_options(CLI::App& app, ModelOptions& o);
void add_layout_options(CLI::App& app, LayoutOptions& o);
void add_training_options(CLI::App& app, TrainingOptions& o);
void add_format_option(CLI::App& app, std::string& format);

// Parses a whole decimal integer; the error names `field` and repeats the text as typed.
std::int64_t parse_int(const std::string& text, const char* field);
// Registers an integer flag parsed by parse_int.
void add_int(CLI::App& app, const char* flag, std::int64_t& target, const char* help);

// Parses "4,4,4,1"; every item must be a non-negative integer.
std::vector<std::int64_t> parse_int_list(const std::string& text, const char* field);

ModelSpec load_model_for(const ModelOptions& o, const Profile& profile);
ParallelConfig to_parallel(const LayoutOptions& o);
TrainingConfig to_training(const TrainingOptions& o, const Profile& profile);

// Everything analyze needs, resolved and validated.
struct Evaluation {
  const Profile* profile = nullptr;
  ModelSpec model;
  Inventory inventory;
  Layout layout;
  TrainingConfig training;
};
Evaluation resolve(const ModelOptions& mo, const LayoutOptions& lo, const TrainingOptions& to);

}  // namespace moemem::cli
