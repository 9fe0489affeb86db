// Issue 14: DeepSeek-V3.2 (deepseek_v32) from the command line: `count` by preset and by
// repository id gives the Hub's safetensors total; `analyze` runs under the megatron profile (DSA's
// activations: src/profiles/megatron_dsa.cpp), refuses --cp there, and is refused by name under the
// other profiles; `models` lists the preset.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::run_cli;
using nlohmann::json;

TEST(DsaCli, CountIsTheHubsTotal) {
  const auto r = run_cli({"count", "--model", "deepseek-ai/DeepSeek-V3.2", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  // The Hub's safetensors total for deepseek-ai/DeepSeek-V3.2 (data/models/SOURCES.md;
  // arithmetic in tests/unit/test_model_types_dsa.cpp).
  EXPECT_EQ(json::parse(r.out).at("total_params").get<std::uint64_t>(), 685355329792u);
  const auto by_tensor = run_cli({"count", "--model", "deepseek-v3.2", "--by", "tensor", "--format", "csv"});
  ASSERT_EQ(by_tensor.code, 0) << by_tensor.err;
  EXPECT_NE(by_tensor.out.find("layers.0.self_attn.indexer.weights_proj.weight"), std::string::npos);
}

TEST(DsaCli, AnalysisIsRefusedByName) {
  const auto megatron = run_cli({"analyze", "--model", "deepseek-v3.2", "--profile", "megatron", "--ep", "8", "--dp", "8"});
  EXPECT_EQ(megatron.code, 0) << megatron.err;
  EXPECT_NE(megatron.out.find("--dsa-kernel-backend tilelang"), std::string::npos) << megatron.out;
  const auto cp = run_cli({"analyze", "--model", "deepseek-v3.2", "--profile", "megatron", "--ep", "8", "--dp", "4", "--cp", "2"});
  EXPECT_EQ(cp.code, 2) << cp.out;
  EXPECT_NE(cp.err.find("--cp"), std::string::npos) << cp.err;
  for (const char* profile : {"paper", "torchtitan", "hf"}) {
    const auto r = run_cli({"analyze", "--model", "deepseek-v3.2", "--profile", profile, "--ep", "8", "--dp", "8"});
    EXPECT_EQ(r.code, 2) << profile << ": " << r.out;
    EXPECT_NE(r.err.find("deepseek_v32"), std::string::npos) << profile << ": " << r.err;
  }
  const auto models = run_cli({"models"});
  ASSERT_EQ(models.code, 0) << models.err;
  EXPECT_NE(models.out.find("deepseek-ai/DeepSeek-V3.2"), std::string::npos);
}

}  // namespace
