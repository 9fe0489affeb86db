#include "cli/cli.hpp"

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "cli/compare.hpp"
#include "cli/embedded.hpp"
#include "moemem/errors.hpp"
#include "moemem/megatron_args.hpp"

namespace moemem::cli {

std::vector<std::string> model_warnings(const ModelSpec& m, const ModelOptions& o, std::ostream& err) {
  if (m.unrecognised_keys.empty()) return {};
  if (o.strict) {
    throw InputError(fmt::format("{}: config keys", m.name), fmt::format("{}", fmt::join(m.unrecognised_keys, ", ")),
                     "only keys moemem understands under --strict (they may change memory: check and remove them, "
                     "or drop --strict to read them as warnings)");
  }
  err << fmt::format("note: {}: config keys not understood (they may change memory; check them): {}\n", m.name,
                     fmt::join(m.unrecognised_keys, ", "));
  std::vector<std::string> out;
  for (const auto& key : m.unrecognised_keys) {
    out.push_back(fmt::format("{}: config key '{}' not understood (it may change memory)", m.name, key));
  }
  return out;
}

std::string read_text_file(const std::string& path, const char* flag) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw InputError(flag, path, "the path of a readable file");
  // Every file moemem reads (a launch script, a measurement set, a model file) is text of a few
  // MB at most; a larger one is a mistake, not something to read into memory.
  if (const auto size = std::filesystem::file_size(path, ec); !ec && size > kMaxInputFileBytes) {
    throw InputError(flag, fmt::format("{} ({} bytes)", path, size), fmt::format("a file of at most {} bytes (the input size limit)", kMaxInputFileBytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// The flags given inline, in every spelling (--sp and --sequence-parallel alike): the settings
// the script's do not replace.
std::set<std::string> given_flags(const CLI::App& app) {
  std::set<std::string> given;
  for (const CLI::Option* o : app.get_options()) {
    if (o->count() == 0) continue;
    for (const auto& name : o->get_lnames()) given.insert("--" + name);
  }
  return given;
}

// The script's world size must divide by tp*pp*cp before anything else is said: the degrees
// given inline, else the script's.
void check_world_size(const MegatronSettings& s, const LayoutOptions& lo, const std::set<std::string>& given) {
  Request degrees;
  degrees.parallel.tp = lo.tp;
  degrees.parallel.pp = lo.pp;
  degrees.parallel.cp = lo.cp;
  apply_megatron_settings(s, degrees, given);
}

void print_notes(const MegatronScript& m, std::ostream& err) {
  for (const auto& n : megatron_notes(m)) err << fmt::format("note: --megatron-args {}: {}\n", m.path, n);
  const MegatronSettings& s = *m.settings;
  if (s.model && !s.world_size && !m.given.contains("--dp")) {
    err << "note: --megatron-args: the script does not give the world size; pass --dp (using 1)\n";
  }
}

// A setting the script gives twice (and the user not inline): Megatron's argparse keeps the last
// value, which is what moemem read, and says so (a base array with overrides appended is a common
// pattern). The virtual pipeline degree from two different flags is refused: Megatron derives it
// from one of them.
void refuse_repeated(MegatronSettings& s, const CLI::App& app, const std::set<std::string>& given) {
  for (const CLI::Option* o : app.get_options()) {
    const std::string name = o->get_name();
    const auto it = s.repeated.find(name);
    if (it == s.repeated.end() || given.contains(name)) continue;
    if (name == "--vpp") throw CLI::ArgumentMismatch::AtMost(name, 1, static_cast<std::size_t>(it->second));
    s.notes.push_back(fmt::format("the script gives the flag for moemem's {} {} times: the last value is read, as "
                                  "Megatron's argparse keeps it (if the script runs two launches, pass the setting "
                                  "inline to choose)",
                                  name, it->second));
  }
}

// Reads `--megatron-args FILE` once the command line is parsed: the script's errors, its notes,
// a repeated setting, a --model that is not the script's, in that order.
void read_megatron_script(AnalyzeCommand& c, std::ostream& err) {
  MegatronScript& m = c.megatron;
  if (c.app->count("--megatron-args") == 0) return;
  if (m.path.empty()) throw InputError("--megatron-args", "missing", "a file path");
  read_megatron_text(c, read_text_file(m.path, "--megatron-args"), err);
}

}  // namespace

std::vector<std::string> megatron_notes(const MegatronScript& m) {
  std::vector<std::string> out;
  if (!m.settings) return out;
  const MegatronSettings& s = *m.settings;
  if (!s.ignored.empty()) {
    out.push_back(fmt::format("flags ignored (Megatron's source shows they change no GPU memory): {}",
                              fmt::join(s.ignored, "; ")));
  }
  if (!s.unrecognised.empty()) {
    out.push_back(fmt::format("flags not recognised (assumed not to change memory; check them): {}",
                              fmt::join(s.unrecognised, "; ")));
  }
  for (const auto& n : s.notes) out.push_back(n);
  if (!s.seq_len && !m.given.contains("--seq-len")) {
    out.push_back("the script gives no --seq-length: assumed 4096 (pass --seq-len to change it)");
  }
  return out;
}

void read_megatron_text(AnalyzeCommand& c, const std::string& text, std::ostream& err) {
  MegatronScript& m = c.megatron;
  if (c.app->count("--megatron-args") > 1) {
    throw InputError("--megatron-args", "given twice", "one launch script (its flags, or moemem's, for the rest)");
  }
  MegatronSettings s = parse_megatron_args(text, m.path);
  m.given = given_flags(*c.app);
  check_world_size(s, c.layout, m.given);
  refuse_repeated(s, *c.app, m.given);
  if (s.model && m.given.contains("--model")) {
    if (auto e = model_disagreement(*s.model, load_model(c.model.model))) throw *e;
  }
  m.settings = std::move(s);
  print_notes(m, err);
}

namespace {

struct Commands {
  AnalyzeCommand analyze;
  AnalyzeCommand explain;
  CountCommand count;
  ModelsCommand models;
  PaperCommand paper;
  SearchCommand search;
  ValidateCommand validate;
  CompareCommand compare;

  void setup(CLI::App& app) {
    analyze.setup(app);
    explain.setup(app, "explain");
    count.setup(app);
    models.setup(app);
    paper.setup(app);
    search.setup(app);
    validate.setup(app);
    compare.setup(app);
  }

  // Runs the command parsed; returns the exit code.
  int run(std::ostream& out, std::ostream& err) {
    if (analyze.app->parsed()) analyze.run(out, err);
    else if (explain.app->parsed()) explain.run(out, err);
    else if (count.app->parsed()) count.run(out, err);
    else if (models.app->parsed()) models.run(out, err);
    else if (paper.app->parsed()) paper.run(out, err);
    else if (search.app->parsed()) return search.run(out, err);
    else if (validate.app->parsed()) return validate.run(out, err);
    else if (compare.app->parsed()) compare.run(out, err);
    return kExitOk;
  }

  // A model given in-process (Embedding::model) replaces --model for every command that reads one.
  void use_model(const ModelSpec& m) {
    for (ModelOptions* o : {&analyze.model, &explain.model, &count.model, &search.model}) o->spec = m;
  }
};

// A first word that is neither a flag nor a command is most likely a misspelt command.
bool misspelt_command(int argc, const char* const* argv, std::ostream& err) {
  if (argc <= 1 || argv[1][0] == '-') return false;
  const std::string first = argv[1];
  if (first == "analyze" || first == "explain" || first == "count" || first == "models" || first == "paper" ||
      first == "search" || first == "validate" || first == "compare") {
    return false;
  }
  err << fmt::format(
      "moemem: error: command: '{}' is not accepted; expected one of analyze, explain, count, models, paper, search, validate, compare\n",
      first);
  return true;
}

// CLI11's message in moemem's form where it names a value or a count: a flag given a value it
// cannot read ("Could not convert: --sp = banana") and an option given twice ("--tp: At Most 1
// required but received 2"). Anything else is CLI11's own text.
std::string parse_error_text(const CLI::ParseError& e) {
  const std::string what = e.what();
  constexpr std::string_view kConvert = "Could not convert: ";
  if (what.starts_with(kConvert)) {
    const auto eq = what.find(" = ", kConvert.size());
    if (eq != std::string::npos) {
      return fmt::format("{}: '{}' is not accepted; expected the flag alone, or =true/=false",
                         what.substr(kConvert.size(), eq - kConvert.size()), what.substr(eq + 3));
    }
  }
  constexpr std::string_view kAtMost = ": At Most 1 required but received ";
  if (const auto at = what.find(kAtMost); at != std::string::npos) {
    return fmt::format("{}: given {} times; expected it once", what.substr(0, at), what.substr(at + kAtMost.size()));
  }
  return what;
}

// Parses the command line and reads a Megatron script; returns the exit code when the run
// ends here (help, or bad input).
// A flag given an empty value (a shell variable that expanded to nothing: --gpu "$GPU") is refused
// by name: for the string options an empty value was their "not given", so --gpu '' silently
// dropped the fit check. Options whose value is optional (--megatron-args) keep their rule.
void refuse_empty_values(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    for (CLI::Option* opt : sub->get_options()) {
      if (opt->get_expected_min() < 1 || opt->get_name().empty()) continue;
      const std::string name = opt->get_name();
      opt->check(CLI::Validator(
          [name](std::string& v) -> std::string {
            if (v.empty()) throw InputError(name, "", "a non-empty value (an empty one is what an unset shell variable gives)");
            return {};
          },
          "", "non-empty"));
    }
  }
}

std::optional<int> parse(CLI::App& app, Commands& c, int argc, const char* const* argv, std::ostream& out,
                         std::ostream& err, Embedding& embedding) {
  try {
    app.parse(argc, argv);
    if (embedding.model) c.use_model(*embedding.model);
    for (AnalyzeCommand* a : {&c.analyze, &c.explain}) {
      if (a->app->parsed()) read_megatron_script(*a, err);
    }
  } catch (const InputError& e) {
    err << "moemem: error: " << e.what() << "\n";
    embedding.error = e;
    return kExitBadInput;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    err << "moemem: error: " << parse_error_text(e) << "\n";
    embedding.parse_error = e.what();
    err << "Run 'moemem --help' for the commands and flags.\n";
    return kExitBadInput;
  }
  return std::nullopt;
}

}  // namespace

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  Embedding embedding;
  return run(argc, argv, out, err, embedding);
}

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err, Embedding& embedding) {
  CLI::App app{"moemem: per-GPU memory of LLM training steps (MoE, MLA, every parallel layout)", "moemem"};
  app.require_subcommand(1, 1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");
  app.set_version_flag("--version", std::string("moemem ") + MOEMEM_VERSION, "The moemem version (CMake's project version)");
  Commands commands;
  commands.setup(app);
  refuse_empty_values(app);
  if (misspelt_command(argc, argv, err)) return kExitBadInput;
  if (const auto code = parse(app, commands, argc, argv, out, err, embedding)) return *code;
  try {
    return commands.run(out, err);
  } catch (const InputError& e) {
    err << "moemem: error: " << e.what() << "\n";
    embedding.error = e;
    return kExitBadInput;
  }
}

}  // namespace moemem::cli
