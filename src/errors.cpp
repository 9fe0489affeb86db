#include "moemem/errors.hpp"

#include <fmt/format.h>

namespace moemem {

InputError::InputError(std::string field, std::string value, std::string accepted)
    : std::runtime_error(fmt::format("{}: '{}' is not accepted; expected {}", field, value, accepted)),
      field_(std::move(field)),
      value_(std::move(value)),
      accepted_(std::move(accepted)) {}

OverflowError::OverflowError(const std::string& what)
    : InputError(what, "too large", "sizes whose products fit in 64 bits (the input is absurdly large)") {}

}  // namespace moemem
