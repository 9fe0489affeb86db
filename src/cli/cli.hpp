// The moemem command line as a function, so tests can drive it in-process.
#pragma once

#include <optional>
#include <ostream>

#include "moemem/model.hpp"

namespace moemem::cli {

// Runs `moemem` with argv; writes results to `out` and diagnostics to `err`. Returns the exit
// code: 0 success, 2 bad input (see README.md).
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

// run() after `--megatron-args FILE` has been expanded into flags; `script_model` is the model
// the script's architecture flags describe, if any.
int run_expanded(int argc, const char* const* argv, const std::optional<ModelSpec>& script_model, std::ostream& out,
                 std::ostream& err);

}  // namespace moemem::cli
