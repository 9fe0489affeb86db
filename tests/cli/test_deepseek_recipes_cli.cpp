// --recipe deepseek-v3 / deepseek-v2 on the runs their reports describe (issue 18): each technique of
// the V3 report switched off with --recipe-off changes the bytes its rule says, by hand from
// DeepSeek-V3's dimensions (data/models/deepseek-v3.json: h 7168, 128 heads, qk 192 = 128 + 64,
// v 128, q_lora 1536, kv_lora 512, 256 experts of ffn 2048, top-8, one shared expert of 2048);
// the report's own run fits an H800 on every stage with the recipe's default split.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"

namespace {

using nlohmann::json;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::Args;
using moemem::test::activations_cli::ceil_div;
using moemem::test::activations_cli::concat;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::i64;
using moemem::test::activations_cli::items_of;
using moemem::test::activations_cli::u64;

// The V3 report's run (§3.2-3.3): 2,048 H800, TP1, PP16 DualPipe, EP64, DP128 ZeRO-1, s 4096, b 1.
Args v3_run(const Args& extra = {}, const std::string& schedule = "dualpipe") {
  return concat({"--model", "deepseek-v3", "--pp", "16", "--ep", "64", "--dp", "128", "--schedule", schedule, "--recipe",
                 "deepseek-v3", "--seq-len", "4096", "--micro-batch", "1", "--global-batch", "15360"},
                extra);
}

constexpr std::uint64_t kTokens = 4096;  // b x s, tp 1, cp 1
constexpr std::uint64_t kH = 7168, kHeads = 128, kQk = 192, kV = 128;
constexpr std::uint64_t kRoutedRows = kTokens * 8;  // tokens x top-k (etp 1, balanced)
constexpr std::uint64_t kFfn = 2048;

// FP8 with a fp32 scale per 1x128 tile: one byte per element plus 4 bytes per 128.
constexpr std::uint64_t fp8_tiled(std::uint64_t n) { return n + 4 * ((n + 127) / 128); }

// Stage 1's middle chunk (4 MoE layers) through one micro-batch.
std::uint64_t chunk_bytes(const json& r) { return u64(r.at("stages").at(1).at("chunks").at(0).at("activations_per_microbatch")); }
std::uint64_t chunk_layers(const json& r) { return u64(r.at("stages").at(1).at("chunks").at(0).at("num_layers")); }

TEST(DeepSeekRecipes, E5m6AttentionOutputReplacesTheBf16ContextWithATiledE5m6One) {
  const json on = analyze_json(v3_run()), off = analyze_json(v3_run({"--recipe-off", "e5m6-attention-output"}));
  ASSERT_FALSE(on.is_null());
  ASSERT_FALSE(off.is_null());
  // Off: the BF16 context (2 bytes) kept by attention, which o_proj also saves (Megatron's
  // set_save_original_input under blockwise FP8; no FP8 copy); on: one E5M6 tensor in a 16-bit
  // container (moemem's high side of 12 bits) plus a fp32 scale per 1x128 tile. So the recipe
  // costs the tile scales here (against Megatron 0.12, which kept o_proj's FP8 copy, it saved a
  // byte per element; the recipe's moe_act needs 0.13, so that is checked in test_explain.cpp).
  const std::uint64_t per_layer = kTokens * kHeads * kV;
  ASSERT_EQ(chunk_layers(on), 4u);
  EXPECT_EQ(chunk_bytes(on) - chunk_bytes(off), 4 * (4 * (per_layer / 128)));
}

TEST(DeepSeekRecipes, Fp8SwigluInputsCacheRoutedAndSharedExpertInputsAndRecomputeTheOutput) {
  const json on = analyze_json(v3_run()), off = analyze_json(v3_run({"--recipe-off", "fp8-swiglu-input"}));
  ASSERT_FALSE(on.is_null());
  ASSERT_FALSE(off.is_null());
  // Off: routed fc1 output in BF16 and the activation output (fc2 input) in FP8; the shared
  // expert the same. On: both fc1 outputs in FP8 with tile scales, no activation output.
  const std::uint64_t off_layer = 2 * kRoutedRows * 2 * kFfn + fp8_tiled(kRoutedRows * kFfn) + 2 * kTokens * 2 * kFfn +
                                  fp8_tiled(kTokens * kFfn);
  const std::uint64_t on_layer = fp8_tiled(kRoutedRows * 2 * kFfn) + fp8_tiled(kTokens * 2 * kFfn);
  EXPECT_EQ(chunk_bytes(off) - chunk_bytes(on), 4 * (off_layer - on_layer));
}

TEST(DeepSeekRecipes, MlaUpRecomputeKeepsNoneOfQKVNorTheUpProjectionInputs) {
  const json on = analyze_json(v3_run()), off = analyze_json(v3_run({"--recipe-off", "mla-up-recompute"}));
  ASSERT_FALSE(on.is_null());
  ASSERT_FALSE(off.is_null());
  // Off: q and k (heads x 192) and v (heads x 128) in BF16, and the up-projections' FP8 inputs
  // (the q and kv latents after their norms: 1536 and 512 wide).
  const std::uint64_t per_layer =
      2 * kTokens * kHeads * (2 * kQk + kV) + fp8_tiled(kTokens * 1536) + fp8_tiled(kTokens * 512);
  EXPECT_EQ(chunk_bytes(off) - chunk_bytes(on), 4 * per_layer);
}

TEST(DeepSeekRecipes, RmsnormRecomputeKeepsNoNormOutputs) {
  const json on = analyze_json(v3_run()), off = analyze_json(v3_run({"--recipe-off", "rmsnorm-recompute"}));
  ASSERT_FALSE(on.is_null());
  ASSERT_FALSE(off.is_null());
  // Off: the input norm's output is kept as the q/kv down-projections' FP8 input, and the pre-MoE
  // norm's output as the router's BF16 input (the router's GEMM is not FP8).
  EXPECT_EQ(chunk_bytes(off) - chunk_bytes(on), 4 * (fp8_tiled(kTokens * kH) + 2 * kTokens * kH));
}

TEST(DeepSeekRecipes, Fp8AndNodeLimitedDispatchShrinkThePermutedTokens) {
  const auto permuted = [](const Args& extra) {
    const json e = explain_json(v3_run(extra), 1);
    if (e.is_null()) return std::uint64_t{0};
    auto items = items_of(e, "activations");
    return items["moe.permuted_tokens (transient)"] + items["moe.permuted_tokens.scales (transient)"];
  };
  // EP64 spans 8 nodes of 8 GPUs: each token goes to min(top-8, 4 nodes) = 4 destinations, in FP8.
  EXPECT_EQ(permuted({}), fp8_tiled(kTokens * 4 * kH));
  EXPECT_EQ(permuted({"--recipe-off", "node-limited-dispatch"}), fp8_tiled(kTokens * 8 * kH));
  EXPECT_EQ(permuted({"--recipe-off", "fp8-dispatch"}), 2 * kTokens * 4 * kH);
  EXPECT_EQ(permuted({"--recipe-off", "fp8-dispatch,node-limited-dispatch"}), 2 * kTokens * 8 * kH);
}

// Left out, the EMA stays on the GPU (the same fp32 copy among the weights), so what the
// technique saves shows.
TEST(DeepSeekRecipes, EmaLivesInHostMemoryNotOnTheGpu) {
  const json on = analyze_json(v3_run()), off = analyze_json(v3_run({"--recipe-off", "ema-on-cpu"}));
  ASSERT_FALSE(on.is_null());
  ASSERT_FALSE(off.is_null());
  for (std::size_t s = 0; s < on.at("stages").size(); ++s) {
    const auto& a = on.at("stages").at(s);
    EXPECT_EQ(u64(a.at("bytes").at("host")), 4 * u64(a.at("params").at("total"))) << s;  // fp32 per parameter
    const auto& b = off.at("stages").at(s);
    EXPECT_EQ(u64(b.at("bytes").at("host")), 0u) << s;
    EXPECT_EQ(u64(b.at("bytes").at("weights")), u64(a.at("bytes").at("weights")) + 4 * u64(a.at("params").at("total"))) << s;
    EXPECT_GT(u64(b.at("bytes").at("total")), u64(a.at("bytes").at("total")) + 4 * u64(a.at("params").at("total"))) << s;
  }
}

TEST(DeepSeekRecipes, Bf16MomentsHalveTheSecondAndFirstMoments) {
  const json on = analyze_json(v3_run()), off = analyze_json(v3_run({"--recipe-off", "bf16-moments"}));
  ASSERT_FALSE(on.is_null());
  ASSERT_FALSE(off.is_null());
  const auto& p = on.at("stages").at(1).at("params").at("trainable");
  // ZeRO-1: non-expert states over dp 128, expert states over edp = 128 / 64 = 2; two moments,
  // 2 more bytes each in fp32.
  const std::uint64_t shards = ceil_div(u64(p.at("non_expert")), 128) + ceil_div(u64(p.at("expert")), 2);
  EXPECT_EQ(u64(off.at("stages").at(1).at("bytes").at("optimizer")) - u64(on.at("stages").at(1).at("bytes").at("optimizer")),
            2 * 2 * shards);
}

TEST(DeepSeekRecipes, OnlineFp8WeightsKeepNoResidentFp8Copies) {
  const json on = analyze_json(v3_run()), off = analyze_json(v3_run({"--recipe-off", "online-fp8-weights"}));
  ASSERT_FALSE(on.is_null());
  ASSERT_FALSE(off.is_null());
  const auto& a = on.at("stages").at(1);
  const auto& b = off.at("stages").at(1);
  EXPECT_EQ(u64(a.at("fp8_weight_copies")), 0u);
  EXPECT_GT(u64(b.at("fp8_weight_copies")), 0u);
  EXPECT_EQ(u64(b.at("bytes").at("weights")) - u64(a.at("bytes").at("weights")), u64(b.at("fp8_weight_copies")));
}

// §3.2.3: under DualPipe the MTP module shares the embedding's rank and uses it without a copy;
// under 1F1B the last stage (MTP and head) keeps its own copy of the 129,280 x 7168 embedding.
TEST(DeepSeekRecipes, DualPipeSharesTheEmbeddingWithMtpPhysically) {
  const json dual = analyze_json(v3_run());
  const json one = analyze_json(v3_run({}, "1f1b"));
  ASSERT_FALSE(dual.is_null());
  ASSERT_FALSE(one.is_null());
  const auto mtp_params = [](const json& r, std::size_t s) { return u64(r.at("stages").at(s).at("params").at("by_module").at("mtp")); };
  EXPECT_EQ(mtp_params(one, 15) - mtp_params(dual, 0), 129280u * kH);
  EXPECT_TRUE(dual.at("stages").at(0).at("has_embedding").get<bool>());
  EXPECT_GT(i64(dual.at("stages").at(0).at("mtp_depths")), 0);
}

// The report's run fits an H800 (79.65 GiB) on every stage with the recipe's default split, which
// counts E, the MTP depth and L as a layer each: 64 units over 16 stages, 4 each, so stage 0's
// chunks hold 3 and 2 decoder layers.
TEST(DeepSeekRecipes, V3ReportRunFitsAnH800OnEveryStageWithTheDefaultSplit) {
  const json r = analyze_json(v3_run({"--gpu", "h800-80g", "--no-margin"}));
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(i64(r.at("parallel").at("world_size")), 2048);
  const std::uint64_t capacity = u64(r.at("gpu").at("capacity_bytes"));
  for (const auto& s : r.at("stages")) {
    EXPECT_LE(u64(s.at("bytes").at("total")), capacity) << "stage " << i64(s.at("stage"));
  }
  const auto& c0 = r.at("stages").at(0).at("chunks");
  EXPECT_EQ(i64(c0.at(0).at("num_layers")), 3);
  EXPECT_EQ(i64(c0.at(1).at("num_layers")), 2);
  const moemem::test::CliResult t = moemem::test::run_cli(concat({"analyze"}, v3_run({"--gpu", "h800-80g", "--no-margin"})));
  EXPECT_EQ(t.code, 0);
  EXPECT_NE(t.out.find("GiB free"), std::string::npos) << t.out;  // the headroom of each stage
  EXPECT_EQ(t.out.find("short"), std::string::npos) << t.out;
}

// DeepSeek-V2 (arXiv 2405.04434 §3.1.3): 16-way zero-bubble PP, 8-way EP, ZeRO-1, no TP, 4K
// sequences, on H800; its cluster size is unpublished, so the check takes 512 GPUs (dp 32), and
// the batch of 9,216 sequences.
TEST(DeepSeekRecipes, V2ReportRunFitsAnH800OnEveryStage) {
  const json r = analyze_json({"--model", "deepseek-v2", "--pp", "16", "--ep", "8", "--dp", "32", "--schedule", "zb-h1",
                               "--recipe", "deepseek-v2", "--seq-len", "4096", "--global-batch", "9216", "--gpu",
                               "h800-80g", "--no-margin"});
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(i64(r.at("training").at("zero")), 1);
  EXPECT_EQ(r.at("training").at("fp8"), "none");
  const std::uint64_t capacity = u64(r.at("gpu").at("capacity_bytes"));
  for (const auto& s : r.at("stages")) {
    EXPECT_LE(u64(s.at("bytes").at("total")), capacity) << "stage " << i64(s.at("stage"));
    EXPECT_EQ(u64(s.at("bytes").at("host")), 0u);
  }
  // 60 layers + E + L = 62 units over 16 stages: 3 each and 14 left for the middle ones.
  EXPECT_EQ(i64(r.at("stages").at(0).at("num_layers")), 2);
  EXPECT_EQ(i64(r.at("stages").at(1).at("num_layers")), 4);
  EXPECT_EQ(i64(r.at("stages").at(15).at("num_layers")), 2);
}

TEST(DeepSeekRecipes, RecipeOffNamesWhatIsWrong) {
  expect_exit_2(concat({"analyze"}, v3_run({"--recipe-off", "dualpipe"})), {"--recipe-off", "dualpipe", "e5m6-attention-output"});
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--pp", "16", "--recipe-off", "fp8"}, {"--recipe-off", "--recipe"});
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--recipe", "deepseek-v4"}, {"--recipe", "deepseek-v4", "deepseek-v2"});
  expect_exit_2({"paper", "--recipe", "deepseek-v2"}, {"--recipe", "deepseek-v2"});
  // A technique the recipe does not carry cannot be left out of it.
  expect_exit_2({"analyze", "--model", "deepseek-v2", "--pp", "4", "--recipe", "deepseek-v2", "--recipe-off", "fp8,ema-on-cpu"},
                {"--recipe-off", "ema-on-cpu, fp8", "rmsnorm-recompute, mla-up-recompute"});
}

TEST(DeepSeekRecipes, PaperShowsTheReportRunBesideTheReference) {
  const moemem::test::CliResult plain = moemem::test::run_cli({"paper"});
  const moemem::test::CliResult with = moemem::test::run_cli({"paper", "--recipe", "deepseek-v3"});
  ASSERT_EQ(plain.code, 0);
  ASSERT_EQ(with.code, 0);
  EXPECT_EQ(with.out.substr(0, plain.out.size()), plain.out);  // the reference tables unchanged
  const std::string added = with.out.substr(plain.out.size());
  EXPECT_NE(added.find("DualPipe"), std::string::npos);
  EXPECT_NE(added.find("H800 headroom GiB"), std::string::npos);
  EXPECT_NE(added.find("E+5 layers+H+MTP1"), std::string::npos);  // stage 0: chunks 0 and 15
}

}  // namespace
