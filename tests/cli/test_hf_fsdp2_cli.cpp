// --profile hf --fsdp2 (issue 15): Hugging Face code sharded by FSDP2 through accelerate. Every
// expected size by hand from Llama-3.1-8B's tensors (config.json: hidden 4096, 32 layers, 32
// heads of 128, 8 key/value heads, intermediate 14336, vocabulary 128256, untied), not from
// running moemem:
//   one decoder layer: q 4096x4096 + k, v 4096x1024 each + o 4096x4096 = 41,943,040; gate, up,
//   down 3 x 4096 x 14336 = 176,160,768; two norms 8,192: 218,112,000
//   embedding = lm_head = 128256 x 4096 = 525,336,576; final norm 4,096
//   total 32 x 218,112,000 + 2 x 525,336,576 + 4,096 = 8,030,261,248 (the Hub's count)
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
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::items_of;
using moemem::test::activations_cli::stage_bytes;

constexpr std::uint64_t kLayer = 218'112'000, kTotal = 8'030'261'248, kTail = 525'336'576 + 4'096;

// Eight ranks, one micro-batch of 4096 tokens each, gradient checkpointing.
Args fsdp2(const Args& extra, const std::string& seq = "4096") {
  return concat({"--model", "llama-3.1-8b", "--profile", "hf", "--fsdp2", "--dp", "8", "--micro-batch", "1", "--seq-len", seq,
                 "--recompute", "full"},
                extra);
}

TEST(HfFsdp2, ShardsGatheredUnitsAndMoments) {
  static_assert(32 * kLayer + 2 * 525'336'576 + 4'096 == kTotal);
  const auto j = analyze_json(fsdp2({"--global-batch", "8"}));  // 8 / (1 x 8): no accumulation
  // fp32 shard ceil(8,030,261,248 / 8) = 1,003,782,656 x 4; the tail (norm + lm_head) in bf16;
  // two layers in bf16 (the one in backward and the one prefetched).
  constexpr std::uint64_t shard = 1'003'782'656;
  static_assert(shard * 8 == kTotal);
  EXPECT_EQ(stage_bytes(j, 0, "weights"), shard * 4 + kTail * 2 + 2 * kLayer * 2);
  EXPECT_EQ(stage_bytes(j, 0, "optimizer"), 2 * shard * 4);  // exp_avg + exp_avg_sq, fp32; no master copy
  EXPECT_EQ(stage_bytes(j, 0, "gradients"), 0u);             // none at the start of backward (set_to_none)
  EXPECT_EQ(j.at("training").at("sharding"), "fsdp2");
  const auto w = items_of(explain_json(fsdp2({"--global-batch", "8"}), 0), "weights");
  EXPECT_EQ(w.at("tail gathered (final norm, lm_head)"), 1'050'681'344u);
  EXPECT_EQ(w.at("decoder layers gathered"), 872'448'000u);
}

TEST(HfFsdp2, GradientAccumulationKeepsUnshardedBf16Gradients) {
  // Global batch 32 = 4 micro-batches of 1 on each of 8 ranks: the Trainer's no_sync keeps a bf16
  // gradient of every parameter until the fourth: 8,030,261,248 x 2 bytes.
  const auto one = analyze_json(fsdp2({"--global-batch", "8"}));
  const auto four = analyze_json(fsdp2({"--global-batch", "32"}));
  EXPECT_EQ(stage_bytes(four, 0, "gradients"), kTotal * 2);
  EXPECT_EQ(stage_bytes(four, 0, "weights"), stage_bytes(one, 0, "weights"));
  EXPECT_EQ(stage_bytes(four, 0, "activations"), stage_bytes(one, 0, "activations"));
}

TEST(HfFsdp2, ReshardNeverKeepsEveryLayerGathered) {
  const auto w = items_of(explain_json(fsdp2({"--reshard-after-forward", "never"}), 0), "weights");
  EXPECT_EQ(w.at("decoder layers gathered"), 32 * kLayer * 2);
}

TEST(HfFsdp2, LoraShardsFrozenBaseInBf16AndAdaptersInFp32) {
  // PEFT r = 16, all-linear: 41,943,040 trainable (PEFT's count; 1,310,720 per layer). The base,
  // 8,030,261,248, is frozen: bf16 shards of ceil(/8) = 1,003,782,656; the adapters fp32 shards of
  // 5,242,880, with two fp32 moments each.
  const auto w = items_of(explain_json(fsdp2({"--finetune", "lora", "--lora-rank", "16"}), 0), "weights");
  EXPECT_EQ(w.at("fp32 shard of the trainable parameters"), 5'242'880u * 4);
  EXPECT_EQ(w.at("shard of the frozen parameters"), 1'003'782'656u * 2);
  EXPECT_EQ(w.at("decoder layers gathered"), 2 * (kLayer + 1'310'720) * 2);
  const auto j = analyze_json(fsdp2({"--finetune", "lora", "--lora-rank", "16"}));
  EXPECT_EQ(stage_bytes(j, 0, "optimizer"), 2 * 5'242'880u * 4);
}

TEST(HfFsdp2, ShortSequencesPeakAtTheOptimizerStep) {
  // 256 tokens: the step's fp32 gradient shard (4,015,130,624 bytes) outweighs what backward adds
  // to the same shards and moments: the tail 1,050,681,344 + two layers 872,448,000 and the
  // activations (at most 256 x 128,256 x 4 x 3 bytes of loss tensors and 32 x 256 x 4096 x 2 of
  // layer inputs: about 0.46 GB).
  const auto j = explain_json(fsdp2({}, "256"), 0);
  EXPECT_EQ(items_of(j, "gradients").at("fp32 gradient shard"), 1'003'782'656u * 4);
  EXPECT_TRUE(items_of(j, "activations").empty());
}

TEST(HfFsdp2, OffloadMovesShardsGradientsAndMomentsToTheHost) {
  // CPUOffloadPolicy: the fp32 parameter shard, the fp32 gradient shard and both moments, each
  // 1,003,782,656 x 4 bytes, in host memory; the GPU keeps the tail and two gathered layers.
  const auto j = analyze_json(fsdp2({"--fsdp-offload-params"}));
  EXPECT_EQ(stage_bytes(j, 0, "host"), 4 * 1'003'782'656ull * 4);
  EXPECT_EQ(stage_bytes(j, 0, "weights"), kTail * 2 + 2 * kLayer * 2);
  EXPECT_EQ(stage_bytes(j, 0, "optimizer"), 0u);
  EXPECT_EQ(stage_bytes(j, 0, "gradients"), 0u);
  // Short sequences: the step runs on the CPU, so the GPU's peak stays at backward.
  EXPECT_FALSE(items_of(explain_json(fsdp2({"--fsdp-offload-params"}, "256"), 0), "activations").empty());
  const auto r = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--fsdp-offload-params"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--fsdp-offload-params: 'set' is not accepted"), std::string::npos) << r.err;
}

TEST(HfFsdp2, SettingsFsdp2CannotHonourAreRefused) {
  const auto refused = [](const Args& a, const std::string& field) {
    const auto r = run_cli(concat({"analyze"}, a));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.err.find(field), std::string::npos) << r.err;
  };
  refused({"--model", "llama-3.1-8b", "--fsdp2"}, "--fsdp2: 'set' is not accepted");
  refused({"--model", "llama-3.1-8b", "--profile", "torchtitan", "--fsdp2"}, "--fsdp2");
  refused(fsdp2({"--zero", "2"}), "--zero: '2' is not accepted");
  refused(fsdp2({"--finetune", "qlora", "--lora-rank", "16"}), "--finetune: 'qlora'");
  refused(fsdp2({"--optimizer-cpu-offload"}), "--optimizer-cpu-offload");
  refused({"--model", "llama-3.1-8b", "--profile", "hf", "--reshard-after-forward", "never"}, "--reshard-after-forward: 'never'");
}

// FSDP2 shards each parameter on dim 0, padding every rank's shard to ceil(dim0 / dp) rows
// (FSDPParam._init_sharded_param; accelerate gives no shard_placement_fn), and gathers dp x that.
// Mixtral-8x7B under transformers 5 holds each layer's experts as gate_up_proj [8, 28672, 4096] and
// down_proj [8, 4096, 14336]: at dp 16 every rank keeps one whole expert row of each, twice the
// even share. By hand (hidden 4096, 32 layers, 8 key/value heads of 128, vocabulary 32000):
//   per layer, ceil(dim0 / 16) rows: q, o 256 x 4096 each; k, v 64 x 4096 each; router gate
//   1 x 4096; gate_up 1 x 28672 x 4096 = 117,440,512; down 1 x 4096 x 14336 = 58,720,256; two
//   norms 256 each: 178,786,816; x 32 = 5,721,178,112; embedding and lm_head 2000 x 4096 each,
//   final norm 256: 5,737,562,368 elements of fp32 shard, and as many of each moment.
//   gathered, dp x the padded shard: q, o 16,777,216 each; k, v 4,194,304 each; gate 65,536;
//   experts 16 x 176,160,768 = 2,818,572,288; norms 8,192: 2,860,589,056 a layer.
TEST(HfFsdp2, ThreeDimensionalExpertsPadToAWholeExpertPerRank) {
  const Args mixtral = {"--model", "mixtral-8x7b", "--profile", "hf", "--fsdp2", "--dp", "16", "--micro-batch", "1",
                        "--seq-len", "4096", "--recompute", "full", "--global-batch", "16"};
  constexpr std::uint64_t shard = 5'737'562'368, layer = 2'860'589'056;
  const auto e = explain_json(mixtral, 0);
  const auto w = items_of(e, "weights");
  EXPECT_EQ(w.at("fp32 shard of the trainable parameters"), shard * 4);
  const auto o = items_of(e, "optimizer");
  EXPECT_EQ(o.at("exp_avg"), shard * 4);
  EXPECT_EQ(o.at("exp_avg_sq"), shard * 4);
  // Two layers' all-gather outputs, bf16, on the all-gather stream.
  EXPECT_EQ(items_of(e, "fragmentation").at("all-gather stream cache"), 2 * layer * 2);
  // Under transformers 4 every expert is an nn.Linear per matrix, whose rows dp divides: the
  // shard is the even split, 46,702,792,704 / 16, but for the router gate [8, 4096], whose one
  // padded row is 2,048 elements over its share in each of 32 layers.
  const auto v4 = items_of(explain_json(concat(mixtral, {"--transformers-version", "4", "--experts-implementation", "eager"}), 0),
                           "weights");
  EXPECT_EQ(v4.at("fp32 shard of the trainable parameters"), (46'702'792'704ULL / 16 + 32 * 2'048) * 4);
}

TEST(HfFsdp2, SearchCommandsCarryTheFlagAndReproduceThePeak) {
  const auto s = analyze_json(fsdp2({"--global-batch", "64"}));  // 8 micro-batches of 1 per rank
  const auto r = run_cli({"search", "--model", "llama-3.1-8b", "--profile", "hf", "--fsdp2", "--gpus", "8", "--gpu", "h100-80g",
                          "--seq-len", "4096", "--global-batch", "64", "--recompute", "full", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  bool found = false;
  for (const auto& e : j.at("layouts")) {
    const std::string cmd = e.at("command").is_string() ? e.at("command").get<std::string>() : e.at("command").dump();
    EXPECT_NE(cmd.find("--fsdp2"), std::string::npos) << cmd;
    if (e.at("micro_batch") == 1 && e.at("recompute") == "full") {
      found = true;
      EXPECT_EQ(e.at("peak_bytes").get<std::uint64_t>(), s.at("peak").at("total_bytes").get<std::uint64_t>());
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
