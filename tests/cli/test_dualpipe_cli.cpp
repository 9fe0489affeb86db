// DualPipe and DualPipeV through `moemem analyze` (issue 3): the chunks each rank holds, its
// parameters (doubled under DualPipe, not under DualPipeV, less the MTP embedding copy where the
// rank holds the main embedding), the micro-batches in flight, and DualPipe's even pp.
// Expected values are restated from the rules (the issue, Megatron-LM, the DualPipe README),
// and relations between runs, never copied from moemem's output.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/pipeline_cli_helpers.hpp"

namespace {

using nlohmann::json;
using moemem::test::pipeline_cli::dsv3;
using moemem::test::pipeline_cli::analyze_json;
using moemem::test::pipeline_cli::u64;
using moemem::test::pipeline_cli::stage_transient;
using moemem::test::pipeline_cli::i64;
using moemem::test::pipeline_cli::expect_exit_2;
using moemem::test::Args;
using moemem::test::concat;
using moemem::test::run_cli;

// The MTP copy of the embedding on one TP rank: 129,280 rows (already a multiple of 128 x 2)
// split over tp 2, times hidden 7168.
constexpr std::uint64_t kMtpEmbeddingCopyTp2 = 129280ull / 2 * 7168;

std::uint64_t total_params(const json& stage) { return u64(stage.at("params").at("total")); }

// DualPipe on 16 ranks: rank r holds chunks r and 15 - r of the 16-chunk cut (parameters twice)
// and pp + 1 = 17 micro-batches of activations. Chunks 1-14 are four MoE layers each, so the
// middle ranks hold exactly twice their 1F1B weights. Ranks 0 and 15 both hold chunk 0
// (embedding, layers 0-3) and chunk 15 (layer 60, head, MTP): the MTP's embedding copy that 1F1B
// stage 15 keeps is the main embedding on these ranks, so their parameters are 1F1B stage 0's
// plus stage 15's less one embedding shard (129,280 / 2 x 7168). The MTP head copy is the main
// head on both schedules.
TEST(PipelineCli, DualPipeDoublesWeightsAndHoldsPpPlusOne) {
  const json one = analyze_json(dsv3({"--global-batch", "1024"}));
  const json dual = analyze_json(dsv3({"--global-batch", "1024", "--schedule", "dualpipe"}));
  ASSERT_FALSE(one.is_null() || dual.is_null());
  ASSERT_EQ(dual.at("stages").size(), 16u);
  EXPECT_EQ(i64(dual.at("parallel").at("num_chunks")), 16);
  for (std::size_t r = 0; r < 16; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto& d = dual.at("stages")[r];
    const auto& o = one.at("stages")[r];
    const auto& mirror = one.at("stages")[15 - r];
    EXPECT_EQ(i64(d.at("model_chunks")), 2);
    EXPECT_EQ(i64(d.at("in_flight_microbatches")), 17);
    ASSERT_EQ(d.at("chunks").size(), 2u);
    EXPECT_EQ(i64(d.at("chunks")[0].at("chunk")), static_cast<std::int64_t>(r));
    EXPECT_EQ(i64(d.at("chunks")[1].at("chunk")), 15 - static_cast<std::int64_t>(r));
    // The chunks' one-micro-batch activations are those of the 1F1B stages holding them.
    EXPECT_EQ(u64(d.at("chunks")[0].at("activations_per_microbatch")), u64(o.at("activations_per_microbatch")));
    EXPECT_EQ(u64(d.at("chunks")[1].at("activations_per_microbatch")), u64(mirror.at("activations_per_microbatch")));
    if (r >= 1 && r <= 14) {
      EXPECT_EQ(total_params(o), total_params(mirror));  // four MoE layers each
      EXPECT_EQ(total_params(d), 2 * total_params(o));
      for (const char* k : {"weights", "gradients", "optimizer"}) {
        EXPECT_EQ(u64(d.at("bytes").at(k)), 2 * u64(o.at("bytes").at(k))) << k;
      }
      EXPECT_EQ(u64(d.at("params").at("expert")), 2 * u64(o.at("params").at("expert")));
      // Two equal chunks: pp + 1 = 17 micro-batches of either.
      EXPECT_EQ(u64(d.at("bytes").at("activations")), 17 * u64(o.at("activations_per_microbatch")) + stage_transient(d));
    } else {
      const auto& s0 = one.at("stages")[0];
      const auto& s15 = one.at("stages")[15];
      EXPECT_EQ(total_params(d), total_params(s0) + total_params(s15) - kMtpEmbeddingCopyTp2);
      EXPECT_EQ(u64(d.at("params").at("non_expert")),
                u64(s0.at("params").at("non_expert")) + u64(s15.at("params").at("non_expert")) - kMtpEmbeddingCopyTp2);
      EXPECT_EQ(u64(d.at("params").at("expert")), u64(s0.at("params").at("expert")) + u64(s15.at("params").at("expert")));
      // bf16 weights without ZeRO: 2 bytes per parameter.
      EXPECT_EQ(u64(d.at("bytes").at("weights")), 2 * total_params(d));
      EXPECT_TRUE(d.at("has_embedding").get<bool>());
      EXPECT_TRUE(d.at("has_head").get<bool>());
      EXPECT_EQ(i64(d.at("mtp_depths")), 1);
    }
  }
  // Where that difference sits: the MTP module of 1F1B stage 15 is its embedding copy, eh_proj
  // (7168 x 14336, column-parallel: 3584 rows per rank) and three norms of 7168 (the head copy is
  // the main head); on DualPipe's rank 0 only eh_proj and the norms remain.
  const std::uint64_t eh_proj_and_norms = 3584ull * 14336 + 3 * 7168;
  EXPECT_EQ(u64(one.at("stages")[15].at("params").at("by_module").at("mtp")), kMtpEmbeddingCopyTp2 + eh_proj_and_norms);
  EXPECT_EQ(u64(dual.at("stages")[0].at("params").at("by_module").at("mtp")), eh_proj_and_norms);
  EXPECT_EQ(u64(dual.at("stages")[15].at("params").at("by_module").at("mtp")), eh_proj_and_norms);
}

TEST(PipelineCli, DualPipeNeedsAnEvenPp) {
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--tp", "1", "--pp", "3", "--ep", "8", "--dp", "8", "--schedule",
                 "dualpipe"},
                {"--pp", "even"});
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "15", "--ep", "8", "--dp", "32", "--schedule",
                 "dualpipe"},
                {"--pp"});
  // dualpipe and dualpipev hold two chunks, not v.
  expect_exit_2(dsv3({"--schedule", "dualpipe", "--vpp", "2"}), {"--schedule"});
}

// DualPipe's step() asserts an even count of at least 2 x pp micro-batches, DualPipeV's at least
// 2 x pp (deepseek-ai/DualPipe dualpipe.py, dualpipev.py): a global batch that gives fewer is refused,
// naming it, the count it gives and the bound; 2 x pp itself is accepted.
TEST(PipelineCli, DualPipeNeedsTwicePpMicroBatches) {
  const Args base = {"analyze", "--model", "llama-3.1-8b", "--pp", "4", "--dp", "1"};
  expect_exit_2(concat(base, {"--schedule", "dualpipe", "--global-batch", "6"}),
                {"--global-batch", "'6'", "an even count of at least 2 x pp = 8", "this gives 6"});
  expect_exit_2(concat(base, {"--schedule", "dualpipe", "--global-batch", "9"}), {"--global-batch", "'9'", "even"});
  expect_exit_2(concat(base, {"--schedule", "dualpipev", "--global-batch", "7"}),
                {"--global-batch", "dualpipev at least 2 x pp = 8", "this gives 7"});
  for (const char* schedule : {"dualpipe", "dualpipev"}) {
    EXPECT_EQ(run_cli(concat(base, {"--schedule", schedule, "--global-batch", "8"})).code, 0) << schedule;
  }
}

// DualPipeV on 8 ranks cuts the model into 16 chunks (the same cut as 1F1B on 16) and rank r
// holds chunks r and 15 - r: parameters are not doubled, each chunk is on exactly one rank.
// Rank 0 holds both the embedding and the MTP, so the MTP embedding copy is not kept; the ranks
// add up to the 16 1F1B stages less that copy. In flight: 2pp + 1 = 17 chunk micro-batches.
TEST(PipelineCli, DualPipeVHoldsTwoChunksWithoutDoubling) {
  const json one = analyze_json(dsv3({"--global-batch", "1024"}));
  const json v = analyze_json({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "8", "--ep", "8", "--dp", "32",
                               "--sp", "--schedule", "dualpipev", "--global-batch", "1024"});
  ASSERT_FALSE(one.is_null() || v.is_null());
  EXPECT_EQ(i64(v.at("parallel").at("num_chunks")), 16);
  ASSERT_EQ(v.at("stages").size(), 8u);
  std::uint64_t sum_one = 0, sum_v = 0;
  for (const auto& s : one.at("stages")) sum_one += total_params(s);
  for (std::size_t r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto& s = v.at("stages")[r];
    sum_v += total_params(s);
    EXPECT_EQ(i64(s.at("model_chunks")), 2);
    EXPECT_EQ(i64(s.at("in_flight_microbatches")), 17);
    ASSERT_EQ(s.at("chunks").size(), 2u);
    EXPECT_EQ(i64(s.at("chunks")[0].at("chunk")), static_cast<std::int64_t>(r));
    EXPECT_EQ(i64(s.at("chunks")[1].at("chunk")), 15 - static_cast<std::int64_t>(r));
    const std::uint64_t pair = total_params(one.at("stages")[r]) + total_params(one.at("stages")[15 - r]);
    EXPECT_EQ(total_params(s), r == 0 ? pair - kMtpEmbeddingCopyTp2 : pair);
  }
  EXPECT_EQ(sum_v, sum_one - kMtpEmbeddingCopyTp2);
  // Ranks 1-7 hold two chunks of four MoE layers: 17 micro-batches of either.
  for (std::size_t r = 1; r < 8; ++r) {
    EXPECT_EQ(u64(v.at("stages")[r].at("bytes").at("activations")),
              17 * u64(one.at("stages")[r].at("activations_per_microbatch")) + stage_transient(v.at("stages")[r]))
        << r;
  }
}

// What DualPipe and DualPipeV hold per chunk at their peak, from deepseek-ai/DualPipe's
// dualpipe.py / dualpipev.py step(): with h = min(r, pp-1-r), steps 1-2 run (pp/2 - h - 1) * 2
// + h + 1 forwards of phase 0 and h + 1 of phase 1, step 3 keeps phase 1 at h + 1 (B1 W F1), and
// step 4 opens with one more F0 overlapped with B1: pp - h and h + 1, pp + 1 in all. Phase 0 of
// rank r is model stage r for r < pp/2 and stage pp-1-r otherwise, so stage s is always held
// pp - s times, as 1F1B holds it: DualPipe rank r holds 1F1B stage r's activations plus 1F1B
// stage (pp-1-r)'s. DualPipeV (dualpipev.py, 2pp chunks, chunk r as phase 0, 2pp-1-r as phase
// 1): steps 1-4 give 2pp - r and r + 1, i.e. chunk c held 2pp - c times, 1F1B over 2pp stages.
// Both need m >= 2 * ranks (asserted in step()); here m = 32.
// moemem charges pp + 1 (2pp + 1) times the larger chunk instead, which on DeepSeek-V3's end
// ranks (chunk 0: embedding + 4 layers; chunk 15: 1 layer + head + MTP + two fp32 logits)
// counts 16 micro-batches of the larger last chunk that the schedule never holds.
TEST(PipelineCli, DualPipeActivationsPerChunkFollowTheSchedule) {
  const json one = analyze_json(dsv3({"--global-batch", "1024"}));
  const json dual = analyze_json(dsv3({"--global-batch", "1024", "--schedule", "dualpipe"}));
  const json v = analyze_json({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "8", "--ep", "8", "--dp", "32",
                               "--sp", "--schedule", "dualpipev", "--global-batch", "1024"});
  ASSERT_FALSE(one.is_null() || dual.is_null() || v.is_null());
  // Saved activations (the stage's one layer or loss transient apart).
  const auto act = [](const json& j, std::size_t s) {
    return u64(j.at("stages")[s].at("bytes").at("activations")) - stage_transient(j.at("stages")[s]);
  };
  for (std::size_t r = 0; r < 16; ++r) EXPECT_EQ(act(dual, r), act(one, r) + act(one, 15 - r)) << "dualpipe rank " << r;
  for (std::size_t r = 0; r < 8; ++r) EXPECT_EQ(act(v, r), act(one, r) + act(one, 15 - r)) << "dualpipev rank " << r;
}

}  // namespace
