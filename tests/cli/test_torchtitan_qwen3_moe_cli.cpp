// torchtitan's Qwen3 MoE (experiments/qwen3 from bd3850be8, models/qwen3 now; issue 14): Qwen3's
// attention with the token-choice MoE of models/moe.py, analysed under full activation
// checkpointing with the limits of torchtitan's other MoE model here. Sizes by hand from
// Qwen3-30B-A3B's config.json (hidden 2048, 48 layers, 128 experts top-8, vocabulary 151936).
#include <cstdint>
#include <fstream>
#include <string>

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
  const auto items = items_of(explain_json(qwen3_moe({"--recompute", "full", "--loss", "upcast"}), 0), "activations");
  // Each of the 48 blocks keeps its bf16 input, b x s x h; the loss (upcast, no TP) holds 3 fp32
  // copies of the b x s x vocab logits at the start of backward.
  EXPECT_EQ(items.at("block.input"), 48ull * 4 * 4096 * 2048 * 2);
  EXPECT_EQ(items.at("loss backward transient"), 3ull * 4 * 4096 * 151936 * 4);
}

// The block recomputed in backward, by hand, on a tiny qwen3_moe config (h 64, 4 query and 2
// key/value heads of 16, 8 experts of FFN 32, top-2, 2 layers, vocabulary 128) at b 1, s 2048:
// T = 2048 tokens, one GPU. Per token, bf16 unless said:
// - attention (eager): block input, attention_norm output, q, SDPA output, wo input, ffn_norm
//   input 6 x 64 x 2 = 768 bytes, K and V with their 2 heads (enable_gqa, torchtitan 0.2.2+)
//   2 x 32 x 2 = 128; SDPA's fp32 log-sum-exp 4 x 4 = 16;
// - MoE: ffn_norm output 128; fp32 router scores 8 x 4 = 32; top-k, sorted and token indices
//   3 x 2 x 8 = 48; the fp32 routed output 2 x 64 x 4 = 512 and scores 2 x 4 = 8; route_norm's
//   numerator 2 x 4 = 8 and denominator 4;
// - on the R + 1 + 8 x 16 padded rows (R = 2T routed): the permuted input 128, its int64 index 8,
//   the four SwiGLU tensors 4 x 32 x 2 = 256 bytes each.
// So 912 T + 740 T + 392 (2T + 129) = 2436 T + 50568 bytes. torchtitan 0.2.1 repeated K and V
// to 4 heads: 128 more per token.
TEST(TorchtitanQwen3Moe, TheRecomputedBlockHoldsTheMoeListWithRouteNorm) {
  const std::string path = ::testing::TempDir() + "/qwen3-moe-tiny.json";
  {
    std::ofstream f(path);
    f << R"({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2,
      "intermediate_size": 96, "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
      "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": true, "vocab_size": 128,
      "tie_word_embeddings": false, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
      "max_position_embeddings": 4096, "attention_bias": false, "hidden_act": "silu"})";
  }
  const Args tiny = {"--model", path, "--profile", "torchtitan", "--recompute", "full", "--micro-batch", "1", "--seq-len", "2048"};
  EXPECT_EQ(items_of(explain_json(tiny, 0), "activations").at("recomputation transient"), 2436ull * 2048 + 50568);
  EXPECT_EQ(items_of(explain_json(concat(tiny, {"--torchtitan-version", "0.2.1", "--dp", "2"}), 0), "activations").at("recomputation transient"),
            2564ull * 2048 + 50568);
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
