// libFuzzer's entry point for one target, chosen at compile time (MOEMEM_FUZZ_TARGET, a function
// of targets.hpp).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  moemem::fuzz::MOEMEM_FUZZ_TARGET(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
