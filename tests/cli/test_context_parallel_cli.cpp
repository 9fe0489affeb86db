// Context parallelism through `moemem explain` and `analyze` (issue 4): per-token tensors halve
// under cp 2 and each stage adds the ring buffers of one layer's K and V (MLA and GQA); the
// sequence must split over cp x tp. Base configuration: activations_cli_helpers.hpp.
// Expected values are derived by hand from the rules (the issue, docs/formulas.md,
// Megatron-Core) and from relations between runs, never copied from moemem's output.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"

namespace {

using nlohmann::json;
using moemem::test::activations_cli::Args;
using moemem::test::activations_cli::dsv3;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::u64;
using moemem::test::activations_cli::saved_tensors;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::kHidden;
using moemem::test::activations_cli::kTokensSp;
using moemem::test::activations_cli::kStage1Copies;

TEST(ActivationsCli, ContextParallelHalvesPerTokenTensorsAndAddsRingBuffers) {
  // dp halved to keep the same world size and expert data-parallel degree; 1F1B still holds 15
  // micro-batches on stage 1 (m = 1024 / 16 = 64 >= 15).
  const Args cp2 = dsv3({"--cp", "2"}, "16", "16");
  const json b = explain_json(dsv3(), 1);
  const json c = explain_json(cp2, 1);
  ASSERT_FALSE(b.is_null());
  ASSERT_FALSE(c.is_null());
  const auto base = saved_tensors(b);
  auto now = saved_tensors(c);
  const std::string ring = "context-parallel ring buffers";
  ASSERT_TRUE(now.contains(ring));
  // 2 x one layer's local K and V: (4096 / cp 2) tokens x (128 / tp 2) heads x (K 128 + 64
  // RoPE + V 128) x bf16.
  const std::uint64_t ring_bytes = 2ull * (4096 / 2) * (128 / 2) * (128 + 64 + 128) * 2;
  EXPECT_EQ(now.at(ring), ring_bytes);
  EXPECT_FALSE(base.contains(ring));
  now.erase(ring);
  ASSERT_EQ(now.size(), base.size());
  EXPECT_EQ(now.at("attn.input (layer input)"), kTokensSp / 2 * kHidden * 2 * kStage1Copies);
  for (const auto& [name, bytes] : base) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(now.contains(name));
    // Every saved tensor of a layer is per token (s/cp), the score-free flash kernel included.
    EXPECT_EQ(now.at(name) * 2, bytes);
  }
  const json r = analyze_json(cp2);
  ASSERT_FALSE(r.is_null());
  for (const auto& s : r.at("stages")) EXPECT_EQ(u64(s.at("cp_ring_buffers")), ring_bytes);
  EXPECT_EQ(u64(analyze_json(dsv3()).at("stages")[1].at("cp_ring_buffers")), 0u);
}

TEST(ActivationsCli, ContextParallelRingBuffersOfGqaUseTheKvHeads) {
  // Mixtral-8x7B: 8 KV heads of 128 (4096 / 32), tp 2: 4 per rank; K and V 128 each.
  const Args args = {"--model", "mixtral-8x7b", "--tp", "2", "--pp", "4", "--dp", "4", "--cp", "2", "--ep", "4", "--sp",
                     "--global-batch", "64", "--seq-len", "8192"};
  const json r = analyze_json(args);
  ASSERT_FALSE(r.is_null());
  const std::uint64_t ring_bytes = 2ull * (8192 / 2) * (8 / 2) * (128 + 128) * 2;
  for (const auto& s : r.at("stages")) EXPECT_EQ(u64(s.at("cp_ring_buffers")), ring_bytes);
}

TEST(ActivationsCli, SequenceMustSplitOverCpAndTp) {
  // 4098 is not a multiple of cp 2 x tp 2.
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--dp", "16", "--cp", "2", "--ep", "8", "--sp",
                 "--seq-len", "4098"},
                {"--seq-len", "4098"});
}

}  // namespace
