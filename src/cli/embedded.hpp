// The command line run in-process by a caller that is not a shell (the Python module): what it
// adds to the arguments, and what it gets back besides the exit code and the two streams.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "moemem/errors.hpp"
#include "moemem/model.hpp"

namespace moemem::cli {

// A model given as a parsed config instead of --model's preset or path (for analyze, explain,
// count and search), and, when run returns 2, the error as a value (the message goes to `err` as
// ever): the InputError, or CLI11's message for a malformed command line.
struct Embedding {
  std::optional<ModelSpec> model;
  std::optional<InputError> error;
  std::string parse_error;
};

// cli::run (cli.hpp) with an Embedding.
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err, Embedding& embedding);

}  // namespace moemem::cli
