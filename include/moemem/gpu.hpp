// GPU memory capacities: named devices and user-given sizes ("80GiB", "141GB", "81559MiB").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moemem/units.hpp"

namespace moemem {

struct Gpu {
  std::string name;
  Bytes capacity;  // total device memory as the driver reports it
};

// What the step-time model needs of a GPU (dense peaks, no sparsity; bandwidths per direction).
struct GpuPerf {
  std::string name;
  double bf16_flops = 0;          // dense BF16 tensor-core peak, FLOP/s
  double fp8_flops = 0;           // dense FP8 peak (the BF16 peak where the GPU has no FP8)
  double hbm_bytes_per_s = 0;     // HBM bandwidth
  double nvlink_bytes_per_s = 0;  // NVLink per GPU, one direction
  double network_bytes_per_s = 0; // scale-out network per GPU (its NIC), one direction
  std::int64_t gpus_per_node = 8; // GPUs joined by NVLink
};
// The named GPUs' datasheet figures (gpu.cpp cites each). Throws InputError naming `--gpu`.
[[nodiscard]] GpuPerf lookup_gpu_perf(std::string_view name);

// h100-80g, h800-80g, h200-141g, a100-80g, b200-192g. Throws InputError naming `--gpu`.
[[nodiscard]] Gpu lookup_gpu(std::string_view name);
[[nodiscard]] std::vector<std::string> gpu_names();

// "80GiB", "80 GiB", "141GB", "81559MiB", "1024B"; a number without a unit only when it is 0 (the
// unit of "0.52" is anyone's guess). Throws InputError naming `field`.
[[nodiscard]] Bytes parse_memory_size(std::string_view text, std::string_view field, bool allow_zero = false);

}  // namespace moemem
