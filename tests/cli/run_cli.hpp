// Runs the moemem CLI in-process and captures exit code, stdout and stderr.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.hpp"

namespace moemem::test {

struct CliResult {
  int code = -1;
  std::string out, err;
};

using Args = std::vector<std::string>;

// The command line as a shell would show it (for failure messages).
inline std::string joined(const Args& args) {
  std::string s = "moemem";
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

inline Args concat(Args a, const Args& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline CliResult run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "moemem");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  CliResult r;
  r.code = moemem::cli::run(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace moemem::test
