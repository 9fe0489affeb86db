// The web build's shim for the libc++ of Debian's emscripten 3.1.6 (libc++ 13), forced into every
// source by web/CMakeLists.txt. That libc++ predates C++20's operator<=> for the standard
// containers, which moemem's defaulted comparisons (training.hpp, analyze/internal.hpp) use, and
// C++17's std::from_chars for floating point (gpu.cpp, megatron_args.cpp, cli/common.cpp). The
// overloads below are the standard's lexicographic orderings and a from_chars for double that
// accepts what the standard's does (chars_format::general); a newer libc++ has its own and this
// header then adds nothing.
#pragma once

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <compare>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#if defined(_LIBCPP_VERSION) && _LIBCPP_VERSION < 16000
namespace std {  // NOLINT(cert-dcl58-cpp): stands in for the library's own, absent here

template <class T>
using moemem_cmp_t = decltype(declval<const T&>() <=> declval<const T&>());

template <class C>
auto moemem_lexicographic(const C& a, const C& b) -> moemem_cmp_t<typename C::value_type> {
  const size_t n = a.size() < b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) {
    if (auto c = a[i] <=> b[i]; c != 0) return c;
  }
  return a.size() <=> b.size();
}

template <class Ch, class Tr, class Al>
strong_ordering operator<=>(const basic_string<Ch, Tr, Al>& a, const basic_string<Ch, Tr, Al>& b) {
  return a.compare(b) <=> 0;
}

template <class T, class Al>
auto operator<=>(const vector<T, Al>& a, const vector<T, Al>& b) -> moemem_cmp_t<T> {
  return moemem_lexicographic(a, b);
}

template <class T, size_t N>
auto operator<=>(const array<T, N>& a, const array<T, N>& b) -> moemem_cmp_t<T> {
  return moemem_lexicographic(a, b);
}

template <class T>
auto operator<=>(const optional<T>& a, const optional<T>& b) -> moemem_cmp_t<T> {
  if (a && b) return *a <=> *b;
  return a.has_value() <=> b.has_value();
}

template <class A, class B>
auto operator<=>(const pair<A, B>& a, const pair<A, B>& b) -> common_comparison_category_t<moemem_cmp_t<A>, moemem_cmp_t<B>> {
  if (auto c = a.first <=> b.first; c != 0) return c;
  return a.second <=> b.second;
}

// std::from_chars(first, last, double&): an optional '-', then digits with an optional '.' and
// exponent, or inf / infinity / nan (any case); no leading space, '+' or hex prefix, as the
// standard says. strtod reads the number (the C locale: wasm has no other); out of range leaves
// `value` as it was.
inline from_chars_result from_chars(const char* first, const char* last, double& value) {
  const string text(first, last);
  const size_t sign = !text.empty() && text[0] == '-' ? 1 : 0;
  const char c = sign < text.size() ? text[sign] : '\0';
  const bool starts_number = (c >= '0' && c <= '9') || c == '.' || c == 'i' || c == 'I' || c == 'n' || c == 'N';
  const bool hex = c == '0' && sign + 1 < text.size() && (text[sign + 1] == 'x' || text[sign + 1] == 'X');
  if (!starts_number) return {first, errc::invalid_argument};
  char* end = nullptr;
  errno = 0;
  const double v = strtod(text.c_str(), &end);
  size_t used = static_cast<size_t>(end - text.c_str());
  if (hex) used = sign + 1;  // "0x1p3" is 0 followed by "x1p3" for from_chars
  if (used == 0) return {first, errc::invalid_argument};
  if (hex) {
    value = sign ? -0.0 : 0.0;
    return {first + used, errc{}};
  }
  if (errno == ERANGE) return {first + used, errc::result_out_of_range};
  value = v;
  return {first + used, errc{}};
}

}  // namespace std
#endif
