// The moemem command line as a function, so tests can drive it in-process.
#pragma once

#include <ostream>

namespace moemem::cli {

// Runs `moemem` with argv; writes results to `out` and diagnostics to `err`. Returns the exit
// code: 0 success, 2 bad input (see README.md).
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace moemem::cli
