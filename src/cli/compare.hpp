// `moemem compare A.json B.json`: per-stage differences between two analyze --format json reports.
#pragma once

#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

namespace moemem::cli {

struct CompareCommand {
  std::string a, b;  // the reports' paths
  std::string format = "table";
  CLI::App* app = nullptr;
  void setup(CLI::App& root);
  void run(std::ostream& out, std::ostream& err) const;
};

}  // namespace moemem::cli
