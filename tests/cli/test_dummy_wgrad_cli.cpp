// Transformer Engine's cached dummy weight gradients (issue 12): with Megatron's gradient-
// accumulation fusion each trained linear layer hands autograd a placeholder from TE's
// get_dummy_wgrad (transformer_engine/pytorch/module/base.py at d0067d0d), one tensor per distinct
// (shape, dtype) kept for the life of the process; Megatron-Core's output layer takes one too
// (tensor_parallel/layers.py since e7c55de99e). Expected sizes are the local weight shapes worked
// out by hand from the model's config and the layout.
#include <cstdint>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "cli/run_cli.hpp"

namespace {

using nlohmann::json;
using moemem::test::Args;
using moemem::test::concat;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::items_of;

constexpr const char* kItem = "Transformer Engine's cached dummy weight gradients";

// Mixtral 8x7B (hidden 4096, 32 heads and 8 key/value heads of 128, experts' FFN 14336, vocabulary
// 32000) at tp 2, pp 4, ep 8 (or `ep`), etp 1 (or `etp`).
Args mixtral(const Args& extra = {}, const char* ep = "8", const char* etp = "1") {
  return concat({"--model", "mixtral-8x7b", "--tp", "2", "--sp", "--pp", "4", "--ep", ep, "--etp", etp, "--dp", "8",
                 "--micro-batch", "1", "--seq-len", "4096"},
                extra);
}

std::uint64_t dummies(const Args& args, std::int64_t stage) {
  const auto items = items_of(explain_json(args, stage), "buffers");
  const auto it = items.find(kItem);
  return it == items.end() ? 0 : it->second;
}

TEST(DummyWgrad, OnePlaceholderPerDistinctLocalWeightShape) {
  // Every layer has the same four shapes, bf16: linear_qkv ((32 + 2 x 8) x 128 / 2) x 4096,
  // linear_proj 4096 x (32 x 128 / 2), each expert's fc1 (2 x 14336) x 4096 and fc2 4096 x 14336
  // (etp 1: whole experts; 4 experts on the rank, one placeholder per shape).
  const std::uint64_t layer = 2ull * (3072 * 4096 + 4096 * 2048 + 28672ull * 4096 + 4096ull * 14336);
  EXPECT_EQ(dummies(mixtral(), 0), layer);
  EXPECT_EQ(dummies(mixtral(), 1), layer);
  // The last stage adds the output layer's (32000 / 2) x 4096.
  EXPECT_EQ(dummies(mixtral(), 3), layer + 2ull * 16000 * 4096);
  // Expert tensor parallelism halves each expert's FFN width: fc1 (2 x 14336 / 2) x 4096, fc2
  // 4096 x 7168.
  const std::uint64_t etp2 = 2ull * (3072 * 4096 + 4096 * 2048 + 14336ull * 4096 + 4096ull * 7168);
  EXPECT_EQ(dummies(mixtral({}, "4", "2"), 1), etp2);
}

TEST(DummyWgrad, OnlyWhereTheFrameworkKeepsThem) {
  // The 0.12 and 0.6 releases allocated the placeholder per backward (a transient freed by
  // Megatron's gradient hook); without gradient-accumulation fusion TE returns the real gradient.
  EXPECT_EQ(dummies(mixtral({"--megatron-version", "0.12"}), 3), 0u);
  EXPECT_EQ(dummies(mixtral({"--no-gradient-accumulation-fusion"}), 3), 0u);
  // The same flag read from a launch script.
  const std::string path = ::testing::TempDir() + "/no-grad-accum-fusion.args";
  {
    std::ofstream f(path);
    f << "--tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 4 "
         "--expert-model-parallel-size 8 --expert-tensor-parallel-size 1 --num-experts 8 "
         "--moe-token-dispatcher-type alltoall --no-gradient-accumulation-fusion\n";
  }
  EXPECT_EQ(dummies({"--model", "mixtral-8x7b", "--megatron-args", path, "--dp", "8"}, 3), 0u);
  // Frozen weights (LoRA's base model) take no gradient and no placeholder. (The adapters' own
  // small placeholders, r x in and out x r per adapted module, are left out: documented.)
  EXPECT_EQ(dummies(mixtral({"--finetune", "lora", "--lora-rank", "8"}), 1), 0u);
  // A Megatron setting elsewhere is refused by name.
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--profile", "torchtitan", "--no-gradient-accumulation-fusion"},
                {"--no-gradient-accumulation-fusion", "megatron"});
}

}  // namespace
