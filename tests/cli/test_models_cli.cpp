// Presets by the names users type (issue 14, Inputs): `moemem models`, preset names in any case,
// Hugging Face repository ids, and a checkpoint directory holding config.json.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"
#include "moemem/config.hpp"
#include "moemem/presets.hpp"

namespace {

using moemem::test::run_cli;
using nlohmann::json;

std::string count_total(const std::string& model) {
  const auto r = run_cli({"count", "--model", model, "--format", "json"});
  EXPECT_EQ(r.code, 0) << model << "\n" << r.err;
  return r.code == 0 ? json::parse(r.out).at("total_params").dump() : "";
}

TEST(ModelsCli, EveryPresetHasItsRepositoryAndIsListed) {
  const auto names = moemem::preset_names();
  ASSERT_EQ(moemem::preset_sources().size(), names.size());
  for (const auto& n : names) {
    EXPECT_EQ(moemem::match_preset(n), n);
  }
  const auto r = run_cli({"models", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j.at("models").size(), names.size());
  for (const auto& m : j.at("models")) {
    // The listed total is the one `count` gives for the preset (DeepSeek-V3: 684,489,845,504,
    // the checkpoint's parameters, tests/golden).
    EXPECT_EQ(m.at("total_params").dump(), count_total(m.at("preset").get<std::string>()));
  }
}

TEST(ModelsCli, PresetsAnswerToAnyCaseAndToTheirRepositoryId) {
  const std::string v3 = count_total("deepseek-v3");
  EXPECT_EQ(v3, "684489845504");
  EXPECT_EQ(count_total("DeepSeek-V3"), v3);
  EXPECT_EQ(count_total("deepseek-ai/DeepSeek-V3"), v3);
  EXPECT_EQ(count_total("QWEN/qwen3-8b"), count_total("qwen3-8b"));
  const auto bad = run_cli({"count", "--model", "deepseek-ai/DeepSeek-V9"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("deepseek-ai/DeepSeek-V9"), std::string::npos);
}

// A variant of a preset's model (an instruct or dated release) is refused, not read as the
// preset (its config may differ: Mistral-7B-Instruct-v0.3 has 32768 tokens to v0.1's 32000); the
// error names the preset its name begins with. A name that begins no preset gets no hint.
TEST(ModelsCli, AVariantOfAPresetIsRefusedNamingThePreset) {
  for (const auto& [name, preset] : {std::pair{"Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b"},
                                     std::pair{"meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"},
                                     std::pair{"llama-3.1-8b-instruct", "llama-3.1-8b"}}) {
    const auto r = run_cli({"count", "--model", name});
    EXPECT_EQ(r.code, 2) << name;
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find(std::string("pass --model ") + preset), std::string::npos) << r.err;
  }
  // "llama-3.1-8" is no preset and begins none ("llama-3.1-8b" needs the full name).
  const auto none = run_cli({"count", "--model", "meta-llama/Llama-3.1-8"});
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(none.err.find("pass --model"), std::string::npos) << none.err;
}

TEST(ModelsCli, ACheckpointDirectoryIsReadThroughItsConfigJson) {
  const auto dir = std::filesystem::temp_directory_path() / "moemem-models-cli-checkpoint";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "config.json");
    for (const auto& p : moemem::preset_texts()) {
      if (std::string(p.name) == "qwen3-8b") out << p.json;
    }
  }
  EXPECT_EQ(count_total(dir.string()), count_total("qwen3-8b"));
  std::filesystem::remove_all(dir);
}

// Issue 14: GLM-4.5 (glm4_moe) analyses under the megatron profile with its MTP layer on the
// last stage; torchtitan, which does not train it, refuses it by name.
TEST(ModelsCli, Glm45AnalysesUnderMegatronAndIsRefusedByTorchtitan) {
  const auto r = run_cli({"analyze", "--model", "zai-org/GLM-4.5-Air", "--profile", "megatron", "--tp", "2", "--etp", "1",
                          "--ep", "8", "--pp", "4", "--dp", "8", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(json::parse(r.out).contains("stages"));
  const auto explain = run_cli({"explain", "--model", "glm-4.5", "--profile", "megatron", "--tp", "8", "--etp", "1", "--ep", "8",
                                "--pp", "4", "--stage", "3"});
  EXPECT_EQ(explain.code, 0) << explain.err;
  const auto titan = run_cli({"analyze", "--model", "glm-4.5-air", "--profile", "torchtitan"});
  EXPECT_EQ(titan.code, 2);
  EXPECT_NE(titan.err.find("torchtitan"), std::string::npos) << titan.err;
}

// gpt-oss: analyses under megatron with ep and etp splitting the biased experts, and under
// torchtitan (models/gpt_oss at c5d93d109) with full checkpointing and EP; torchtitan's default
// per-op SAC is refused by name (its list for this block is not modelled).
TEST(ModelsCli, GptOssAnalysesUnderMegatronAndTorchtitan) {
  const auto r = run_cli({"analyze", "--model", "openai/gpt-oss-120b", "--profile", "megatron", "--tp", "2", "--ep", "8",
                          "--etp", "2", "--pp", "2", "--dp", "8", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto explain = run_cli({"explain", "--model", "gpt-oss-20b", "--profile", "megatron", "--stage", "0"});
  EXPECT_EQ(explain.code, 0) << explain.err;
  const auto titan = run_cli({"analyze", "--model", "gpt-oss-20b", "--profile", "torchtitan", "--recompute", "full", "--dp",
                              "8", "--ep", "8", "--seq-len", "8192", "--format", "json"});
  ASSERT_EQ(titan.code, 0) << titan.err;
  EXPECT_TRUE(json::parse(titan.out).contains("stages"));
  const auto sac = run_cli({"analyze", "--model", "gpt-oss-20b", "--profile", "torchtitan", "--dp", "8"});
  EXPECT_EQ(sac.code, 2);
  EXPECT_NE(sac.err.find("--recompute"), std::string::npos) << sac.err;
}

}  // namespace
