// Issue 14: the MoE families added after GLM-4.5 and gpt-oss (OLMoE, dots.llm1, ERNIE-4.5) analyse under
// the megatron profile, by preset name and by Hugging Face repository id, and torchtitan, which
// moemem models for dense Llama-style decoders only, refuses them by name.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::run_cli;
using nlohmann::json;

TEST(MoeFamiliesCli, OlmoeAnalysesUnderMegatron) {
  const auto r = run_cli({"analyze", "--model", "allenai/OLMoE-1B-7B-0924", "--profile", "megatron", "--ep", "8", "--dp", "8",
                          "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(json::parse(r.out).contains("stages"));
  const auto explain = run_cli({"explain", "--model", "OLMoE-1B-7B", "--profile", "megatron", "--ep", "8", "--dp", "8", "--stage", "0"});
  EXPECT_EQ(explain.code, 0) << explain.err;
  // The full-width q/k norms' inputs are the q and k projections' outputs, as per head.
  EXPECT_NE(explain.out.find("qk_norm"), std::string::npos) << explain.out;
  const auto titan = run_cli({"analyze", "--model", "olmoe-1b-7b", "--profile", "torchtitan"});
  EXPECT_EQ(titan.code, 2);
  EXPECT_NE(titan.err.find("torchtitan"), std::string::npos) << titan.err;
}

TEST(MoeFamiliesCli, Dots1AnalysesUnderMegatron) {
  const auto r = run_cli({"analyze", "--model", "rednote-hilab/dots.llm1.base", "--profile", "megatron", "--tp", "4", "--ep", "8",
                          "--pp", "4", "--dp", "8", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(json::parse(r.out).contains("stages"));
  const auto count = run_cli({"count", "--model", "dots-llm1", "--format", "json"});
  ASSERT_EQ(count.code, 0) << count.err;
  EXPECT_EQ(json::parse(count.out).at("total_params").get<std::uint64_t>(), 142774381696u);  // test_model_types_moe_families.cpp
  EXPECT_EQ(run_cli({"analyze", "--model", "dots-llm1", "--profile", "torchtitan"}).code, 2);
}

TEST(MoeFamiliesCli, ModelsListsThem) {
  const auto r = run_cli({"models"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("allenai/OLMoE-1B-7B-0924"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rednote-hilab/dots.llm1.base"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("baidu/ERNIE-4.5-21B-A3B-PT"), std::string::npos) << r.out;
}

// ERNIE-4.5 with its dense MTP layer on the last stage.
TEST(MoeFamiliesCli, ErnieAnalysesUnderMegatronWithItsMtpLayer) {
  const auto r = run_cli({"analyze", "--model", "baidu/ERNIE-4.5-21B-A3B-PT", "--profile", "megatron", "--tp", "2", "--ep", "8",
                          "--pp", "2", "--dp", "8", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto explain = run_cli({"explain", "--model", "ernie-4.5-21b-a3b", "--profile", "megatron", "--tp", "2", "--ep", "8",
                                "--pp", "2", "--dp", "8", "--stage", "1"});
  ASSERT_EQ(explain.code, 0) << explain.err;
  EXPECT_NE(explain.out.find("mtp_eh_proj"), std::string::npos) << explain.out;
  const auto no_mtp = run_cli({"analyze", "--model", "ernie-4.5-21b-a3b", "--profile", "megatron", "--mtp", "0", "--tp", "2",
                               "--ep", "8", "--pp", "2", "--dp", "8"});
  EXPECT_EQ(no_mtp.code, 0) << no_mtp.err;
  EXPECT_EQ(run_cli({"analyze", "--model", "ernie-4.5-21b-a3b", "--profile", "torchtitan"}).code, 2);
}

}  // namespace
