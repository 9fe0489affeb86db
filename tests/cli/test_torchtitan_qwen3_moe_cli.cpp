// torchtitan's Qwen3 MoE (experiments/qwen3 from bd3850be8, models/qwen3 now; issue 14): Qwen3's
// attention with the token-choice MoE of models/moe.py, analysed under full activation
// checkpointing with the limits of torchtitan's other MoE model here. Sizes by hand from
// Qwen3-30B-A3B's config.json (hidden 2048, 48 layers, 128 experts top-8, vocabulary 151936).
#include <cstdint>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"

namespace {

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::items_of;

Args qwen3_moe(const Args& extra = {}) {
  return concat({"--model", "qwen3-30b-a3b", "--profile", "torchtitan", "--dp", "8", "--ep", "8", "--micro-batch", "4",
                 "--seq-len", "4096"},
                extra);
}

TEST(TorchtitanQwen3Moe, FullCheckpointingKeepsEachBlockInput) {
  const auto items = items_of(explain_json(qwen3_moe({"--recompute", "full"}), 0), "activations");
  // Each of the 48 blocks keeps its bf16 input, b x s x h; the loss (upcast, no TP) holds 3 fp32
  // copies of the b x s x vocab logits at the start of backward.
  EXPECT_EQ(items.at("block.input"), 48ull * 4 * 4096 * 2048 * 2);
  EXPECT_EQ(items.at("loss backward transient"), 3ull * 4 * 4096 * 151936 * 4);
}

TEST(TorchtitanQwen3Moe, WhatIsNotModelledIsRefusedByName) {
  // Qwen3's q/k norms: their saved tensors without checkpointing are not modelled.
  expect_exit_2(concat({"analyze"}, qwen3_moe()), {"--recompute", "full"});
  // Later torchtitan features for the MoE block, and other MoE models torchtitan does not train.
  expect_exit_2(concat({"analyze"}, qwen3_moe({"--recompute", "full", "--pp", "2"})), {"--pp", "Qwen3 MoE"});
  expect_exit_2(concat({"analyze"}, qwen3_moe({"--recompute", "full", "--compile"})), {"--compile", "Qwen3 MoE"});
  expect_exit_2({"analyze", "--model", "mixtral-8x7b", "--profile", "torchtitan", "--recompute", "full"},
                {"--profile", "mixtral", "qwen3_moe"});
}

}  // namespace
