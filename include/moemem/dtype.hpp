// Numeric formats of weights, gradients, optimizer states and activations. Widths are in bits
// so that sub-byte formats can be added later; byte sizes are rounded up explicitly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moemem/units.hpp"

namespace moemem {

// e5m6: DeepSeek-V3's customized 12-bit format for the attention output (arXiv 2412.19437
// §3.3.3). The report does not say how it is packed, so it takes a 16-bit container here (erring
// high: packed, it would be 12 bits).
enum class DType : std::uint8_t { fp32, bf16, fp16, fp8, int8, int64, e5m6, int32 };

[[nodiscard]] constexpr unsigned bits_of(DType t) {
  switch (t) {
    case DType::int64: return 64;
    case DType::int32: return 32;
    case DType::fp32: return 32;
    case DType::bf16:
    case DType::fp16:
    case DType::e5m6: return 16;
    case DType::fp8:
    case DType::int8: return 8;
  }
  return 0;
}
[[nodiscard]] std::string_view name_of(DType t);
// Parses "fp32", "bf16", "fp16", "fp8", "int8" (and "float32", "bfloat16", "float16").
// `field` names the flag or key for the error message.
[[nodiscard]] DType parse_dtype(std::string_view text, std::string_view field);
// Bytes taken by `n` elements of `t`, rounded up to a whole byte.
// n = 8q + r elements take q*bits + ceil(r*bits/8) bytes: exact, and overflows only when the byte
// count itself does not fit in 64 bits.
[[nodiscard]] inline Bytes bytes_of(Count n, DType t) {
  const std::uint64_t q = n.value() / 8, r = n.value() % 8, bits = bits_of(t);
  return Bytes(checked_add(checked_mul(q, bits, "bytes of a tensor"), ceil_div(r * bits, 8), "bytes of a tensor"));
}

}  // namespace moemem
