// Issue 14: Llama-4 through the CLI. The text presets analyse under megatron, by preset name and
// by Hugging Face repository id, with their extra saved tensors in explain; the multimodal config
// is counted with its vision tower (the published total) and its analysis exits 2 naming
// llama4_text; torchtitan refuses Llama-4 by name.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::run_cli;
using nlohmann::json;

const std::string kMultimodal = std::string(MOEMEM_TEST_DATA_DIR) + "/configs/llama-4-scout-multimodal.config.json";

TEST(Llama4Cli, ScoutAnalysesUnderMegatron) {
  const auto r = run_cli({"analyze", "--model", "meta-llama/Llama-4-Scout-17B-16E", "--profile", "megatron", "--tp", "2",
                          "--ep", "8", "--etp", "1", "--pp", "2", "--dp", "8", "--seq-len", "8192", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("stages").size(), 2u);
  const auto explain = run_cli({"explain", "--model", "llama-4-scout", "--profile", "megatron", "--tp", "2", "--ep", "8",
                                "--etp", "1", "--pp", "2", "--dp", "8", "--seq-len", "8192", "--stage", "0"});
  ASSERT_EQ(explain.code, 0) << explain.err;
  for (const char* term : {"attn.qk_l2_norm_inputs", "experts.unscaled_input", "experts.input_probs", "attn.rope_cos_sin"}) {
    EXPECT_NE(explain.out.find(term), std::string::npos) << term;
  }
  const auto titan = run_cli({"analyze", "--model", "llama-4-scout", "--profile", "torchtitan"});
  EXPECT_EQ(titan.code, 2);
  EXPECT_NE(titan.err.find("torchtitan"), std::string::npos) << titan.err;
}

// 108,641,793,536: the published Scout total (tests/unit/test_model_types_llama4.cpp), 871,932,416
// of it the vision tower and projector.
TEST(Llama4Cli, MultimodalIsCountedNotAnalysed) {
  const auto count = run_cli({"count", "--model", kMultimodal, "--format", "json"});
  ASSERT_EQ(count.code, 0) << count.err;
  EXPECT_EQ(json::parse(count.out).at("total_params").get<std::uint64_t>(), 108641793536u);
  const auto by_layer = run_cli({"count", "--model", kMultimodal, "--by", "layer"});
  ASSERT_EQ(by_layer.code, 0) << by_layer.err;
  EXPECT_NE(by_layer.out.find("vision"), std::string::npos) << by_layer.out;
  const auto analyze = run_cli({"analyze", "--model", kMultimodal, "--profile", "megatron"});
  EXPECT_EQ(analyze.code, 2);
  EXPECT_NE(analyze.err.find("llama4_text"), std::string::npos) << analyze.err;
}

}  // namespace
