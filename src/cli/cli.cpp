#include "cli/cli.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "moemem/errors.hpp"

namespace moemem::cli {

void report_unrecognised_keys(const ModelSpec& m, std::ostream& err) {
  if (m.unrecognised_keys.empty()) return;
  err << fmt::format("note: {}: config keys not understood (they may change memory; check them): {}\n", m.name,
                     fmt::join(m.unrecognised_keys, ", "));
}

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"moemem: per-GPU memory of LLM training steps (MoE, MLA, every parallel layout)", "moemem"};
  app.require_subcommand(1, 1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");
  AnalyzeCommand analyze;
  CountCommand count;
  PaperCommand paper;
  analyze.setup(app);
  count.setup(app);
  paper.setup(app);

  // A first word that is neither a flag nor a command is most likely a misspelt command.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string first = argv[1];
    if (first != "analyze" && first != "count" && first != "paper") {
      err << fmt::format("moemem: error: command: '{}' is not accepted; expected one of analyze, count, paper\n", first);
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
    if (analyze.app->parsed()) analyze.run(out, err);
    else if (count.app->parsed()) count.run(out, err);
    else if (paper.app->parsed()) paper.run(out, err);
  } catch (const InputError& e) {
    err << "moemem: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace moemem::cli
