// Megatron's pipeline splits other than a layout string through `moemem analyze` (issue 3):
// first and last stage layers, negative counts refused, and the embedding and loss counted in
// the split.
// Expected values are restated from the rules (the issue, Megatron-LM, the DualPipe README),
// and relations between runs, never copied from moemem's output.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/pipeline_cli_helpers.hpp"

namespace {

using nlohmann::json;
using moemem::test::pipeline_cli::dsv3;
using moemem::test::pipeline_cli::analyze_json;
using moemem::test::pipeline_cli::i64;
using moemem::test::pipeline_cli::expect_exit_2;

TEST(PipelineCli, FirstAndLastStageLayers) {
  // 61 - 3 - 2 = 56 = 14 x 4.
  const json j = analyze_json(dsv3({"--decoder-first-pipeline-num-layers", "3", "--decoder-last-pipeline-num-layers", "2"}));
  ASSERT_FALSE(j.is_null());
  std::int64_t first = 0;
  for (std::size_t p = 0; p < 16; ++p) {
    const auto& s = j.at("stages")[p];
    const std::int64_t n = p == 0 ? 3 : p == 15 ? 2 : 4;
    EXPECT_EQ(i64(s.at("num_layers")), n) << p;
    EXPECT_EQ(i64(s.at("first_layer")), first) << p;
    first += n;
  }
  EXPECT_EQ(first, 61);
  EXPECT_TRUE(j.at("stages")[0].at("has_embedding").get<bool>());
  EXPECT_TRUE(j.at("stages")[15].at("has_head").get<bool>());
  // 61 - 4 - 4 = 53 does not split over 14.
  expect_exit_2(dsv3({"--decoder-first-pipeline-num-layers", "4", "--decoder-last-pipeline-num-layers", "4"}),
                {"--decoder-first/last-pipeline-num-layers"});
  expect_exit_2(dsv3({"--decoder-first-pipeline-num-layers", "-2"}), {"--decoder-first-pipeline-num-layers", "-2"});
}

// A negative layer count is no layer count, -1 included (moemem uses -1 internally for "not
// given"): DeepSeek-V2-Lite's 27 layers over pp 3 would otherwise pass as an even split.
TEST(PipelineCli, NegativeFirstStageLayersAreRefused) {
  expect_exit_2({"analyze", "--model", "deepseek-v2-lite", "--pp", "3", "--decoder-first-pipeline-num-layers", "-1"},
                {"--decoder-first-pipeline-num-layers", "-1"});
  expect_exit_2({"analyze", "--model", "deepseek-v2-lite", "--pp", "3", "--decoder-last-pipeline-num-layers", "-1"},
                {"--decoder-last-pipeline-num-layers", "-1"});
}

TEST(PipelineCli, EmbeddingAndLossCountedInTheSplit) {
  // DeepSeek-V2-Lite: 27 layers + the embedding = 28 = 4 x 7.
  const json j = analyze_json({"analyze", "--model", "deepseek-v2-lite", "--pp", "4", "--account-for-embedding-in-pipeline-split"});
  ASSERT_FALSE(j.is_null());
  const std::int64_t expected[] = {6, 7, 7, 7};
  for (std::size_t p = 0; p < 4; ++p) EXPECT_EQ(i64(j.at("stages")[p].at("num_layers")), expected[p]) << p;
  // Both: 29 is not divisible by 4.
  expect_exit_2({"analyze", "--model", "deepseek-v2-lite", "--pp", "4", "--account-for-embedding-in-pipeline-split",
                 "--account-for-loss-in-pipeline-split"},
                {"--account-for-embedding/loss-in-pipeline-split"});
  // DeepSeek-V3, both: 63 = 9 x 7; the end stages hold 6.
  const json k = analyze_json({"analyze", "--model", "deepseek-v3", "--pp", "9", "--account-for-embedding-in-pipeline-split",
                               "--account-for-loss-in-pipeline-split"});
  ASSERT_FALSE(k.is_null());
  for (std::size_t p = 0; p < 9; ++p) {
    EXPECT_EQ(i64(k.at("stages")[p].at("num_layers")), p == 0 || p == 8 ? 6 : 7) << p;
  }
}

// Megatron-LM asserts "Number of layers should be divisible by the pipeline-model-parallel size"
// without a split flag: analyze says so for its default cut of 32 layers over 7 stages
// (5,5,5,5,5,5,2), and search's Megatron command for that layout carries it as a layout string.
TEST(PipelineCli, AnUnevenDefaultSplitIsNamedAndWrittenForMegatron) {
  const json j = analyze_json({"analyze", "--model", "llama-3.1-8b", "--pp", "7"});
  ASSERT_FALSE(j.is_null());
  bool named = false;
  for (const auto& a : j.at("assumptions")) named = named || a.get<std::string>().find("do not divide over 7 chunks") != std::string::npos;
  EXPECT_TRUE(named) << j.at("assumptions").dump();
  const json even = analyze_json({"analyze", "--model", "llama-3.1-8b", "--pp", "8"});
  ASSERT_FALSE(even.is_null());
  EXPECT_EQ(even.at("assumptions").dump().find("do not divide"), std::string::npos);
  const json s = analyze_json({"search", "--model", "llama-3.1-8b", "--gpus", "7", "--pp", "7", "--gpu", "h100-80g",
                               "--global-batch", "14", "--top", "1", "--threads", "1"});
  ASSERT_FALSE(s.is_null());
  const std::string cmd = s.at("layouts").at(0).at("megatron_command").get<std::string>();
  EXPECT_NE(cmd.find("--pipeline-model-parallel-layout 'Ettttt|ttttt|ttttt|ttttt|ttttt|ttttt|ttL'"), std::string::npos) << cmd;
}

}  // namespace
