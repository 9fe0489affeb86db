// --profile hf --ddp (issue 15): the Trainer without DeepSpeed or FSDP, on a model loaded in bf16.
// Every expected size by hand from Llama-3.1-8B's tensors (8,030,261,248 parameters, the Hub's
// count; 32 layers, hidden 4096, intermediate 14336) and PEFT's LoRA count (r 16, all-linear:
// 41,943,040), not from running moemem:
//   full training: weights, gradients and each AdamW moment 8,030,261,248 x 2 = 16,060,522,496 B
//   LoRA: the frozen base x 2 + the fp32 adapters 41,943,040 x 4 = 167,772,160 B, the same per state
//   one layer's adapted inputs per token: q, k, v 3 x 4096 + o 4096 + gate, up 2 x 4096 + down
//   14336 = 38,912 elements
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "cli/run_cli.hpp"

namespace {

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::run_cli;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::items_of;
using moemem::test::activations_cli::stage_bytes;

constexpr std::uint64_t kParams = 8'030'261'248, kBf16 = kParams * 2, kAdapters = 41'943'040;

Args ddp(const Args& extra, const std::string& dp = "1", const std::string& global = "1") {
  return concat({"--model", "llama-3.1-8b", "--profile", "hf", "--ddp", "--dp", dp, "--micro-batch", "1", "--seq-len", "256",
                 "--global-batch", global},
                extra);
}

TEST(HfDdp, FullTrainingKeepsBf16StatesWithoutMasterCopy) {
  // 256 tokens, one micro-batch: the optimizer step (weights, gradients, moments) is the peak.
  const auto j = analyze_json(ddp({}));
  EXPECT_EQ(stage_bytes(j, 0, "weights"), kBf16);
  EXPECT_EQ(stage_bytes(j, 0, "optimizer"), 2 * kBf16);
  EXPECT_EQ(stage_bytes(j, 0, "gradients"), kBf16);
  EXPECT_EQ(stage_bytes(j, 0, "activations"), 0u);
  EXPECT_EQ(j.at("training").at("sharding"), "ddp");
  // Eight ranks: DDP's buckets hold a second bf16 copy of every gradient.
  EXPECT_EQ(stage_bytes(analyze_json(ddp({}, "8", "8")), 0, "gradients"), 2 * kBf16);
}

// adamw_bnb_8bit: the Trainer registers a 32-bit override for every nn.Embedding weight
// (trainer.py create_optimizer, "bitsandbytes" in the class and optim_bits 8), so the embedding E =
// 128,256 x 4,096 = 525,336,576 keeps fp32 state1 and state2 (8 E), and every other tensor (all
// multiples of 256 elements, none below 4,096) 8-bit states plus an fp32 absmax per 256-element
// block each: 2 (P - E) + 8 (P - E) / 256 + 8 E = 15,009,849,344 + 234,528,896 + 4,202,692,608.
TEST(HfDdp, EightBitAdamKeepsTheEmbeddingsStatesIn32Bits) {
  constexpr std::uint64_t kEmbedding = 128'256ULL * 4'096, kRest = kParams - kEmbedding;
  const auto j = analyze_json(ddp({"--optimizer", "adam8bit"}));
  EXPECT_EQ(stage_bytes(j, 0, "optimizer"), 2 * kRest + 8 * kRest / 256 + 8 * kEmbedding);
  EXPECT_EQ(stage_bytes(j, 0, "optimizer"), 19'447'070'848ULL);
  const auto items = items_of(explain_json(ddp({"--optimizer", "adam8bit"}), 0), "optimizer");
  EXPECT_EQ(items.at("state1 + state2 of the embedding (fp32)"), 8 * kEmbedding);
}

TEST(HfDdp, AccumulationKeepsGradientsThroughBackward) {
  // Two micro-batches per step: the first one's gradients are alive during the second's backward.
  const auto j = analyze_json(ddp({}, "1", "2"));
  EXPECT_EQ(stage_bytes(j, 0, "gradients"), kBf16);
  EXPECT_GT(stage_bytes(j, 0, "activations"), 0u);
}

TEST(HfDdp, LoraAdaptersInFp32AndAutocastCopiesOfTheirInputs) {
  const auto e = explain_json(ddp({"--finetune", "lora", "--lora-rank", "16"}, "1", "2"), 0);
  const auto w = items_of(e, "weights");
  EXPECT_EQ(w.at("frozen parameters"), kBf16);
  EXPECT_EQ(w.at("adapters (PEFT upcasts them to fp32)"), kAdapters * 4);
  EXPECT_EQ(items_of(e, "optimizer").at("exp_avg"), kAdapters * 4);
  EXPECT_EQ(items_of(e, "gradients").at("gradients"), kAdapters * 4);
  // 32 layers x 256 tokens x 38,912 adapted input elements x 2 bytes (bf16), no recomputation.
  EXPECT_EQ(items_of(e, "activations").at("lora.A_inputs (autocast bf16 copies)"), 32ull * 256 * 38'912 * 2);
  // And autocast's bf16 casts of the fp32 adapter weights, which the GEMMs save: 41,943,040 x 2.
  EXPECT_EQ(items_of(e, "activations").at("lora.adapter_weights (autocast bf16 copies)"), kAdapters * 2);
  // DeepSpeed's bf16 adapters read the base layer's own input: no such copy.
  const auto ds = explain_json(concat({"--model", "llama-3.1-8b", "--profile", "hf", "--dp", "1", "--micro-batch", "1",
                                       "--seq-len", "256", "--global-batch", "2"},
                                      {"--finetune", "lora", "--lora-rank", "16"}),
                               0);
  EXPECT_EQ(items_of(ds, "activations").count("lora.A_inputs (autocast bf16 copies)"), 0u);
}

TEST(HfDdp, SettingsDdpCannotHonourAreRefused) {
  const auto refused = [](const Args& a, const char* field) { expect_exit_2(concat({"analyze"}, a), {field}); };
  refused({"--model", "llama-3.1-8b", "--ddp"}, "--ddp: 'set' is not accepted; expected the hf profile");
  refused(ddp({"--fsdp2"}), "--ddp: 'set' is not accepted; expected one of --ddp, --fsdp1 and --fsdp2");
  refused(ddp({"--zero", "1"}), "--zero: '1' is not accepted; expected 0 with --ddp");
  refused(ddp({"--finetune", "qlora", "--lora-rank", "16"}), "--finetune: 'qlora' is not accepted");
  refused(ddp({"--optimizer", "sgd"}), "--optimizer: 'sgd' is not accepted; expected adamw, adam8bit or adafactor with --ddp");
  refused(ddp({"--params-dtype", "fp32"}), "--params-dtype: 'fp32' is not accepted; expected bf16 with --ddp");
}

}  // namespace
