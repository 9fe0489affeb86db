// The library's error channel for bad input. Every error names the field, the value that was
// given and what would have been accepted; the CLI maps all of them to exit code 2. A layout
// that does not fit a GPU is not an error: it is a verdict in the report.
#pragma once

#include <stdexcept>
#include <string>

namespace moemem {

// Exit codes used by the command-line tool (documented in README.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 2;

class InputError : public std::runtime_error {
 public:
  InputError(std::string field, std::string value, std::string accepted);
  [[nodiscard]] const std::string& field() const { return field_; }
  [[nodiscard]] const std::string& value() const { return value_; }
  [[nodiscard]] const std::string& accepted() const { return accepted_; }

 private:
  std::string field_, value_, accepted_;
};

// A computation on user-supplied sizes would exceed 64 bits.
class OverflowError : public InputError {
 public:
  explicit OverflowError(const std::string& what);
};

}  // namespace moemem
