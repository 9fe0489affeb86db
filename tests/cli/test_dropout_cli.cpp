// Dropout (issue 12, defect 9): Megatron-Core's hidden dropout (default 0.1) keeps a one-byte mask
// in each of the layer's two bias-dropout-adds; 0 turns it off; profiles without dropout refuse it.
#include <cstdint>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::run_cli;
using nlohmann::json;

std::uint64_t stage_activations(const Args& extra) {
  const auto r = run_cli(concat({"analyze", "--model", "llama-3.1-8b", "--profile", "megatron", "--seq-len", "4096",
                                 "--micro-batch", "1", "--format", "json"},
                                extra));
  EXPECT_EQ(r.code, 0) << r.err;
  return json::parse(r.out).at("stages")[0].at("bytes").at("activations").get<std::uint64_t>();
}

TEST(Dropout, MegatronDefaultKeepsTwoOneByteMasksPerLayer) {
  const std::uint64_t none = stage_activations({"--hidden-dropout", "0", "--attention-dropout", "0"});
  // Two masks of s x h bytes in each of Llama 3.1 8B's 32 layers (one micro-batch in flight, no
  // TP): 2 x 4096 x 4096 x 32 = 1 GiB. Attention dropout costs nothing with the fused kernel.
  const std::uint64_t masks = 2ull * 4096 * 4096 * 32;
  EXPECT_EQ(stage_activations({}), none + masks);  // Megatron's default, 0.1
  EXPECT_EQ(stage_activations({"--hidden-dropout", "0.1", "--attention-dropout", "0"}), none + masks);
  // With sequence parallelism over tp 2 each mask holds half the tokens.
  const std::uint64_t sp_none = stage_activations({"--tp", "2", "--sp", "--hidden-dropout", "0"});
  EXPECT_EQ(stage_activations({"--tp", "2", "--sp"}), sp_none + masks / 2);
}

TEST(Dropout, DeepSeekRecipeHasNone) {
  const auto with = [](const Args& extra) {
    const auto r = run_cli(concat({"analyze", "--model", "deepseek-v3", "--pp", "16", "--ep", "8", "--tp", "2", "--sp", "--dp", "4", "--etp", "1",
                                   "--recipe", "deepseek-v3", "--format", "json"},
                                  extra));
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out).at("stages")[1].at("bytes").at("activations").get<std::uint64_t>();
  };
  EXPECT_EQ(with({}), with({"--hidden-dropout", "0"}));
  EXPECT_GT(with({"--hidden-dropout", "0.1"}), with({}));
}

TEST(Dropout, BadProbabilitiesAndProfilesWithoutDropoutAreRefused) {
  for (const char* p : {"1", "-0.1", "1.5", "nan"}) {
    const auto r = run_cli({"analyze", "--model", "llama-3.1-8b", "--hidden-dropout", p});
    EXPECT_EQ(r.code, 2) << p;
    EXPECT_NE(r.err.find("--hidden-dropout"), std::string::npos) << r.err;
  }
  const auto t = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "torchtitan", "--dp", "8", "--hidden-dropout", "0.1"});
  EXPECT_EQ(t.code, 2);
  EXPECT_NE(t.err.find("0 with the torchtitan profile"), std::string::npos) << t.err;
  EXPECT_EQ(run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "paper", "--attention-dropout", "0.1"}).code, 2);
}

// A Megatron script's --hidden-dropout is read like the flag.
TEST(Dropout, MegatronScriptSetsIt) {
  const std::string path = ::testing::TempDir() + "dropout.sh";
  {
    std::ofstream f(path);
    f << "torchrun --nproc-per-node 1 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 "
         "--max-position-embeddings 2048 --vocab-size 32000 --micro-batch-size 1 --hidden-dropout 0.0\n";
  }
  const auto get = [&](const Args& extra) {
    const auto r = run_cli(concat({"analyze", "--megatron-args", path, "--format", "json"}, extra));
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out).at("stages")[0].at("bytes").at("activations").get<std::uint64_t>();
  };
  // 4 layers x 2 masks x 2048 x 1024 bytes more when the inline flag overrides the script's 0.
  EXPECT_EQ(get({"--hidden-dropout", "0.1"}), get({}) + 4ull * 2 * 2048 * 1024);
}

}  // namespace
