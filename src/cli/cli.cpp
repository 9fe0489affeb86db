#include "cli/cli.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "moemem/errors.hpp"
#include "moemem/megatron_args.hpp"

namespace moemem::cli {

void report_unrecognised_keys(const ModelSpec& m, std::ostream& err) {
  if (m.unrecognised_keys.empty()) return;
  err << fmt::format("note: {}: config keys not understood (they may change memory; check them): {}\n", m.name,
                     fmt::join(m.unrecognised_keys, ", "));
}

namespace {

std::string read_text_file(const std::string& path, const char* flag) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw InputError(flag, path, "the path of a readable file");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Compares the script's architecture with the --model the user named.
void check_same_model(const ModelSpec& script, const ModelSpec& named) {
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> fields[] = {
      {"--num-layers", {script.num_layers, named.num_layers}},
      {"--hidden-size", {script.hidden, named.hidden}},
      {"--num-attention-heads", {script.num_heads, named.num_heads}},
      {"--num-experts", {script.moe.num_routed_experts, named.moe.num_routed_experts}},
      {"--moe-router-topk", {script.moe.top_k, named.moe.top_k}},
      {"--moe-ffn-hidden-size", {script.moe.expert_ffn, named.moe.expert_ffn}},
      {"--vocab-size", {script.vocab, named.vocab}},
  };
  for (const auto& [flag, values] : fields) {
    if (values.first != values.second) {
      throw InputError(fmt::format("--megatron-args {}", flag), std::to_string(values.first),
                       fmt::format("{} as in --model {}", values.second, named.name));
    }
  }
}

// Rewrites `analyze --megatron-args FILE ...` into `analyze <translated flags> ...`; flags the
// user gives inline win over the script's. Returns the script's model, if it describes one.
std::optional<ModelSpec> expand_megatron_args(std::vector<std::string>& args, std::ostream& err) {
  if (args.size() < 2 || (args[1] != "analyze" && args[1] != "explain")) return std::nullopt;
  std::string path;
  std::vector<std::string> user;
  for (std::size_t i = 2; i < args.size(); ++i) {
    if (args[i] == "--megatron-args") {
      if (i + 1 >= args.size()) throw InputError("--megatron-args", "missing", "a file path");
      path = args[++i];
    } else if (args[i].rfind("--megatron-args=", 0) == 0) {
      path = args[i].substr(16);
    } else {
      user.push_back(args[i]);
    }
  }
  if (path.empty()) return std::nullopt;
  const MegatronArgs ma = parse_megatron_args(read_text_file(path, "--megatron-args"), path);
  std::set<std::string> given;
  for (const auto& u : user) {
    if (u.rfind("--", 0) == 0) given.insert(u.substr(0, u.find('=')));
  }
  std::vector<std::string> out{args[0], args[1]};
  std::map<std::string, std::string> value_of;
  for (const auto& [flag, value] : ma.flags) {
    if (given.contains(flag)) continue;
    out.push_back(flag);
    if (!value.empty()) out.push_back(value);
    value_of[flag] = value;
  }
  // Megatron derives dp from the world size; so does moemem when the script gives it.
  if (ma.world_size && !given.contains("--dp")) {
    auto degree = [&](const char* flag) -> std::int64_t {
      for (std::size_t i = 0; i + 1 < user.size(); ++i) {
        if (user[i] == flag) return parse_int(user[i + 1], flag);
      }
      return value_of.contains(flag) ? parse_int(value_of[flag], flag) : 1;
    };
    const std::int64_t per_replica = degree("--tp") * degree("--pp") * degree("--cp");
    if (per_replica < 1 || *ma.world_size % per_replica != 0) {
      throw InputError("--megatron-args world size", std::to_string(*ma.world_size),
                       fmt::format("a multiple of tp*pp*cp = {}", per_replica));
    }
    out.push_back("--dp");
    out.push_back(std::to_string(*ma.world_size / per_replica));
  }
  if (!ma.ignored.empty()) {
    err << fmt::format("note: --megatron-args {}: flags not modelled (assumed not to change memory): {}\n", path,
                       fmt::join(ma.ignored, "; "));
  }
  if (ma.model && !ma.world_size && !given.contains("--dp")) {
    err << "note: --megatron-args: the script does not give the world size; pass --dp (using 1)\n";
  }
  out.insert(out.end(), user.begin(), user.end());
  args = std::move(out);
  return ma.model;
}

}  // namespace

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  std::vector<std::string> args(argv, argv + argc);
  std::optional<ModelSpec> script_model;
  try {
    script_model = expand_megatron_args(args, err);
  } catch (const InputError& e) {
    err << "moemem: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  std::vector<const char*> arg_ptrs;
  for (const auto& a : args) arg_ptrs.push_back(a.c_str());
  return run_expanded(static_cast<int>(arg_ptrs.size()), arg_ptrs.data(), script_model, out, err);
}

int run_expanded(int argc, const char* const* argv, const std::optional<ModelSpec>& script_model, std::ostream& out,
                 std::ostream& err) {
  CLI::App app{"moemem: per-GPU memory of LLM training steps (MoE, MLA, every parallel layout)", "moemem"};
  app.require_subcommand(1, 1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");
  AnalyzeCommand analyze;
  AnalyzeCommand explain;
  CountCommand count;
  PaperCommand paper;
  SearchCommand search_cmd;
  ValidateCommand validate_cmd;
  analyze.setup(app);
  explain.setup(app, "explain");
  count.setup(app);
  paper.setup(app);
  search_cmd.setup(app);
  validate_cmd.setup(app);

  // A first word that is neither a flag nor a command is most likely a misspelt command.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string first = argv[1];
    if (first != "analyze" && first != "explain" && first != "count" && first != "paper" && first != "search" &&
        first != "validate") {
      err << fmt::format(
          "moemem: error: command: '{}' is not accepted; expected one of analyze, explain, count, paper, search, validate\n",
          first);
      return kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const InputError& e) {
    err << "moemem: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    err << "moemem: error: " << e.what() << "\n";
    err << "Run 'moemem --help' for the commands and flags.\n";
    return kExitBadInput;
  }

  try {
    if (script_model) {
      for (AnalyzeCommand* c : {&analyze, &explain}) {
        if (!c->app->parsed()) continue;
        if (c->app->count("--model") > 0) check_same_model(*script_model, load_model(c->model.model));
        else c->model.spec = script_model;
      }
    }
    if (analyze.app->parsed()) analyze.run(out, err);
    else if (explain.app->parsed()) explain.run(out, err);
    else if (count.app->parsed()) count.run(out, err);
    else if (paper.app->parsed()) paper.run(out, err);
    else if (search_cmd.app->parsed()) return search_cmd.run(out, err);
    else if (validate_cmd.app->parsed()) return validate_cmd.run(out, err);
  } catch (const InputError& e) {
    err << "moemem: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace moemem::cli
