// Numeric formats of weights, gradients, optimizer states and activations. Widths are in bits
// so that sub-byte formats can be added later; byte sizes are rounded up explicitly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moemem/units.hpp"

namespace moemem {

enum class DType : std::uint8_t { fp32, bf16, fp16, fp8, int8, int64 };

[[nodiscard]] unsigned bits_of(DType t);
[[nodiscard]] std::string_view name_of(DType t);
// Parses "fp32", "bf16", "fp16", "fp8", "int8" (and "float32", "bfloat16", "float16").
// `field` names the flag or key for the error message.
[[nodiscard]] DType parse_dtype(std::string_view text, std::string_view field);
// Bytes taken by `n` elements of `t`, rounded up to a whole byte.
[[nodiscard]] Bytes bytes_of(Count n, DType t);

}  // namespace moemem
