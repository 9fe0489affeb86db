#include "moemem/gpu.hpp"

#include <array>
#include <cctype>
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

}  // namespace

std::vector<std::string> gpu_names() {
  std::vector<std::string> out;
  for (const auto& g : kGpus) out.emplace_back(g.name);
  return out;
}

Gpu lookup_gpu(std::string_view name) {
  for (const auto& g : kGpus) {
    if (name == g.name) return Gpu{g.name, Bytes(g.mib * 1048576ull)};
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
