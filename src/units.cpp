#include "moemem/units.hpp"

#include <cmath>

#include <fmt/format.h>

#include "moemem/errors.hpp"

namespace moemem {

void throw_overflow(const char* what) { throw OverflowError(what); }

namespace {
Bytes from_scaled(double x, double unit) {
  if (!(x >= 0.0) || !std::isfinite(x) || x * unit >= 1.8e19) {
    throw InputError("memory size", fmt::format("{}", x), "a finite, non-negative size below 2^64 bytes");
  }
  return Bytes(static_cast<std::uint64_t>(std::ceil(x * unit)));
}
}  // namespace

Bytes Bytes::from_gib(double gib) { return from_scaled(gib, kBytesPerGiB); }
Bytes Bytes::from_gb(double gb) { return from_scaled(gb, 1e9); }

std::string format_gib(Bytes b) { return fmt::format("{:.2f} GiB", b.gib()); }

}  // namespace moemem
