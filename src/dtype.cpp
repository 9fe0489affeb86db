#include "moemem/dtype.hpp"

#include "moemem/errors.hpp"

namespace moemem {

std::string_view name_of(DType t) {
  switch (t) {
    case DType::fp32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp8: return "fp8";
    case DType::int8: return "int8";
    case DType::int64: return "int64";
    case DType::e5m6: return "e5m6";
    case DType::int32: return "int32";
  }
  return "?";
}

DType parse_dtype(std::string_view text, std::string_view field) {
  if (text == "fp32" || text == "float32") return DType::fp32;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  if (text == "fp16" || text == "float16") return DType::fp16;
  if (text == "fp8") return DType::fp8;
  if (text == "int8") return DType::int8;
  throw InputError(std::string(field), std::string(text), "one of fp32, bf16, fp16, fp8, int8");
}

}  // namespace moemem
