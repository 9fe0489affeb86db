// Issue 14: Llama-4 through the CLI. The text presets analyse under megatron, by preset name and
// by Hugging Face repository id, with their extra saved tensors in explain; the multimodal config
// is counted with its vision tower (the published total) and analysed with the tower on the first
// stage; torchtitan refuses Llama-4 by name.
#include <string>
#include <vector>

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
  EXPECT_NE(titan.err.find("torchtitan dropped its llama4 model"), std::string::npos) << titan.err;
}

// 108,641,793,536: the published Scout total (tests/unit/test_model_types_llama4.cpp), 871,932,416
// of it the vision tower and projector. Analysed, the tower sits with the embedding on the first
// stage, replicated over tp (Megatron-LM's pretrain_vlm.py builds the encoder on the first
// pipeline stage): stage 0 holds exactly 871,932,416 parameters more than the text model's stage 0,
// with their bf16 weights and fp32 gradients (2 + 4 bytes each), and stage 1 is unchanged.
TEST(Llama4Cli, MultimodalAnalysesWithItsTowerOnTheFirstStage) {
  const auto count = run_cli({"count", "--model", kMultimodal, "--format", "json"});
  ASSERT_EQ(count.code, 0) << count.err;
  EXPECT_EQ(json::parse(count.out).at("total_params").get<std::uint64_t>(), 108641793536u);
  const auto by_layer = run_cli({"count", "--model", kMultimodal, "--by", "layer"});
  ASSERT_EQ(by_layer.code, 0) << by_layer.err;
  EXPECT_NE(by_layer.out.find("vision"), std::string::npos) << by_layer.out;
  const std::vector<std::string> layout = {"--profile", "megatron", "--tp", "2", "--ep", "8", "--etp", "1", "--pp", "2",
                                           "--dp", "8", "--seq-len", "4096", "--format", "json"};
  auto args = [&](const std::string& model) {
    std::vector<std::string> a = {"analyze", "--model", model};
    a.insert(a.end(), layout.begin(), layout.end());
    return a;
  };
  const auto mm = run_cli(args(kMultimodal));
  const auto text = run_cli(args("llama-4-scout"));
  ASSERT_EQ(mm.code, 0) << mm.err;
  ASSERT_EQ(text.code, 0) << text.err;
  const json a = json::parse(mm.out), b = json::parse(text.out);
  const auto stage = [](const json& r, std::size_t i, const char* key) {
    return r.at("stages").at(i).at(key).at("total").get<std::int64_t>();
  };
  const auto bytes = [](const json& r, std::size_t i, const char* key) {
    return r.at("stages").at(i).at("bytes").at(key).get<std::int64_t>();
  };
  constexpr std::int64_t kTower = 871'932'416;
  EXPECT_EQ(stage(a, 0, "params") - stage(b, 0, "params"), kTower);
  EXPECT_EQ(bytes(a, 0, "weights") - bytes(b, 0, "weights"), 2 * kTower);
  EXPECT_EQ(bytes(a, 0, "gradients") - bytes(b, 0, "gradients"), 4 * kTower);
  EXPECT_EQ(stage(a, 1, "params"), stage(b, 1, "params"));
  EXPECT_EQ(bytes(a, 1, "total"), bytes(b, 1, "total"));
  bool said = false;
  for (const auto& s : a.at("assumptions")) said = said || s.get<std::string>().starts_with("vision tower (vision_config)");
  EXPECT_TRUE(said) << a.at("assumptions").dump();
}

}  // namespace
