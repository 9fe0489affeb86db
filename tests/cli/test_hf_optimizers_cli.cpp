// The Hugging Face Trainer's 8-bit AdamW and Adafactor under the hf profile, --ddp and DeepSpeed (issue 15):
// states from the optimizers' sources (bitsandbytes optim/optimizer.py Optimizer2State, transformers
// optimization.py Adafactor), counted by hand from Qwen3-8B's config.json (hidden 4096, FFN 12288,
// 36 layers, 32 query and 8 key/value heads of 128, vocabulary 151936, untied head:
// 8,190,735,360 parameters).
#include <cstdint>
#include <sstream>
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

constexpr std::uint64_t kParams = 8190735360;
// The per-head q_norm and k_norm weights (128 each, 2 per layer) are the only tensors under
// bitsandbytes' min_8bit_size of 4096 elements.
constexpr std::uint64_t kSmall = 36 * 2 * 128;

Args qwen3_8b(const char* optimizer) {
  return {"--model", "qwen3-8b", "--profile", "hf", "--ddp", "--optimizer", optimizer, "--micro-batch", "1", "--seq-len", "1024"};
}

TEST(HfDdpOptimizers, EightBitAdamKeepsByteStatesAndBlockScales) {
  const auto items = items_of(explain_json(qwen3_8b("adam8bit"), 0), "optimizer");
  ASSERT_EQ(items.size(), 5u);
  // Two uint8 states for every element of the larger tensors; an fp32 absmax per 256-element block
  // of each (every such tensor here is a multiple of 256); fp32 states for the small ones. The
  // Trainer registers a 32-bit override for every nn.Embedding weight when the bitsandbytes
  // optimizer has optim_bits 8 (adamw_bnb_8bit): the embedding (151,936 x 4,096) keeps fp32 states.
  constexpr std::uint64_t kEmbedding = 151936ULL * 4096, kEight = kParams - kSmall - kEmbedding;
  EXPECT_EQ(items.at("state1 (8-bit exp_avg)"), kEight);
  EXPECT_EQ(items.at("state2 (8-bit exp_avg_sq)"), kEight);
  EXPECT_EQ(items.at("absmax1 + absmax2 (per 256-element block)"), 2 * 4 * (kEight / 256));
  EXPECT_EQ(items.at("state1 + state2 (fp32, tensors < 4096 elements)"), 2 * 4 * kSmall);
  EXPECT_EQ(items.at("state1 + state2 of the embedding (fp32)"), 2 * 4 * kEmbedding);
}

TEST(HfDdpOptimizers, AdafactorKeepsFactoredMomentsAndStepsThroughFp32Temporaries) {
  const auto items = items_of(explain_json(qwen3_8b("adafactor"), 0), "optimizer");
  // Rows + columns of each matrix (q, k, v, o and the three MLP projections per layer, the
  // embedding and the head), every element of a vector (two 4096-wide norms and the two 128-wide
  // q/k norms per layer, the final norm), in fp32.
  const std::uint64_t per_layer = (4096 + 4096) + 2 * (1024 + 4096) + (4096 + 4096) + 3 * (12288 + 4096) + 2 * 4096 + 2 * 128;
  const std::uint64_t factors = 36 * per_layer + 2 * (151936 + 4096) + 4096;
  EXPECT_EQ(items.at("exp_avg_sq (row + column of a matrix, whole for a vector)"), 4 * factors);
  // The step's peak: the largest tensor (the embedding, 151936 x 4096, bf16) as fp32 gradient,
  // fp32 parameter, squared gradient and the update built from it: 16 bytes per element.
  EXPECT_EQ(items.at("Adafactor step temporaries"), 16ull * 151936 * 4096);
}

// Under DeepSpeed ZeRO the optimizer steps one flat fp32 partition per group (stage_1_and_2.py
// single_partition_of_fp32_groups): 8-bit states and a 256-element block scale over the partition,
// and Adafactor's moment of a 1-D tensor, unfactored. ZeRO-2 over 8 ranks: P / 8 elements, in
// ceil(P / 8 / 256) blocks.
Args zero2(const char* optimizer, const char* seq = "4096") {
  return {"--model", "qwen3-8b", "--profile", "hf", "--zero", "2", "--dp", "8", "--optimizer", optimizer,
          "--micro-batch", "1", "--seq-len", seq, "--recompute", "full"};
}

// The Trainer's "sgd" is torch.optim.SGD with the learning rate only (trainer.py
// get_optimizer_cls_and_kwargs): momentum 0, no momentum buffer; only the fp32 master partition
// (4 P / 8). Megatron's 0.9 was assumed before; --sgd-momentum still asks for a buffer (4 P / 8).
TEST(HfDeepSpeedOptimizers, TheTrainersSgdKeepsNoMomentum) {
  constexpr std::uint64_t kShard = kParams / 8;
  const auto plain = items_of(explain_json(zero2("sgd"), 0), "optimizer");
  EXPECT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain.at("master weights"), 4 * kShard);
  const auto momentum = items_of(explain_json(concat(zero2("sgd"), {"--sgd-momentum", "0.9"}), 0), "optimizer");
  EXPECT_EQ(momentum.at("momentum_buffer"), 4 * kShard);
}

// search costs the Trainer's SGD the same way: each result's command reproduces in analyze (search
// has no --sgd-momentum, so it must take the profile's default too).
TEST(HfDeepSpeedOptimizers, SearchRowsWithTheTrainersSgdReproduce) {
  const auto j = moemem::test::activations_cli::run_json({"search", "--model", "llama-3.1-8b", "--profile", "hf", "--optimizer", "sgd",
                                                          "--gpus", "8", "--gpu-memory", "200GiB", "--global-batch", "64",
                                                          "--seq-len", "4096", "--top", "4", "--threads", "2"});
  ASSERT_FALSE(j.at("layouts").empty());
  for (const auto& l : j.at("layouts")) {
    Args args;
    std::istringstream in(l.at("command").get<std::string>());
    for (std::string w; in >> w;) args.push_back(w);
    EXPECT_EQ(moemem::test::activations_cli::analyze_json(args).at("peak").at("total_bytes"), l.at("peak_bytes"))
        << l.at("command");
  }
}

TEST(HfDeepSpeedOptimizers, FlatPartitionsAreWhatTheOptimizerSteps) {
  constexpr std::uint64_t kShard = kParams / 8;
  const auto eight = items_of(explain_json(zero2("adam8bit"), 0), "optimizer");
  EXPECT_EQ(eight.at("master weights"), 4 * kShard);
  EXPECT_EQ(eight.at("state1 (8-bit exp_avg)"), kShard);
  EXPECT_EQ(eight.at("state2 (8-bit exp_avg_sq)"), kShard);
  EXPECT_EQ(eight.at("absmax1 + absmax2 (per 256-element block)"), 4 * 2 * ((kShard + 255) / 256));
  const auto factor = items_of(explain_json(zero2("adafactor"), 0), "optimizer");
  EXPECT_EQ(factor.at("exp_avg_sq (row + column of a matrix, whole for a vector)"), 4 * kShard);
  // With 4096 tokens the activations (8.8 GB) outweigh Adafactor's step temporaries (8 bytes per
  // partition element, 8.2 GB): backward is the peak and the temporaries are not in it. With 256
  // tokens and full checkpointing the step is the peak, and they are counted.
  EXPECT_EQ(factor.count("Adafactor step temporaries"), 0u);
  const auto step = items_of(explain_json(zero2("adafactor", "256"), 0), "optimizer");
  EXPECT_EQ(step.at("Adafactor step temporaries"), 8 * kShard);
}

// Adafactor steps a parameter at a time: HF's gpt-oss holds each layer's experts as one
// gate_up_proj parameter, [128 experts, 2880, 2 x 2880] for gpt-oss-120b, larger than its embedding
// (201088 x 2880): 16 bytes per element of it (bf16). Under DeepSpeed the routed experts sit in
// the same flat partition as the rest: Qwen3-30B-A3B (30,532,122,624 parameters) over 8 ranks.
TEST(HfOptimizers, AdafactorStepsTheLargestParameterOrPartition) {
  const auto ddp = items_of(explain_json({"--model", "gpt-oss-120b", "--profile", "hf", "--ddp", "--optimizer", "adafactor",
                                          "--micro-batch", "1", "--seq-len", "256", "--recompute", "full"},
                                         0),
                            "optimizer");
  EXPECT_EQ(ddp.at("Adafactor step temporaries"), 16ull * 128 * 2880 * 5760);
  const auto ds = items_of(explain_json({"--model", "qwen3-30b-a3b", "--profile", "hf", "--zero", "2", "--dp", "8", "--optimizer",
                                         "adafactor", "--micro-batch", "1", "--seq-len", "256", "--recompute", "full"},
                                        0),
                           "optimizer");
  EXPECT_EQ(ds.at("Adafactor step temporaries"), 8ull * (30532122624ull / 8));
}

TEST(HfDdpOptimizers, PartitionedBackendsAndOtherOptimizersAreRefused) {
  // FSDP's sharded parameters, and DeepSpeed without ZeRO, are not modelled for them.
  for (const char* o : {"adam8bit", "adafactor"}) {
    expect_exit_2({"analyze", "--model", "qwen3-8b", "--profile", "hf", "--optimizer", o}, {"--optimizer", o, "ZeRO"});
    expect_exit_2({"analyze", "--model", "qwen3-8b", "--profile", "hf", "--fsdp2", "--dp", "8", "--optimizer", o},
                  {"--optimizer", o, "FSDP"});
  }
  expect_exit_2(concat({"analyze"}, qwen3_8b("sgd")), {"--optimizer", "sgd", "adafactor"});
}

}  // namespace
