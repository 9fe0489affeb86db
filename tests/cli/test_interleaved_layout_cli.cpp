// The interleaved schedule and Megatron's layout strings through `moemem analyze` (issue 3):
// NVIDIA's recipe TP2 PP8 VPP4 EP64 DP64 with `Et|(tt|)*30mL`, m equal to pp, Megatron's
// docstring layout, and strings that are malformed or do not fit (exit 2).
// Expected values are restated from the rules (the issue, Megatron-LM, the DualPipe README),
// and relations between runs, never copied from moemem's output.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/pipeline_cli_helpers.hpp"

namespace {

using nlohmann::json;
using moemem::test::pipeline_cli::Args;
using moemem::test::pipeline_cli::concat;
using moemem::test::pipeline_cli::analyze_json;
using moemem::test::pipeline_cli::u64;
using moemem::test::pipeline_cli::stage_transient;
using moemem::test::pipeline_cli::i64;
using moemem::test::pipeline_cli::expect_exit_2;

// NVIDIA's DeepSeek-V3 recipe: TP2 PP8 VPP4 EP64 ETP1 DP64, MTP 1, with a layout string (the
// recipe gives --expert-tensor-parallel-size 1; Megatron's default would be etp = tp = 2).
Args nvidia_with(const std::string& layout, const Args& extra = {}) {
  return concat({"analyze", "--model", "deepseek-v3", "--mtp", "1", "--tp", "2", "--pp", "8", "--vpp", "4", "--ep",
                 "64", "--etp", "1", "--dp", "64", "--sp", "--pipeline-model-parallel-layout", layout},
                extra);
}
// ... with its own layout, `Et|(tt|)*30mL`.
Args nvidia(const Args& extra = {}) { return nvidia_with("Et|(tt|)*30mL", extra); }

// Chunk micro-batches rank r holds per held chunk (Megatron-Core interleaved schedule, group
// size pp): warm-up (pp - r - 1) * 2 + (v - 1) * pp, capped at m * v (all of them when m == pp),
// plus the first steady-state forward; forward k runs the rank's chunk (k % (pp * v)) / pp.
std::vector<std::uint64_t> interleaved_held(std::int64_t r, std::int64_t pp, std::int64_t v, std::int64_t m) {
  const std::int64_t total = m * v;
  const std::int64_t warmup = m == pp ? total : std::min((pp - r - 1) * 2 + (v - 1) * pp, total);
  const std::int64_t held = std::min(warmup + 1, total);
  std::vector<std::uint64_t> out(static_cast<std::size_t>(v), 0);
  for (std::int64_t k = 0; k < held; ++k) ++out[static_cast<std::size_t>((k % (pp * v)) / pp)];
  return out;
}

TEST(PipelineCli, NvidiaRecipeLayoutStringIsAcceptedAndSplitsAsWritten) {
  // m = 2048 / 64 = 32.
  const json j = analyze_json(nvidia({"--global-batch", "2048"}));
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j.at("parallel").at("schedule"), "interleaved");
  EXPECT_EQ(i64(j.at("parallel").at("num_chunks")), 32);
  EXPECT_EQ(i64(j.at("parallel").at("vpp")), 4);
  EXPECT_EQ(i64(j.at("parallel").at("edp")), 2);
  EXPECT_EQ(i64(j.at("training").at("microbatches_per_step")), 32);
  const auto& stages = j.at("stages");
  ASSERT_EQ(stages.size(), 8u);
  std::int64_t layers = 0, mtp = 0, embedding = 0, loss = 0, chunks = 0;
  for (std::size_t r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto& s = stages[r];
    EXPECT_EQ(i64(s.at("model_chunks")), 4);
    ASSERT_EQ(s.at("chunks").size(), 4u);
    std::int64_t stage_layers = 0;
    std::uint64_t expected_activations = 0;
    const auto held = interleaved_held(static_cast<std::int64_t>(r), 8, 4, 32);
    for (std::size_t i = 0; i < 4; ++i) {
      const auto& c = s.at("chunks")[i];
      ++chunks;
      EXPECT_EQ(i64(c.at("chunk")), static_cast<std::int64_t>(r + 8 * i));
      layers += i64(c.at("num_layers"));
      stage_layers += i64(c.at("num_layers"));
      mtp += i64(c.at("mtp_depths"));
      embedding += c.at("embedding").get<bool>() ? 1 : 0;
      loss += c.at("loss").get<bool>() ? 1 : 0;
      expected_activations += held[i] * u64(c.at("activations_per_microbatch"));
    }
    EXPECT_EQ(i64(s.at("num_layers")), stage_layers);
    // min((8 - r - 1) * 2 + (4 - 1) * 8 + 1, m * 4) = 39 - 2r.
    EXPECT_EQ(i64(s.at("in_flight_microbatches")), 39 - 2 * static_cast<std::int64_t>(r));
    EXPECT_EQ(u64(s.at("bytes").at("activations")),
              expected_activations + stage_transient(s));
  }
  EXPECT_EQ(chunks, 32);
  EXPECT_EQ(layers, 61);
  EXPECT_EQ(mtp, 1);
  EXPECT_EQ(embedding, 1);
  EXPECT_EQ(loss, 1);
  // Chunk 0 (E + layer 0) on rank 0, chunk 31 (MTP + loss) on rank 7.
  EXPECT_TRUE(stages[0].at("chunks")[0].at("embedding").get<bool>());
  EXPECT_EQ(i64(stages[0].at("chunks")[0].at("num_layers")), 1);
  EXPECT_TRUE(stages[7].at("chunks")[3].at("loss").get<bool>());
  EXPECT_EQ(i64(stages[7].at("chunks")[3].at("mtp_depths")), 1);
  EXPECT_EQ(i64(stages[7].at("chunks")[3].at("num_layers")), 0);
  // By hand for the two ends: rank 0 holds {15, 8, 8, 8} of its chunks, rank 7 {8, 8, 8, 1}.
  EXPECT_EQ(interleaved_held(0, 8, 4, 32), (std::vector<std::uint64_t>{15, 8, 8, 8}));
  EXPECT_EQ(interleaved_held(7, 8, 4, 32), (std::vector<std::uint64_t>{8, 8, 8, 1}));
}

// m == pp (current Megatron-Core, no all-warm-up branch): ranks whose warm-up (pp - r - 1) * 2 +
// (v - 1) * pp reaches m * v = 32 run every forward first and hold all of them; the others hold
// warm-up + 1.
TEST(PipelineCli, InterleavedWithMEqualToPp) {
  const json j = analyze_json(nvidia({"--global-batch", "512"}));  // 512 / 64 = 8
  ASSERT_FALSE(j.is_null());
  for (const auto& s : j.at("stages")) {
    const std::int64_t r = i64(s.at("stage"));
    const std::int64_t warmup = (8 - r - 1) * 2 + 3 * 8;
    EXPECT_EQ(i64(s.at("in_flight_microbatches")), std::min<std::int64_t>(warmup + 1, 32)) << r;
    if (warmup >= 32) {
      std::uint64_t expected = 0;
      for (const auto& c : s.at("chunks")) expected += 8 * u64(c.at("activations_per_microbatch"));
      EXPECT_EQ(u64(s.at("bytes").at("activations")), expected + stage_transient(s)) << r;
    }
  }
}

// Megatron's docstring layout, pp 16 x vpp 2: 32 stages, "t*3" is three layers, 61 t.
TEST(PipelineCli, MegatronDocstringLayoutOnSixteenRanks) {
  const json j = analyze_json({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--vpp", "2", "--ep", "64",
                               "--dp", "64", "--sp", "--pipeline-model-parallel-layout", "Et*3|(tt|)*29,m|L"});
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(i64(j.at("parallel").at("num_chunks")), 32);
  std::int64_t layers = 0;
  for (const auto& s : j.at("stages")) {
    for (const auto& c : s.at("chunks")) layers += i64(c.at("num_layers"));
  }
  EXPECT_EQ(layers, 61);
  EXPECT_EQ(i64(j.at("stages")[0].at("chunks")[0].at("num_layers")), 3);
  EXPECT_EQ(i64(j.at("stages")[14].at("chunks")[1].at("chunk")), 30);
  EXPECT_EQ(i64(j.at("stages")[14].at("chunks")[1].at("mtp_depths")), 1);
  EXPECT_TRUE(j.at("stages")[15].at("chunks")[1].at("loss").get<bool>());
  // Without --global-batch: enough micro-batches; rank r holds (16 - r - 1) * 2 + 16 + 1.
  for (std::size_t r = 0; r < 16; ++r) {
    EXPECT_EQ(i64(j.at("stages")[r].at("in_flight_microbatches")), (15 - static_cast<std::int64_t>(r)) * 2 + 17) << r;
  }
}

// Syntax errors point at the offending position (0-based).
TEST(PipelineCli, MalformedLayoutStringsPointAtThePosition) {
  struct Case {
    const char* text;
    const char* where;
  };
  for (const Case& c : {Case{"Et|(tt|*30mL", "position 12"},  // group never closed: at the end
                        Case{"Et|(tt|)*mL", "position 9"},    // '*' without a number
                        Case{"Ex|tL", "position 1"},          // not a layout item
                        Case{"Et|tt)|(tt|)*29mL", "position 5"}}) {
    expect_exit_2(nvidia_with(c.text),
                  {"--pipeline-model-parallel-layout", "position", c.where});
  }
}

// Strings that parse but do not fit the model or the layout: exit 2 naming the flag and rule.
TEST(PipelineCli, LayoutStringsThatDoNotFitAreRefused) {
  expect_exit_2(nvidia_with("Et|(tt|)*29ttmL"),
                {"--pipeline-model-parallel-layout", "32 stages"});  // 31 stages for pp 8 x vpp 4
  expect_exit_2(nvidia_with("E|(tt|)*30mL"),
                {"--pipeline-model-parallel-layout", "61 t"});  // 60 t
  expect_exit_2(nvidia_with("Et|(tt|)*30mLE"),
                {"--pipeline-model-parallel-layout", "one E"});  // two E
  // The right string for another pp: 32 stages are pp 16 x vpp 2 (inferred, as Megatron does),
  // but not pp 16 x vpp 4, nor any vpp of pp 24.
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--vpp", "4", "--ep", "8", "--dp", "32", "--sp",
                 "--pipeline-model-parallel-layout", "Et|(tt|)*30mL"},
                {"--pipeline-model-parallel-layout", "64 stages"});
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "24", "--ep", "8", "--dp", "32", "--sp",
                 "--pipeline-model-parallel-layout", "Et|(tt|)*30mL"},
                {"--pipeline-model-parallel-layout", "24 stages"});
  // MTP placed with --mtp 0.
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--mtp", "0", "--tp", "2", "--pp", "8", "--vpp", "4", "--ep", "64",
                 "--dp", "64", "--sp", "--pipeline-model-parallel-layout", "Et|(tt|)*30mL"},
                {"--pipeline-model-parallel-layout", "MTP"});
  // Two ways of splitting at once.
  expect_exit_2(nvidia({"--decoder-first-pipeline-num-layers", "3"}), {"pipeline split"});
}

// Model chunks without pipeline parallelism: Megatron builds them, then its non-pipelined schedule
// asserts a single chunk (schedules.py forward_backward_no_pipelining), so --vpp 2 at --pp 1, or a
// two-stage layout string there, used to be accepted and change nothing; now refused by name.
TEST(PipelineCli, ModelChunksWithoutPipelineParallelismAreRefused) {
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--vpp", "2"}, {"--vpp", "'2'", "--pp is 1"});
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--vpp", "2", "--schedule", "interleaved"}, {"--vpp", "--pp is 1"});
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--pipeline-model-parallel-layout", "E(t)*16|(t)*16L"},
                {"--pipeline-model-parallel-layout", "one stage when --pp is 1", "it has 2"});
  expect_exit_2({"explain", "--model", "llama-3.1-8b", "--vpp", "4", "--stage", "0"}, {"--vpp", "--pp is 1"});
  // One stage at pp 1 stays valid, and so does vpp 1.
  EXPECT_EQ(analyze_json({"analyze", "--model", "llama-3.1-8b", "--pipeline-model-parallel-layout", "E(t)*32L"})
                .at("stages").size(), 1u);
  EXPECT_EQ(analyze_json({"analyze", "--model", "llama-3.1-8b", "--vpp", "1"}).at("stages").size(), 1u);
}

}  // namespace
