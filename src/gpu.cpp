#include "moemem/gpu.hpp"

#include <array>
#include <cctype>
#include <string>
#include <charconv>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "moemem/errors.hpp"

namespace moemem {

namespace {

// Total memory as nvidia-smi reports it (MiB), the figure a job can at most address:
// H100/H800 SXM 80 GB 81,559 MiB; A100 80 GB 81,920 MiB; H200 143,771 MiB; B200 183,359 MiB.
struct KnownGpu {
  const char* name;
  std::uint64_t mib;
};
constexpr std::array<KnownGpu, 5> kGpus{{
    {"h100-80g", 81559},
    {"h800-80g", 81559},
    {"h200-141g", 143771},
    {"a100-80g", 81920},
    {"b200-192g", 183359},
}};

// Dense tensor-core peaks (no 2:4 sparsity) and bandwidths, from the vendors' datasheets:
// - H100 SXM5 (NVIDIA H100 Tensor Core GPU datasheet): BF16 989.4 TFLOP/s, FP8 1,978.9, HBM3
//   3.35 TB/s, NVLink 900 GB/s (both directions, 450 each); DGX H100: one 400 Gb/s ConnectX-7 NIC
//   per GPU (50 GB/s), 8 GPUs per node.
// - H800 SXM5: the H100's compute and HBM with NVLink cut to 400 GB/s (200 each direction);
//   DeepSeek-V3 report (arXiv 2412.19437) section 3.1: 8 GPUs per node, 400 Gb/s InfiniBand per GPU.
// - H200 SXM (NVIDIA H200 datasheet): the H100's compute, HBM3e 4.8 TB/s, NVLink 900 GB/s.
// - A100 SXM 80 GB (NVIDIA A100 datasheet): BF16 312 TFLOP/s, no FP8 (its GEMMs run at BF16), HBM2e
//   2,039 GB/s, NVLink 600 GB/s (300 each way); DGX A100: one 200 Gb/s HDR NIC per GPU (25 GB/s).
// - B200 (NVIDIA DGX B200 / HGX B200 datasheet, 72 PFLOP/s FP8 sparse for 8 GPUs): BF16 2.25
//   PFLOP/s, FP8 4.5 dense, HBM3e 8 TB/s, NVLink 5 1.8 TB/s (900 GB/s each way), 400 Gb/s per GPU.
struct KnownPerf {
  const char* name;
  double bf16_tflops, fp8_tflops, hbm_gbps, nvlink_gbps, network_gbps;
};
constexpr std::array<KnownPerf, 5> kPerf{{
    {"h100-80g", 989.4, 1978.9, 3350, 450, 50},
    {"h800-80g", 989.4, 1978.9, 3350, 200, 50},
    {"h200-141g", 989.4, 1978.9, 4800, 450, 50},
    {"a100-80g", 312, 312, 2039, 300, 25},
    {"b200-192g", 2250, 4500, 8000, 900, 50},
}};

}  // namespace

GpuPerf lookup_gpu_perf(std::string_view name) {
  for (const auto& g : kPerf) {
    if (name == g.name) return GpuPerf{g.name, g.bf16_tflops * 1e12, g.fp8_tflops * 1e12, g.hbm_gbps * 1e9, g.nvlink_gbps * 1e9, g.network_gbps * 1e9, 8};
  }
  throw InputError("--gpu", std::string(name), fmt::format("one of {} (the step-time model needs a named GPU)", fmt::join(gpu_names(), ", ")));
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> out;
  for (const auto& g : kGpus) out.emplace_back(g.name);
  return out;
}

Gpu lookup_gpu(std::string_view name) {
  // In any case, as the model presets are: H100-80G is h100-80g.
  std::string lower(name);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const auto& g : kGpus) {
    if (lower == g.name) return Gpu{g.name, Bytes(g.mib * 1048576ull)};
  }
  throw InputError("--gpu", std::string(name), fmt::format("one of {} (or give --gpu-memory)", fmt::join(gpu_names(), ", ")));
}

Bytes parse_memory_size(std::string_view text, std::string_view field, bool allow_zero) {
  const std::string accepted = "a size with its unit, such as 80GiB, 141GB, 81559MiB or 1024B";
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string number(text.substr(0, i));
  std::string unit(text.substr(i));
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double value = 0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || ptr != number.data() + number.size() || !(value > 0 || (allow_zero && value == 0))) {
    throw InputError(std::string(field), std::string(text), accepted);
  }
  // A number without a unit is ambiguous (--cuda-context 0.52 meant GiB, and read as 1 byte);
  // only 0 needs none.
  if (unit.empty() && value != 0) {
    throw InputError(std::string(field), std::string(text), accepted + " (a number without a unit is refused: which unit was meant?)");
  }
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1048576.0;
  else if (unit == "GiB") scale = kBytesPerGiB;
  else if (unit == "TiB") scale = 1099511627776.0;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  else if (unit == "TB") scale = 1e12;
  else throw InputError(std::string(field), std::string(text), accepted + " (units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes >= 9.2e18) throw InputError(std::string(field), std::string(text), "a size below 2^63 bytes");
  return Bytes(static_cast<std::uint64_t>(std::ceil(bytes)));
}

}  // namespace moemem
