// GPU memory capacities: named devices and user-given sizes ("80GiB", "141GB", "81559MiB").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "moemem/units.hpp"

namespace moemem {

struct Gpu {
  std::string name;
  Bytes capacity;  // total device memory as the driver reports it
};

// h100-80g, h800-80g, h200-141g, a100-80g, b200-192g. Throws InputError naming `--gpu`.
[[nodiscard]] Gpu lookup_gpu(std::string_view name);
[[nodiscard]] std::vector<std::string> gpu_names();

// "80GiB", "80 GiB", "141GB", "81559MiB", "1024B"; a number without a unit only when it is 0 (the
// unit of "0.52" is anyone's guess). Throws InputError naming `field`.
[[nodiscard]] Bytes parse_memory_size(std::string_view text, std::string_view field, bool allow_zero = false);

}  // namespace moemem
