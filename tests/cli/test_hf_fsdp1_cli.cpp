// --profile hf --fsdp1 (issue 15): Hugging Face code sharded by FSDP1 (FullyShardedDataParallel)
// through accelerate. Every expected size by hand from Llama-3.1-8B's tensors (config.json:
// hidden 4096, 32 layers, 32 heads of 128, 8 key/value heads, intermediate 14336, vocabulary
// 128256, untied), not from running moemem:
//   one decoder layer: q 4096x4096 + k, v 4096x1024 each + o 4096x4096 = 41,943,040; gate, up,
//   down 3 x 4096 x 14336 = 176,160,768; two norms 8,192: 218,112,000
//   root unit: embedding + lm_head 2 x 128256 x 4096 = 1,050,673,152, final norm 4,096
//   total 32 x 218,112,000 + 1,050,677,248 = 8,030,261,248 (the Hub's count)
// FSDP1 never frees the root unit after forward (torch _runtime_utils _post_forward_reshard), so
// the embedding is gathered at backward with the head, where FSDP2 reshards it as a unit of its own.
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

constexpr std::uint64_t kLayer = 218'112'000, kTotal = 8'030'261'248, kRoot = 1'050'677'248, kShard = 1'003'782'656;
static_assert(32 * kLayer + kRoot == kTotal);
static_assert(kShard * 8 == kTotal);

// Eight ranks, one micro-batch of 4096 tokens each, gradient checkpointing.
Args fsdp1(const Args& extra, const std::string& seq = "4096") {
  return concat({"--model", "llama-3.1-8b", "--profile", "hf", "--fsdp1", "--dp", "8", "--micro-batch", "1", "--seq-len", seq,
                 "--recompute", "full"},
                extra);
}

TEST(HfFsdp1, RootUnitStaysGatheredWithTwoLayers) {
  const auto j = analyze_json(fsdp1({"--global-batch", "8"}));  // no accumulation
  // fp32 shard 1,003,782,656 x 4; the root (embedding, norm, lm_head) and two layers in bf16.
  EXPECT_EQ(stage_bytes(j, 0, "weights"), kShard * 4 + kRoot * 2 + 2 * kLayer * 2);
  EXPECT_EQ(stage_bytes(j, 0, "optimizer"), 2 * kShard * 4);  // two fp32 moments, no master copy
  EXPECT_EQ(stage_bytes(j, 0, "gradients"), 0u);
  EXPECT_EQ(j.at("training").at("sharding"), "fsdp1");
  const auto w = items_of(explain_json(fsdp1({"--global-batch", "8"}), 0), "weights");
  EXPECT_EQ(w.at("root unit gathered (embedding, final norm, lm_head)"), 2'101'354'496u);
  EXPECT_EQ(w.at("decoder layers gathered"), 872'448'000u);
  // The same run under FSDP2 gathers the tail only: the embedding's 525,336,576 x 2 bytes less.
  const auto two = analyze_json(concat({"--model", "llama-3.1-8b", "--profile", "hf", "--fsdp2", "--dp", "8", "--micro-batch",
                                        "1", "--seq-len", "4096", "--recompute", "full"},
                                       {"--global-batch", "8"}));
  EXPECT_EQ(stage_bytes(j, 0, "weights") - stage_bytes(two, 0, "weights"), 525'336'576u * 2);
}

TEST(HfFsdp1, ShardGradOpKeepsEveryLayerAndAccumulationKeepsBf16Gradients) {
  // SHARD_GRAD_OP (--reshard-after-forward never): all 32 layers gathered at backward.
  const auto w = items_of(explain_json(fsdp1({"--reshard-after-forward", "never"}), 0), "weights");
  EXPECT_EQ(w.at("decoder layers gathered"), 32 * kLayer * 2);
  // Four micro-batches per rank: no_sync leaves each unsharded bf16 gradient on its FlatParameter.
  const auto four = analyze_json(fsdp1({"--global-batch", "32"}));
  EXPECT_EQ(stage_bytes(four, 0, "gradients"), kTotal * 2);
}

TEST(HfFsdp1, OffloadKeepsShardsGradientsAndMomentsOnTheHost) {
  const auto j = analyze_json(fsdp1({"--fsdp-offload-params"}));
  EXPECT_EQ(stage_bytes(j, 0, "host"), 4 * kShard * 4);  // parameter, gradient and two moments, fp32
  EXPECT_EQ(stage_bytes(j, 0, "weights"), kRoot * 2 + 2 * kLayer * 2);
  EXPECT_EQ(stage_bytes(j, 0, "optimizer"), 0u);
}

TEST(HfFsdp1, SettingsFsdp1CannotHonourAreRefused) {
  const auto refused = [](const Args& a, const char* field) { expect_exit_2(concat({"analyze"}, a), {field}); };
  refused({"--model", "llama-3.1-8b", "--fsdp1"}, "--fsdp1: 'set' is not accepted");
  refused({"--model", "llama-3.1-8b", "--profile", "torchtitan", "--fsdp1"}, "--fsdp1");
  refused(fsdp1({"--fsdp2"}), "--fsdp1: 'set' is not accepted; expected one of --fsdp1 and --fsdp2");
  refused(fsdp1({"--zero", "3"}), "--zero: '3' is not accepted");
  refused(fsdp1({"--finetune", "lora", "--lora-rank", "16"}), "--finetune: 'lora' is not accepted; expected full with --fsdp1");
  refused(fsdp1({"--optimizer-cpu-offload"}), "--optimizer-cpu-offload");
}

TEST(HfFsdp1, SearchLabelsAndCommandsCarryTheFlag) {
  const auto r = run_cli({"search", "--model", "llama-3.1-8b", "--profile", "hf", "--fsdp1", "--gpus", "8", "--gpu", "h100-80g",
                          "--seq-len", "4096", "--global-batch", "64", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j.at("layouts").empty());
  for (const auto& e : j.at("layouts")) {
    const std::string cmd = e.at("command").is_string() ? e.at("command").get<std::string>() : e.at("command").dump();
    EXPECT_NE(cmd.find("--fsdp1"), std::string::npos) << cmd;
  }
}

}  // namespace
