// DeepEP's communication buffers as Megatron-Core sizes them for training (normal, not
// low-latency, kernels): Megatron-LM d98e8a64 megatron/core/transformer/moe/fused_a2a.py get_buffer
// takes, over DeepEP's recommended dispatch and combine configs for the expert group's size, the
// largest NVLink and RDMA buffer size hints, with hidden_bytes = hidden x max(element size, 2); the
// group is the expert tensor-and-model-parallel group (token_dispatcher.py, pg_collection.tp_ep) and
// the SM count 20 (_DeepepManager: moe_flex_dispatcher_num_sms unset -> 20). The sizes follow
// deepseek-ai/DeepEP dd758ca (v1 "legacy" Buffer): deep_ep/buffers/legacy.py get_dispatch_config /
// get_combine_config, csrc/legacy/config.hpp get_nvl_buffer_size_hint / get_rdma_buffer_size_hint,
// csrc/legacy/buffer.hpp (the NVLink buffer and its barrier pointers in one allocation, a 32 MiB
// workspace) and deep_ep/buffers/legacy.py (NVSHMEM, for groups spanning nodes, with
// NVSHMEM_CUMEM_GRANULARITY = 2^29: its heap grows in 512 MiB steps). All of it is allocated with
// cudaMalloc or by NVSHMEM, outside PyTorch's caching allocator.
#include <algorithm>
#include <array>
#include <optional>

#include <fmt/format.h>

#include "analyze/deepep.hpp"
#include "moemem/errors.hpp"

namespace moemem::detail {

namespace {

struct DeepEpConfig {
  std::int64_t ranks;
  // dispatch and combine: NVLink receive tokens, RDMA send and receive tokens (per channel)
  std::int64_t nvl_recv[2], rdma_send[2], rdma_recv[2];
};

// deep_ep/buffers/legacy.py: Config(num_sms, nvl_send, nvl_recv, rdma_send, rdma_recv) per group size.
constexpr std::array<DeepEpConfig, 12> kConfigs = {{
    {2, {256, 256}, {6, 6}, {128, 128}},
    {4, {256, 256}, {6, 6}, {128, 128}},
    {8, {256, 256}, {6, 6}, {128, 128}},
    {16, {288, 288}, {20, 12}, {128, 128}},
    {24, {288, 288}, {8, 8}, {128, 128}},
    {32, {288, 288}, {8, 8}, {128, 128}},
    {48, {288, 288}, {8, 8}, {128, 128}},
    {64, {288, 288}, {8, 8}, {128, 128}},
    {96, {480, 480}, {12, 8}, {128, 128}},
    {128, {560, 560}, {12, 8}, {128, 128}},
    {144, {720, 720}, {12, 8}, {128, 128}},
    {160, {720, 720}, {12, 8}, {128, 128}},
}};

constexpr std::uint64_t kNumSms = 20, kChannels = kNumSms / 2;
constexpr std::uint64_t kMaxNvlPeers = 8, kMaxTopK = 128, kMaxScales = 128;
constexpr std::uint64_t kSourceMeta = 8;  // internode::SourceMeta: two ints
constexpr std::uint64_t kTopkIdx = 8;     // topk_idx_t: int64 (EP_NUM_TOPK_IDX_BITS 64)
constexpr std::uint64_t kWorkspace = 32ull << 20;        // LEGACY_NUM_WORKSPACE_BYTES
constexpr std::uint64_t kBarrierPointers = 8 * (4 + 8 + 8);  // barrier signals, buffer and signal pointers
constexpr std::uint64_t kNvshmemGranularity = 1ull << 29;

std::uint64_t align_up(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b * b; }

const DeepEpConfig* config_for(std::int64_t ranks) {
  for (const auto& c : kConfigs) {
    if (c.ranks == ranks) return &c;
  }
  return nullptr;
}

// Per token in a channel's receive queue: the hidden bytes, its source meta, top-k indices and
// weights, and the FP8 scales' room.
std::uint64_t per_token(std::uint64_t hidden_bytes) {
  return hidden_bytes + kSourceMeta + kMaxTopK * kTopkIdx + kMaxTopK * 4 + kMaxScales * 4;
}

std::uint64_t nvl_hint(std::uint64_t hidden_bytes, std::uint64_t ranks, std::uint64_t recv_tokens) {
  const std::uint64_t rdma_ranks = std::max<std::uint64_t>(ranks / kMaxNvlPeers, 1);
  const std::uint64_t nvl_ranks = std::min(ranks, kMaxNvlPeers);
  std::uint64_t n = kChannels * nvl_ranks * (2 * rdma_ranks + 3) * 4;
  n += kChannels * nvl_ranks * recv_tokens * per_token(hidden_bytes);
  return align_up(n, 128);
}

std::uint64_t rdma_hint(std::uint64_t hidden_bytes, std::uint64_t ranks, std::uint64_t send, std::uint64_t recv) {
  if (ranks <= kMaxNvlPeers) return 0;
  const std::uint64_t rdma_ranks = ranks / kMaxNvlPeers;
  const std::uint64_t tokens = align_up(recv, send);  // Config's constructor
  std::uint64_t n = kChannels * rdma_ranks * (kMaxNvlPeers * 2 + 2) * 2 * 4;
  n += kChannels * rdma_ranks * tokens * (per_token(hidden_bytes) + 16) * 2;  // and an int4 each, both directions
  return align_up(n, 128);
}

}  // namespace

std::optional<InputError> deepep_group_check(std::int64_t ranks) {
  if (config_for(ranks) != nullptr) return std::nullopt;
  return InputError("--ep/--etp", fmt::format("ep*etp = {}", ranks),
                    "a DeepEP group size DeepEP has a config for: 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144 or 160 "
                    "(deep_ep Buffer.get_dispatch_config)");
}

DeepEpBuffers deepep_buffers(std::int64_t hidden, std::int64_t ranks) {
  const DeepEpConfig* c = config_for(ranks);
  if (c == nullptr) return {};
  const std::uint64_t hidden_bytes = static_cast<std::uint64_t>(hidden) * 2;
  const auto r = static_cast<std::uint64_t>(ranks);
  DeepEpBuffers b;
  std::uint64_t nvl = 0, rdma = 0;
  for (std::size_t k = 0; k < 2; ++k) {
    nvl = std::max(nvl, nvl_hint(hidden_bytes, r, static_cast<std::uint64_t>(c->nvl_recv[k])));
    rdma = std::max(rdma, rdma_hint(hidden_bytes, r, static_cast<std::uint64_t>(c->rdma_send[k]),
                                    static_cast<std::uint64_t>(c->rdma_recv[k])));
  }
  b.nvlink = Bytes(nvl + kBarrierPointers + kWorkspace);
  b.rdma = Bytes(rdma == 0 ? 0 : align_up(rdma, kNvshmemGranularity));
  return b;
}

}  // namespace moemem::detail
