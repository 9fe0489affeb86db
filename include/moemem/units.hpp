// Strong types for the two kinds of number moemem deals in: element counts (parameters,
// activation elements) and bytes. They do not mix silently, every operation is checked
// for 64-bit overflow, and GiB (2^30) and GB (10^9) are distinct, named conversions.
#pragma once

#include <cstdint>
#include <string>

namespace moemem {

// Throws OverflowError (errors.hpp) naming `what` was being computed.
[[noreturn]] void throw_overflow(const char* what);

// Checked 64-bit arithmetic on unsigned counts. On overflow these throw OverflowError naming
// `what` was being computed; they never wrap. Inline: they sit in every evaluation's inner loops.
inline std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const char* what) {
  std::uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) [[unlikely]] throw_overflow(what);
  return r;
}
inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const char* what) {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) [[unlikely]] throw_overflow(what);
  return r;
}
inline std::uint64_t checked_sub(std::uint64_t a, std::uint64_t b, const char* what) {
  if (b > a) [[unlikely]] throw_overflow(what);
  return a - b;
}
// Division rounding up; `b` must be positive.
inline std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// A number of elements (parameters or activation values).
// 2^30: one GiB, the unit every table prints (GB = 10^9 bytes is named as such where used).
inline constexpr double kBytesPerGiB = 1073741824.0;
// A signed byte count (headroom: negative when short) in GiB.
[[nodiscard]] constexpr double gib_of(std::int64_t signed_bytes) { return static_cast<double>(signed_bytes) / kBytesPerGiB; }

class Count {
 public:
  constexpr Count() = default;
  constexpr explicit Count(std::uint64_t n) : n_(n) {}
  [[nodiscard]] constexpr std::uint64_t value() const { return n_; }
  Count& operator+=(Count o) { n_ = checked_add(n_, o.n_, "element count"); return *this; }
  friend Count operator+(Count a, Count b) { return a += b; }
  friend constexpr bool operator==(Count, Count) = default;
  friend constexpr auto operator<=>(Count, Count) = default;

 private:
  std::uint64_t n_ = 0;
};

// A number of bytes.
class Bytes {
 public:
  constexpr Bytes() = default;
  constexpr explicit Bytes(std::uint64_t n) : n_(n) {}
  static Bytes from_gib(double gib);  // 2^30 bytes, rounded up to a whole byte
  static Bytes from_gb(double gb);    // 10^9 bytes, rounded up to a whole byte
  [[nodiscard]] constexpr std::uint64_t value() const { return n_; }
  [[nodiscard]] double gib() const { return static_cast<double>(n_) / kBytesPerGiB; }
  [[nodiscard]] double mib() const { return static_cast<double>(n_) / 1048576.0; }
  [[nodiscard]] double gb() const { return static_cast<double>(n_) / 1e9; }
  Bytes& operator+=(Bytes o) { n_ = checked_add(n_, o.n_, "byte count"); return *this; }
  friend Bytes operator+(Bytes a, Bytes b) { return a += b; }
  friend constexpr bool operator==(Bytes, Bytes) = default;
  friend constexpr auto operator<=>(Bytes, Bytes) = default;

 private:
  std::uint64_t n_ = 0;
};

// "11.64 GiB"-style text with two decimals; the unit is always printed.
std::string format_gib(Bytes b);

}  // namespace moemem
