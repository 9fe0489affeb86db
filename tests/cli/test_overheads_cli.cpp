// Runtime overhead, fragmentation and buffers through `moemem analyze` (issue 4): the CUDA
// context and the NCCL communicators the layout uses (issue 12); --fragmentation-pct; the DeepEP
// buffer; the paper profile's allowance without a runtime term.
// Base configuration: activations_cli_helpers.hpp.
// Expected values are derived by hand from the rules (the issue, docs/formulas.md,
// Megatron-Core) and from relations between runs, never copied from moemem's output.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"

namespace {

using nlohmann::json;
using moemem::test::activations_cli::Args;
using moemem::test::activations_cli::concat;
using moemem::test::activations_cli::dsv3;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::u64;
using moemem::test::activations_cli::i64;
using moemem::test::activations_cli::items_of;
using moemem::test::activations_cli::stage_bytes;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::ceil_div;
using moemem::test::activations_cli::kDispatchTransient;
using moemem::test::activations_cli::kHidden;
using moemem::test::activations_cli::kRouted;

// Bytes::from_gib: 2^30 bytes per GiB, rounded up to a whole byte.
std::uint64_t gib(double x) { return static_cast<std::uint64_t>(std::ceil(x * 1073741824.0)); }

// NCCL per communicator (issue 12, defect 3): a ring of 24 channels x 12 MiB for each group that
// runs collectives, send/recv buffers per peer: 32 channels x 12 MiB per NVLink peer, or the
// network's shared 2 x 32 x 16 x 128 KiB = 128 MiB plus 2 channels x 12 MiB per peer when the
// group leaves the 8-GPU node (NCCL's buffer sizes; docs/formulas.md).
constexpr std::uint64_t kMiB = 1ull << 20, kRing = 24 * 12 * kMiB, kNet = 128 * kMiB;

// Transformer Engine's cached dummy weight gradients (get_dummy_wgrad: one bf16 tensor per distinct
// local weight shape) on DeepSeek-V3 at tp 2, etp 1 (docs/formulas.md), elements:
// MLA q_down 1536 x 7168, kv_down (512 + 64) x 7168, q_up (128 x 192 / 2) x 1536, kv_up
// (128 x 256 / 2) x 512, o_proj 7168 x (128 x 128 / 2); the shared expert's fc1 (2 x 2048 / 2) x
// 7168 and fc2 7168 x 1024; each routed expert's fc1 4096 x 7168 and fc2 7168 x 2048 (stage 0 adds
// the dense layers' fc1 (2 x 18432 / 2) x 7168 and fc2 7168 x 9216; the last stage MTP's eh_proj
// (7168 / 2) x 14336 and the output layer (129280 / 2) x 7168, the MTP depth's layer sharing the
// MoE layer's shapes).
std::uint64_t dsv3_dummy_wgrads(std::size_t stage) {
  const std::uint64_t mla = 1536 * 7168 + 576 * 7168 + 12288 * 1536 + 16384 * 512 + 7168 * 8192;
  const std::uint64_t moe = 2048 * 7168 + 7168 * 1024 + 4096 * 7168 + 7168 * 2048;
  std::uint64_t n = mla + moe;
  if (stage == 0) n += 18432 * 7168 + 7168 * 9216;
  if (stage == 15) n += 3584 * 14336 + 64640 * 7168;
  return 2 * n;
}

TEST(OverheadCli, RuntimeIsCudaContextAndTheCommunicatorsTheLayoutUses) {
  const json r = analyze_json(dsv3());
  ASSERT_FALSE(r.is_null());
  // tp 2, pp 16, dp 32, ep 8, etp 1, edp 8 (DeepSeek-V3 with its MTP depth, untied):
  // rings: world, dp x cp, tp, embedding (first and last stage only: MTP; a middle rank is not in
  // the group), model-parallel tp x pp, ep's all-gather, expert dp = 7 (6 in the middle);
  // pp: 1F1B send/recv to 2 neighbours 64 ranks apart (other nodes):
  // 128 MiB + 2 x 2 x 12 MiB; ep: 8 consecutive ranks in one node, all-to-all with 7 NVLink peers:
  // 7 x 32 x 12 MiB.
  EXPECT_EQ(i64(r.at("parallel").at("edp")), 8);
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    const std::uint64_t rings = p == 0 || p == 15 ? 7 : 6;
    const std::uint64_t runtime = gib(0.52) + rings * kRing + (kNet + 2 * 2 * 12 * kMiB) + 7 * 32 * 12 * kMiB;
    const auto& b = r.at("stages")[p].at("bytes");
    EXPECT_EQ(u64(b.at("runtime")), runtime);
    const std::uint64_t allocated = u64(b.at("weights")) + u64(b.at("gradients")) + u64(b.at("optimizer")) +
                                    u64(b.at("activations")) + u64(b.at("buffers"));
    EXPECT_EQ(u64(b.at("allocated")), allocated);
    // No allowance; the GEMM workspaces (docs/formulas.md): TE's 32 MiB + 1 KiB, 4 more for its
    // grouped GEMM's streams on this MoE model, PyTorch's cuBLAS 32 MiB + cuBLASLt 1 MiB; and the
    // cached dummy weight gradients (kDummyWgrad below).
    // The last stage's output layer all-gathers its sequence-parallel input into Megatron's global
    // memory buffer, kept: s x b x h bf16.
    const std::uint64_t global_buffer = p == 15 ? 2ull * 4096 * 7168 : 0;
    EXPECT_EQ(u64(b.at("buffers")), 5 * (32 * kMiB + 1024) + 33 * kMiB + dsv3_dummy_wgrads(p) + global_buffer);
    EXPECT_EQ(u64(b.at("fragmentation")), ceil_div(allocated * 5, 100));
    EXPECT_EQ(u64(b.at("reserved")), allocated + u64(b.at("fragmentation")));
    EXPECT_EQ(u64(b.at("total")), u64(b.at("reserved")) + runtime);
  }
}

TEST(OverheadCli, CommunicatorsFollowTheLayout) {
  const std::uint64_t base = gib(0.52) + 7 * kRing + (kNet + 2 * 2 * 12 * kMiB) + 7 * 32 * 12 * kMiB;
  // cp 2 (dp 16): the cp ring, with send/recv to its 2 neighbours 2 ranks apart (one node).
  const json cp = analyze_json(dsv3({"--cp", "2"}, "16", "16"));
  ASSERT_FALSE(cp.is_null());
  EXPECT_EQ(stage_bytes(cp, 0, "runtime"), base + kRing + 2 * 32 * 12 * kMiB);
  // etp 2: ep's 8 ranks are 2 apart and span 2 nodes (4 local: 3 peers over 2 channels each, plus
  // the network's shared buffers); an expert-tp ring is added; edp = 64 / 16 = 4 keeps its ring.
  const json etp = analyze_json(dsv3({"--etp", "2"}));
  ASSERT_FALSE(etp.is_null());
  EXPECT_EQ(i64(etp.at("parallel").at("edp")), 4);
  EXPECT_EQ(stage_bytes(etp, 0, "runtime"),
            base - 7 * 32 * 12 * kMiB + (kNet + 3 * 2 * 12 * kMiB) + kRing);
  // Interleaved: one 2-rank communicator per pipeline neighbour instead of the pp group's.
  // (pp 8 x vpp 2 chunks; the same groups otherwise.)
  const json pp8 = analyze_json(dsv3({}, "8")), vpp = analyze_json(dsv3({"--vpp", "2"}, "8"));
  ASSERT_FALSE(vpp.is_null() || pp8.is_null());
  EXPECT_EQ(stage_bytes(pp8, 0, "runtime"), base);
  EXPECT_EQ(stage_bytes(vpp, 0, "runtime"), base - (kNet + 2 * 2 * 12 * kMiB) + 2 * (kNet + 2 * 12 * kMiB));
  // One GPU: no communicator at all, only the CUDA context.
  const json one = analyze_json({"--model", "deepseek-v2-lite", "--micro-batch", "1", "--seq-len", "1024"});
  ASSERT_FALSE(one.is_null());
  EXPECT_EQ(i64(one.at("parallel").at("world_size")), 1);
  EXPECT_EQ(stage_bytes(one, 0, "runtime"), gib(0.52));
}

// explain lists each communicator as an item of its own.
TEST(OverheadCli, ExplainItemisesTheCommunicators) {
  const json e = explain_json(dsv3(), 0);
  ASSERT_FALSE(e.is_null());
  std::vector<std::string> names;
  for (const auto& it : e.at("items")) {
    if (it.at("category") == "runtime") names.push_back(it.at("item").get<std::string>());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"cuda.context", "nccl.world", "nccl.dp_cp", "nccl.tp", "nccl.pp",
                                             "nccl.embedding", "nccl.mp", "nccl.ep", "nccl.expert_dp"}));
}

TEST(OverheadCli, FragmentationPercentOverridesTheDefault) {
  const json five = analyze_json(dsv3());
  const json ten = analyze_json(dsv3({"--fragmentation-pct", "10"}));
  const json zero = analyze_json(dsv3({"--fragmentation-pct", "0"}));
  ASSERT_FALSE(ten.is_null());
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    const std::uint64_t alloc = stage_bytes(five, p, "allocated");
    EXPECT_EQ(stage_bytes(ten, p, "allocated"), alloc);
    const std::uint64_t f5 = stage_bytes(five, p, "fragmentation"), f10 = stage_bytes(ten, p, "fragmentation");
    EXPECT_EQ(f10, ceil_div(alloc * 10, 100));
    // Double, up to the rounding of each.
    EXPECT_LE(f10, 2 * f5);
    EXPECT_GE(f10 + 1, 2 * f5);
    EXPECT_EQ(stage_bytes(zero, p, "fragmentation"), 0u);
    EXPECT_EQ(stage_bytes(zero, p, "total"), alloc + stage_bytes(five, p, "runtime"));
  }
  expect_exit_2(concat({"analyze"}, dsv3({"--fragmentation-pct", "101"})), {"--fragmentation-pct", "101"});
  expect_exit_2(concat({"analyze"}, dsv3({"--fragmentation-pct=-5"})), {"--fragmentation-pct"});
}

// DeepEP's buffers as Megatron's fused_a2a.get_buffer sizes them (DeepEP dd758ca csrc/legacy/config.hpp),
// by hand for hidden 7168 (hidden_bytes 2 x 7168 = 14336) and 20 SMs (10 channels). Per queued token:
// 14336 hidden + 8 source meta + 128 x 8 top-k indices + 128 x 4 weights + 128 x 4 scales = 16392.
// EP 8 (dispatch and combine receive 256 tokens): 10 x 8 x (2 x 1 + 3) x 4 = 1,600 plus
// 10 x 8 x 256 x 16392 = 335,708,160, rounded up to 128: 335,709,824; plus the barrier signals and
// pointers (8 x (4 + 8 + 8) = 160) and the 32 MiB workspace (33,554,432): 369,264,416. No RDMA.
constexpr std::uint64_t kDeepEpEp8 = 369264416;
// EP 32 (4 nodes of 8, 288 NVLink tokens): 10 x 8 x (2 x 4 + 3) x 4 = 3,520 plus 10 x 8 x 288 x 16392 =
// 377,671,680, rounded to 377,675,264, + 160 + 33,554,432 = 411,229,856; RDMA (128 tokens, already a
// multiple of the 8 sent at once): 10 x 4 x 18 x 2 x 4 = 5,760 plus 10 x 4 x 128 x (16392 + 16) x 2 =
// 168,017,920, i.e. 168,023,680, in NVSHMEM's 512 MiB steps: 536,870,912.
constexpr std::uint64_t kDeepEpEp32Nvlink = 411229856, kDeepEpEp32Rdma = 536870912;

TEST(OverheadCli, DeepEpBuffersSitOutsideTheAllocator) {
  const json a2a = analyze_json(dsv3());
  const json deepep = analyze_json(dsv3({"--moe-token-dispatcher", "deepep"}));
  ASSERT_FALSE(deepep.is_null());
  EXPECT_EQ(deepep.at("training").at("moe_token_dispatcher"), "deepep");
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    EXPECT_EQ(stage_bytes(deepep, p, "runtime"), stage_bytes(a2a, p, "runtime") + kDeepEpEp8);
    for (const char* f : {"weights", "gradients", "optimizer", "buffers"}) {
      EXPECT_EQ(stage_bytes(deepep, p, f), stage_bytes(a2a, p, f)) << f;
    }
    // The dispatch transient: DeepEP's received tokens, min(tokens_sp x ep, R) = min(2048 x 8,
    // 16384) = R rows, and fc2's output R: 2 x 7168 x 2R, against alltoall's S + 3R (S = R).
    const auto& ds = deepep.at("stages")[p];
    const auto& as = a2a.at("stages")[p];
    EXPECT_EQ(u64(as.at("recompute_transient")), kDispatchTransient);
    EXPECT_EQ(u64(ds.at("recompute_transient")), 2 * kHidden * 2 * kRouted);
    const auto saved = [&](const json& r, const json& s) {
      return stage_bytes(r, p, "activations") - std::max({u64(s.at("recompute_transient")), u64(s.at("loss_transient")),
                                                          u64(s.at("input_batch_transient"))});
    };
    EXPECT_EQ(saved(deepep, ds), saved(a2a, as));
  }
}

TEST(OverheadCli, DeepEpAcrossNodesAddsTheNvshmemHeap) {
  const auto run = [](const std::string& ep, const std::string& dp, const Args& extra) {
    return concat({"--model", "deepseek-v3", "--tp", "1", "--pp", "16", "--dp", dp, "--ep", ep, "--etp", "1", "--micro-batch",
                   "1", "--seq-len", "4096", "--global-batch", "1024", "--distributed-optimizer"},
                  extra);
  };
  const json a2a = analyze_json(run("32", "32", {}));
  const json deepep = analyze_json(run("32", "32", {"--moe-token-dispatcher", "deepep"}));
  ASSERT_FALSE(a2a.is_null());
  ASSERT_FALSE(deepep.is_null());
  EXPECT_EQ(stage_bytes(deepep, 3, "runtime"), stage_bytes(a2a, 3, "runtime") + kDeepEpEp32Nvlink + kDeepEpEp32Rdma);
  // A group size DeepEP has no config for is refused by name.
  expect_exit_2(concat({"analyze"}, run("256", "256", {"--moe-token-dispatcher", "deepep"})), {"--ep/--etp", "DeepEP"});
}

TEST(OverheadCli, PaperProfileHasNoRuntimeTerm) {
  const json r = analyze_json(dsv3({"--profile", "paper"}));
  ASSERT_FALSE(r.is_null());
  for (const auto& s : r.at("stages")) {
    EXPECT_EQ(u64(s.at("bytes").at("runtime")), 0u);
    EXPECT_EQ(u64(s.at("bytes").at("total")), u64(s.at("bytes").at("reserved")));
    // The paper's own allowance: 0.8 GiB of buffers, 5% fragmentation at the low point.
    EXPECT_EQ(u64(s.at("bytes").at("buffers")), gib(0.8));
    EXPECT_EQ(u64(s.at("bytes").at("fragmentation")), ceil_div(u64(s.at("bytes").at("allocated")) * 5, 100));
  }
  const json e = explain_json(dsv3({"--profile", "paper"}), 0);
  EXPECT_TRUE(items_of(e, "runtime").empty());
}

// A dense model has no grouped GEMM: TE's one workspace (32 MiB + 1 KiB) and PyTorch's cuBLAS and
// cuBLASLt ones (32 + 1 MiB), itemised under "gemm"; beside them the cached dummy weight gradients
// of Llama-3.1-8B at tp 2, bf16: linear_qkv ((32 + 2 x 8) x 128 / 2) x 4096, linear_proj 4096 x
// 2048, fc1 (2 x 14336 / 2) x 4096, fc2 4096 x 7168 and the output layer (128256 / 2) x 4096.
TEST(OverheadCli, DenseModelsKeepTwoGemmWorkspacesAndTheDummyWeightGradients) {
  const json r = analyze_json({"--model", "llama-3.1-8b", "--tp", "2", "--micro-batch", "1", "--seq-len", "1024"});
  ASSERT_FALSE(r.is_null());
  const std::uint64_t dummies = 2ull * (3072 * 4096 + 4096 * 2048 + 14336 * 4096 + 4096 * 7168 + 64128ull * 4096);
  for (const auto& s : r.at("stages")) EXPECT_EQ(u64(s.at("bytes").at("buffers")), 32 * kMiB + 1024 + 33 * kMiB + dummies);
  const auto items = items_of(explain_json({"--model", "llama-3.1-8b", "--tp", "2", "--micro-batch", "1", "--seq-len", "1024"}, 0),
                              "buffers");
  EXPECT_EQ(items.at("Transformer Engine cuBLAS workspace"), 32 * kMiB + 1024);
  EXPECT_EQ(items.at("PyTorch cuBLAS and cuBLASLt workspaces"), 33 * kMiB);
  EXPECT_EQ(items.count("Transformer Engine grouped-GEMM workspaces"), 0u);
}

}  // namespace

namespace {

using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::items_of;

// Megatron-Core's GlobalMemoryBuffer ("mpu", the activations' dtype; megatron/core/utils.py) is
// grown to its largest request and kept: the unfused attention's preallocated score matrix
// (dot_product_attention.py) and the output layer's sequence-parallel all-gather
// (tensor_parallel/layers.py), one buffer for both. Llama-3.1-8B, tp 2 with sp, 4096 tokens.
std::uint64_t global_buffer(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--model", "llama-3.1-8b", "--tp", "2", "--micro-batch", "1", "--seq-len", "4096"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto items = items_of(explain_json(args, 0), "buffers");
  const auto it = items.find("global memory buffer ('mpu')");
  return it == items.end() ? 0 : it->second;
}

TEST(OverheadCli, MegatronsGlobalMemoryBufferKeepsItsLargestRequest) {
  // Flash attention: the output layer's gathered input, 4096 x 4096 bf16.
  EXPECT_EQ(global_buffer({"--sp"}), 2ull * 4096 * 4096);
  // Without sequence parallelism nothing is gathered into it.
  EXPECT_EQ(global_buffer({}), 0u);
  // Unfused attention: b x 32/2 heads x 4096 x 4096, the larger request.
  EXPECT_EQ(global_buffer({"--sp", "--attention", "eager", "--attention-dropout", "0"}), 2ull * 16 * 4096 * 4096);
}

}  // namespace
