// torchtitan's DeepSeek-V3 model (MLA + MoE) under the torchtitan profile, as pytorch/torchtitan
// d54d05a5 (PR 1373) trains it: FSDP2 with expert parallelism taken from the shard dimension, full or
// no activation checkpointing. Expected values are worked by hand from DeepSeek-V2-Lite's shapes
// (torchtitan's "16B" flavor has the same: hidden 2048, 27 layers, the first dense (10944), 64
// routed experts of 1408 with top-6 and 2 shared, 16 heads, q_lora_rank 0, kv_lora_rank 512, nope
// 128, rope 64, v 128, vocabulary 102400) and the rules in src/profiles/torchtitan_moe.cpp.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::run_cli;
using nlohmann::json;

std::vector<std::string> pr1373(std::vector<std::string> extra) {
  std::vector<std::string> a = {"analyze", "--model", "deepseek-v2-lite", "--profile", "torchtitan", "--dp", "8", "--ep", "2",
                                "--micro-batch", "8", "--seq-len", "4096", "--recompute", "full"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

json stage0(const std::vector<std::string>& args) {
  std::vector<std::string> a = args;
  a.insert(a.end(), {"--format", "json"});
  const auto r = run_cli(a);
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? json::parse(r.out).at("stages").at(0) : json();
}

std::uint64_t u(const json& j, const char* a, const char* b = nullptr) {
  return (b == nullptr ? j.at(a) : j.at(a).at(b)).get<std::uint64_t>();
}

// Routed experts: 26 MoE layers x 64 x 3 x 2048 x 1408 = 14,394,851,328 of the 15,706,484,224
// parameters; under ep 2 a rank holds half, 7,197,425,664, and FSDP shards them over dp / ep = 4
// (dp_shard_mod_ep), the other 1,311,632,896 over 8: 163,954,112 + 1,799,356,416 = 1,963,310,528
// fp32 elements (x 8 = every parameter once). Root (embedding, output, final norm): 2 x 102400 x
// 2048 + 2048 = 419,432,448 in bf16. The last block, kept unsharded (default policy), is a MoE
// block: wq 2048 x 3072, wkv_a 2048 x 576, kv_norm 512, wkv_b 512 x 4096, wo 2048 x 2048, two
// norms, the gate 64 x 2048, the shared experts 3 x 2048 x 2816, its 32 experts 276,824,064:
// 308,023,808 in bf16.
TEST(TorchtitanMoeCli, ShardsExpertsOverTheShardGroupLessEp) {
  const json s = stage0(pr1373({}));
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(u(s, "bytes", "weights"), 4ull * 1'963'310'528 + 2ull * 419'432'448 + 2ull * 308'023'808);
  EXPECT_EQ(u(s, "bytes", "optimizer"), 8ull * 1'963'310'528);
  EXPECT_EQ(u(s, "bytes", "gradients"), 0u);
  EXPECT_EQ(u(s, "params", "non_expert"), 1'311'632'896ull);
  EXPECT_EQ(u(s, "params", "expert"), 7'197'425'664ull);
}

// Full checkpointing keeps each block's input, 27 x 8 x 4096 x 2048 x 2; the loss at the start of
// backward holds three fp32 b*s x 102400 tensors (40,265,318,400); the token ids and the final
// norm's input and the output's input complete the stage. One MoE block recomputed holds all it
// saves, 6,807,637,000 bytes at 32,768 tokens (attention 1,147,142,144: the block input, the norm
// output and SDPA's output at 134,217,728 each, wkv_a's output 37,748,736, no RoPE copy (the
// complex product saves only freqs_cis), kv_norm's output 33,554,432, q and k 201,326,592 each, wkv_b's
// output 268,435,456, the log-sum-exp 2,097,152; ffn_norm's input and output 134,217,728 each;
// router scores 8,388,608 and three int64 index tensors of 1,572,864; 196,608 routed rows + 1 +
// 32 x 16 padding = 197,121 rows: the permuted input 807,407,616 and its index 1,576,968, four
// SwiGLU tensors 2,220,370,944; the fp32 routed output 1,610,612,736 and scores 786,432; the
// shared experts' four 738,197,504), with its unsaved buffers (the gathered rows and the
// all-to-all's output 805,306,368 each, the experts' output 807,407,616 and its unpermuted copy
// 805,310,464).
TEST(TorchtitanMoeCli, FullCheckpointingLossAndOneBlockRecomputed) {
  const json s = stage0(pr1373({}));
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(u(s, "loss_transient"), 3ull * 8 * 4096 * 102400 * 4);
  EXPECT_EQ(u(s, "recompute_transient"), 6'807'637'000ull + 3'223'330'816ull);
  EXPECT_EQ(u(s, "bytes", "activations"), 27ull * 134'217'728 + 8ull * 4096 * 8 + 2ull * 134'217'728 + 40'265'318'400ull);
  // Without expert parallelism no all-to-all output, and 64 local experts pad 64 x 16 rows.
  const json ep1 = stage0({"analyze", "--model", "deepseek-v2-lite", "--profile", "torchtitan", "--dp", "8", "--micro-batch", "8",
                           "--seq-len", "4096", "--recompute", "full"});
  const std::uint64_t pad = 32ull * 16;  // 32 more padding rows of the permuted input, its index and the experts' output
  EXPECT_EQ(u(ep1, "recompute_transient"),
            6'807'637'000ull + pad * (2048 * 2 + 8 + 4 * 1408 * 2) + 3'223'330'816ull - 805'306'368ull + pad * 2048 * 2);
}

TEST(TorchtitanMoeCli, RefusesWhatItDoesNotModel) {
  const std::vector<std::string> base = {"analyze", "--model", "deepseek-v2-lite", "--profile", "torchtitan", "--seq-len", "4096"};
  for (const auto& [extra, field] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--tp", "2", "--dp", "4"}, "--tp"},
           {{"--pp", "2", "--dp", "4"}, "--pp"},
           {{"--cp", "2", "--dp", "4"}, "--cp"},
           {{"--dp", "8", "--recompute", "selective"}, "--recompute"},
           {{"--dp", "8", "--compile"}, "--compile"},
           {{"--dp", "8", "--fp8", "tensorwise"}, "--fp8"},
           {{"--dp", "8", "--attention", "eager"}, "--attention"},
           {{"--dp", "6", "--ep", "4"}, "--ep"}}) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << field;
    EXPECT_NE(r.err.find(field), std::string::npos) << r.err;
  }
  EXPECT_EQ(run_cli({"analyze", "--model", "deepseek-v2-lite", "--profile", "torchtitan", "--dp", "16", "--ep", "16"}).code, 0);
  // MoE without MLA (Mixtral) and MLA with an indexer are not torchtitan's deepseek_v3.
  const auto mixtral = run_cli({"analyze", "--model", "mixtral-8x7b", "--profile", "torchtitan", "--dp", "8"});
  EXPECT_EQ(mixtral.code, 2);
  EXPECT_NE(mixtral.err.find("deepseek_v3"), std::string::npos) << mixtral.err;
}

}  // namespace
