// Every stage under the schedule it runs (issue 3), through `moemem analyze`: DeepSeek-V3 with
// TP2 PP16 EP8 DP32 under 1F1B, GPipe, ZB-H1, DualPipe and DualPipeV; NVIDIA's interleaved
// recipe TP2 PP8 VPP4 EP64 DP64 with the layout string `Et|(tt|)*30mL`; Megatron's uneven
// splits; GPU capacity verdicts; and the paper profile, which ignores the schedule.
// Expected values are restated from the rules (the issue, Megatron-LM, the DualPipe README),
// and relations between runs, never copied from moemem's output.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::CliResult;
using moemem::test::run_cli;
using nlohmann::json;

using Args = std::vector<std::string>;

std::string joined(const Args& args) {
  std::string s = "moemem";
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

Args concat(Args a, const Args& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// DeepSeek-V3 (its MTP depth included, as the megatron profile does by default) with the
// reference layout TP2 PP16 EP8 DP32 and sequence parallelism.
Args dsv3(const Args& extra = {}) {
  return concat({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--ep", "8", "--dp", "32", "--sp"},
                extra);
}

// NVIDIA's DeepSeek-V3 recipe: TP2 PP8 VPP4 EP64 DP64, MTP 1, with a layout string.
Args nvidia_with(const std::string& layout, const Args& extra = {}) {
  return concat({"analyze", "--model", "deepseek-v3", "--mtp", "1", "--tp", "2", "--pp", "8", "--vpp", "4", "--ep",
                 "64", "--dp", "64", "--sp", "--pipeline-model-parallel-layout", layout},
                extra);
}
// ... with its own layout, `Et|(tt|)*30mL`.
Args nvidia(const Args& extra = {}) { return nvidia_with("Et|(tt|)*30mL", extra); }

// Runs analyze with --format json; a null json (and a test failure) when it does not succeed.
json analyze_json(const Args& args) {
  const Args full = concat(args, {"--format", "json"});
  const CliResult r = run_cli(full);
  EXPECT_EQ(r.code, 0) << joined(full) << "\n" << r.err;
  if (r.code != 0) return json();
  return json::parse(r.out);
}

std::uint64_t u64(const json& j) { return j.get<std::uint64_t>(); }
std::int64_t i64(const json& j) { return j.get<std::int64_t>(); }
std::uint64_t total_params(const json& stage) { return u64(stage.at("params").at("total")); }

// Exit 2, nothing on stdout, and an error naming every word of `words`.
void expect_exit_2(const Args& args, std::initializer_list<const char*> words) {
  SCOPED_TRACE(joined(args));
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("moemem: error: ", 0), 0u) << r.err;
  for (const char* w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
}

// The MTP copy of the embedding on one TP rank: 129,280 rows (already a multiple of 128 x 2)
// split over tp 2, times hidden 7168.
constexpr std::uint64_t kMtpEmbeddingCopyTp2 = 129280ull / 2 * 7168;

// ---------------------------------------------------------------------------------------------
// 1F1B on DeepSeek-V3: stage p holds min(16 - p, m) micro-batches.

// --global-batch 1024 with micro-batch 1 and dp 32: m = 32 >= pp. With the distributed optimizer
// the middle stages do not fit an 80 GB H800 (stage 1: 6.1e9 parameters x 6 bytes of weights
// and gradients ~ 37 GB, plus 15 micro-batches x 4 layers of > 900 MB of routed-expert and
// attention activations each ~ 54 GB) while the last one does (about 4e9 parameters and one
// micro-batch): the report must say which.
TEST(PipelineCli, OneFOneBDeepSeekV3StagePHoldsSixteenMinusP) {
  const Args args = dsv3({"--global-batch", "1024", "--distributed-optimizer", "--gpu", "h800-80g"});
  const json j = analyze_json(args);
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j.at("schema"), "moemem.report/1");
  EXPECT_EQ(j.at("parallel").at("schedule"), "1f1b");
  EXPECT_EQ(i64(j.at("training").at("microbatches_per_step")), 32);
  const auto& stages = j.at("stages");
  ASSERT_EQ(stages.size(), 16u);
  const std::uint64_t capacity = 81559ull * 1048576;
  EXPECT_EQ(u64(j.at("gpu").at("capacity_bytes")), capacity);
  std::uint64_t peak_total = 0;
  std::size_t peak = 0;
  bool all_fit = true, some_fit = false;
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    const auto& s = stages[p];
    EXPECT_EQ(i64(s.at("stage")), static_cast<std::int64_t>(p));
    EXPECT_EQ(i64(s.at("in_flight_microbatches")), 16 - static_cast<std::int64_t>(p));
    EXPECT_EQ(i64(s.at("model_chunks")), 1);
    const std::uint64_t per_mb = u64(s.at("activations_per_microbatch"));
    EXPECT_GT(per_mb, 0u);
    // The last stage adds the loss's backward transient (no recomputation here).
    EXPECT_EQ(u64(s.at("bytes").at("activations")), (16 - p) * per_mb + u64(s.at("loss_transient")));
    EXPECT_EQ(u64(s.at("loss_transient")) > 0, p == 15);
    // The one chunk's activations are the stage's.
    ASSERT_EQ(s.at("chunks").size(), 1u);
    EXPECT_EQ(u64(s.at("chunks")[0].at("activations_per_microbatch")), per_mb);
    // Totals add up from their parts.
    const auto& b = s.at("bytes");
    const std::uint64_t total = u64(b.at("total"));
    EXPECT_EQ(total, u64(b.at("weights")) + u64(b.at("gradients")) + u64(b.at("optimizer")) +
                         u64(b.at("activations")) + u64(b.at("buffers")) + u64(b.at("fragmentation")) +
                  u64(b.at("runtime")));
    if (total > peak_total) {
      peak_total = total;
      peak = p;
    }
    // Fit verdict and margin against 81,559 MiB.
    const bool fits = total <= capacity;
    EXPECT_EQ(s.at("fits").get<bool>(), fits);
    EXPECT_EQ(i64(s.at("headroom_bytes")), static_cast<std::int64_t>(capacity) - static_cast<std::int64_t>(total));
    all_fit = all_fit && fits;
    some_fit = some_fit || fits;
  }
  EXPECT_EQ(i64(j.at("peak").at("stage")), static_cast<std::int64_t>(peak));
  EXPECT_EQ(u64(j.at("peak").at("total_bytes")), peak_total);
  EXPECT_EQ(j.at("gpu").at("all_fit").get<bool>(), all_fit);
  EXPECT_FALSE(stages[1].at("fits").get<bool>());
  EXPECT_TRUE(stages[15].at("fits").get<bool>());
  ASSERT_TRUE(some_fit && !all_fit);

  // The stage table says, row by row, which stage fits and by how much.
  const CliResult text = run_cli(args);
  ASSERT_EQ(text.code, 0) << text.err;
  std::istringstream lines(text.out);
  std::string line;
  std::vector<bool> seen(16, false);
  while (std::getline(lines, line)) {
    std::size_t end = 0;
    while (end < line.size() && line[end] >= '0' && line[end] <= '9') ++end;
    if (end == 0 || end >= line.size() || line[end] != ' ') continue;
    const auto p = static_cast<std::size_t>(std::stoi(line.substr(0, end)));
    ASSERT_LT(p, 16u) << line;
    seen[p] = true;
    const auto& s = stages[p];
    const bool fits = s.at("fits").get<bool>();
    const double gib = static_cast<double>(std::llabs(i64(s.at("headroom_bytes")))) / 1073741824.0;
    char margin[32];
    std::snprintf(margin, sizeof margin, "%.2f GiB", gib);
    EXPECT_NE(line.find(fits ? "yes" : "NO"), std::string::npos) << line;
    EXPECT_EQ(line.find(fits ? "NO" : "yes"), std::string::npos) << line;
    EXPECT_NE(line.find(margin), std::string::npos) << "stage " << p << " margin " << margin << " in: " << line;
  }
  for (std::size_t p = 0; p < 16; ++p) EXPECT_TRUE(seen[p]) << "no table row for stage " << p;
  EXPECT_NE(text.out.find("peak: stage " + std::to_string(peak)), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("DOES NOT FIT"), std::string::npos) << text.out;
}

// --gpu-memory takes any size: 80 GiB = 85,899,345,920 bytes; margins against it.
TEST(PipelineCli, GpuMemoryGivenAsASize) {
  const json j = analyze_json(dsv3({"--global-batch", "1024", "--gpu-memory", "80GiB"}));
  ASSERT_FALSE(j.is_null());
  const std::uint64_t capacity = 80ull << 30;
  EXPECT_EQ(u64(j.at("gpu").at("capacity_bytes")), capacity);
  bool all_fit = true;
  for (const auto& s : j.at("stages")) {
    const std::uint64_t total = u64(s.at("bytes").at("total"));
    EXPECT_EQ(s.at("fits").get<bool>(), total <= capacity);
    EXPECT_EQ(i64(s.at("headroom_bytes")), static_cast<std::int64_t>(capacity) - static_cast<std::int64_t>(total));
    all_fit = all_fit && total <= capacity;
  }
  EXPECT_EQ(j.at("gpu").at("all_fit").get<bool>(), all_fit);
  // A GPU big enough for everything: every stage fits, and the table says so.
  const CliResult big = run_cli(dsv3({"--global-batch", "128", "--distributed-optimizer", "--gpu-memory", "100TiB"}));
  ASSERT_EQ(big.code, 0) << big.err;
  EXPECT_NE(big.out.find("every stage fits"), std::string::npos) << big.out;
  EXPECT_EQ(big.out.find("NO,"), std::string::npos) << big.out;
  expect_exit_2(dsv3({"--gpu", "h800-80g", "--gpu-memory", "80GiB"}), {"--gpu"});
  expect_exit_2(dsv3({"--gpu", "h900-80g"}), {"--gpu", "h900-80g"});
}

// The last stage's loss and MTP logits through the CLI: with --logits-dtype bf16 each of the two
// (main head, MTP depth 1) shrinks by b*s*V/tp*2 bytes per micro-batch; only stage 15 changes.
// tp 2: V = 129,280 (a multiple of 256); tp 4: padded to 129,536 (253 x 512).
TEST(PipelineCli, LogitsDtypeOnTheLastStage) {
  for (const char* tp : {"2", "4"}) {
    const Args base = {"analyze", "--model", "deepseek-v3", "--tp", tp, "--pp", "16", "--ep", "8", "--dp", "32", "--sp"};
    const json fp32 = analyze_json(base);
    const json bf16 = analyze_json(concat(base, {"--logits-dtype", "bf16"}));
    ASSERT_FALSE(fp32.is_null() || bf16.is_null());
    const std::uint64_t vocab = std::string(tp) == "2" ? 129280 : 129536;
    EXPECT_EQ(u64(fp32.at("training").at("padded_vocab")), vocab);
    const std::uint64_t per_rank = vocab / std::stoull(tp);
    for (std::size_t p = 0; p < 16; ++p) {
      const std::uint64_t a = u64(fp32.at("stages")[p].at("activations_per_microbatch"));
      const std::uint64_t b = u64(bf16.at("stages")[p].at("activations_per_microbatch"));
      EXPECT_EQ(a - b, p == 15 ? 2 * 4096 * per_rank * 2 : 0) << "tp " << tp << " stage " << p;
    }
    // Without padding (--make-vocab-size-divisible-by 1) the head has 129,280 rows at any tp.
    const json unpadded = analyze_json(concat(base, {"--make-vocab-size-divisible-by", "1"}));
    ASSERT_FALSE(unpadded.is_null());
    EXPECT_EQ(u64(unpadded.at("training").at("padded_vocab")), 129280u);
    const std::uint64_t fewer_rows = vocab / std::stoull(tp) - 129280 / std::stoull(tp);
    // Per micro-batch: two fp32 logits of 4096 tokens lose fewer_rows columns each.
    EXPECT_EQ(u64(fp32.at("stages")[15].at("activations_per_microbatch")) -
                  u64(unpadded.at("stages")[15].at("activations_per_microbatch")),
              2 * 4096 * fewer_rows * 4)
        << tp;
  }
}

// m < pp: --global-batch 128 over dp 32 gives m = 4; no stage holds more than 4.
TEST(PipelineCli, OneFOneBWithFewerMicroBatchesThanStages) {
  const json j = analyze_json(dsv3({"--global-batch", "128"}));
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(i64(j.at("training").at("microbatches_per_step")), 4);
  for (std::size_t p = 0; p < 16; ++p) {
    const auto& s = j.at("stages")[p];
    const std::uint64_t held = std::min<std::uint64_t>(16 - p, 4);
    EXPECT_EQ(u64(s.at("in_flight_microbatches")), held) << p;
    EXPECT_EQ(u64(s.at("bytes").at("activations")), held * u64(s.at("activations_per_microbatch")) + u64(s.at("loss_transient"))) << p;
  }
}

// Without a global batch the pipeline is assumed full: 1F1B stage p holds 16 - p.
TEST(PipelineCli, OneFOneBWithoutGlobalBatchFillsThePipeline) {
  const json j = analyze_json(dsv3());
  ASSERT_FALSE(j.is_null());
  EXPECT_TRUE(j.at("training").at("microbatches_per_step").is_null());
  for (std::size_t p = 0; p < 16; ++p) EXPECT_EQ(u64(j.at("stages")[p].at("in_flight_microbatches")), 16 - p) << p;
}

// GPipe: every stage holds all m; ZB-H1: exactly 1F1B's activations.
TEST(PipelineCli, GPipeHoldsAllMicroBatchesAndZbH1MatchesOneFOneB) {
  const json one = analyze_json(dsv3({"--global-batch", "1024"}));
  const json gpipe = analyze_json(dsv3({"--global-batch", "1024", "--schedule", "gpipe"}));
  const json zb = analyze_json(dsv3({"--global-batch", "1024", "--schedule", "zb-h1"}));
  const json gpipe4 = analyze_json(dsv3({"--global-batch", "128", "--schedule", "gpipe"}));
  ASSERT_FALSE(one.is_null() || gpipe.is_null() || zb.is_null() || gpipe4.is_null());
  EXPECT_EQ(gpipe.at("parallel").at("schedule"), "gpipe");
  EXPECT_EQ(zb.at("parallel").at("schedule"), "zb-h1");
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    const std::uint64_t per_mb = u64(one.at("stages")[p].at("activations_per_microbatch"));
    EXPECT_EQ(u64(gpipe.at("stages")[p].at("activations_per_microbatch")), per_mb);
    EXPECT_EQ(u64(gpipe.at("stages")[p].at("in_flight_microbatches")), 32u);
    EXPECT_EQ(u64(gpipe.at("stages")[p].at("bytes").at("activations")), 32 * per_mb + u64(gpipe.at("stages")[p].at("loss_transient")));
    EXPECT_EQ(u64(gpipe4.at("stages")[p].at("in_flight_microbatches")), 4u);
    EXPECT_EQ(u64(gpipe4.at("stages")[p].at("bytes").at("activations")), 4 * per_mb + u64(gpipe4.at("stages")[p].at("loss_transient")));
    EXPECT_EQ(zb.at("stages")[p].at("bytes"), one.at("stages")[p].at("bytes"));
    EXPECT_EQ(zb.at("stages")[p].at("in_flight_microbatches"), one.at("stages")[p].at("in_flight_microbatches"));
    // The schedule changes activations only.
    EXPECT_EQ(gpipe.at("stages")[p].at("params"), one.at("stages")[p].at("params"));
    EXPECT_EQ(gpipe.at("stages")[p].at("bytes").at("weights"), one.at("stages")[p].at("bytes").at("weights"));
  }
}

// Without --global-batch GPipe has no m to hold. A report (m taken as the pp micro-batches that
// fill the pipeline, as for the other schedules) or an error asking for --global-batch are both
// sound; an "absurdly large" activation size is not.
TEST(PipelineCli, GPipeWithoutGlobalBatch) {
  const Args args = concat(dsv3({"--schedule", "gpipe"}), {"--format", "json"});
  const CliResult r = run_cli(args);
  if (r.code == 2) {
    EXPECT_NE(r.err.find("--global-batch"), std::string::npos) << r.err;
    return;
  }
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  for (const auto& s : j.at("stages")) EXPECT_EQ(i64(s.at("in_flight_microbatches")), 16);
}

// ---------------------------------------------------------------------------------------------
// DualPipe and DualPipeV.

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
      EXPECT_EQ(u64(d.at("bytes").at("activations")), 17 * u64(o.at("activations_per_microbatch")));
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
              17 * u64(one.at("stages")[r].at("activations_per_microbatch")))
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
  const auto act = [](const json& j, std::size_t s) { return u64(j.at("stages")[s].at("bytes").at("activations")); };
  for (std::size_t r = 0; r < 16; ++r) EXPECT_EQ(act(dual, r), act(one, r) + act(one, 15 - r)) << "dualpipe rank " << r;
  for (std::size_t r = 0; r < 8; ++r) EXPECT_EQ(act(v, r), act(one, r) + act(one, 15 - r)) << "dualpipev rank " << r;
}

// ---------------------------------------------------------------------------------------------
// Interleaved: NVIDIA's recipe and Megatron's layout strings.

// Chunk micro-batches rank r holds per held chunk (Megatron-Core interleaved schedule, group
// size pp): warm-up (pp - r - 1) * 2 + (v - 1) * pp, capped at m * v (all of them when m == pp),
// plus the first steady-state forward; forward k runs the rank's chunk (k % (pp * v)) / pp.
std::vector<std::uint64_t> interleaved_held(std::int64_t r, std::int64_t pp, std::int64_t v, std::int64_t m) {
  const std::int64_t total = m * v;
  const std::int64_t warmup = m == pp ? total : std::min((pp - r - 1) * 2 + (v - 1) * pp, total);
  const std::int64_t held = std::min(warmup + 1, total);
  std::vector<std::uint64_t> out(static_cast<std::size_t>(v), 0);
  for (std::int64_t k = 0; k < held; ++k) ++out[static_cast<std::size_t>((k % (pp * v)) / pp)];
  return out;
}

TEST(PipelineCli, NvidiaRecipeLayoutStringIsAcceptedAndSplitsAsWritten) {
  // m = 2048 / 64 = 32.
  const json j = analyze_json(nvidia({"--global-batch", "2048"}));
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j.at("parallel").at("schedule"), "interleaved");
  EXPECT_EQ(i64(j.at("parallel").at("num_chunks")), 32);
  EXPECT_EQ(i64(j.at("parallel").at("vpp")), 4);
  EXPECT_EQ(i64(j.at("parallel").at("edp")), 2);
  EXPECT_EQ(i64(j.at("training").at("microbatches_per_step")), 32);
  const auto& stages = j.at("stages");
  ASSERT_EQ(stages.size(), 8u);
  std::int64_t layers = 0, mtp = 0, embedding = 0, loss = 0, chunks = 0;
  for (std::size_t r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto& s = stages[r];
    EXPECT_EQ(i64(s.at("model_chunks")), 4);
    ASSERT_EQ(s.at("chunks").size(), 4u);
    std::int64_t stage_layers = 0;
    std::uint64_t expected_activations = 0;
    const auto held = interleaved_held(static_cast<std::int64_t>(r), 8, 4, 32);
    for (std::size_t i = 0; i < 4; ++i) {
      const auto& c = s.at("chunks")[i];
      ++chunks;
      EXPECT_EQ(i64(c.at("chunk")), static_cast<std::int64_t>(r + 8 * i));
      layers += i64(c.at("num_layers"));
      stage_layers += i64(c.at("num_layers"));
      mtp += i64(c.at("mtp_depths"));
      embedding += c.at("embedding").get<bool>() ? 1 : 0;
      loss += c.at("loss").get<bool>() ? 1 : 0;
      expected_activations += held[i] * u64(c.at("activations_per_microbatch"));
    }
    EXPECT_EQ(i64(s.at("num_layers")), stage_layers);
    // min((8 - r - 1) * 2 + (4 - 1) * 8 + 1, m * 4) = 39 - 2r.
    EXPECT_EQ(i64(s.at("in_flight_microbatches")), 39 - 2 * static_cast<std::int64_t>(r));
    EXPECT_EQ(u64(s.at("bytes").at("activations")),
              expected_activations + std::max(u64(s.at("recompute_transient")), u64(s.at("loss_transient"))));
  }
  EXPECT_EQ(chunks, 32);
  EXPECT_EQ(layers, 61);
  EXPECT_EQ(mtp, 1);
  EXPECT_EQ(embedding, 1);
  EXPECT_EQ(loss, 1);
  // Chunk 0 (E + layer 0) on rank 0, chunk 31 (MTP + loss) on rank 7.
  EXPECT_TRUE(stages[0].at("chunks")[0].at("embedding").get<bool>());
  EXPECT_EQ(i64(stages[0].at("chunks")[0].at("num_layers")), 1);
  EXPECT_TRUE(stages[7].at("chunks")[3].at("loss").get<bool>());
  EXPECT_EQ(i64(stages[7].at("chunks")[3].at("mtp_depths")), 1);
  EXPECT_EQ(i64(stages[7].at("chunks")[3].at("num_layers")), 0);
  // By hand for the two ends: rank 0 holds {15, 8, 8, 8} of its chunks, rank 7 {8, 8, 8, 1}.
  EXPECT_EQ(interleaved_held(0, 8, 4, 32), (std::vector<std::uint64_t>{15, 8, 8, 8}));
  EXPECT_EQ(interleaved_held(7, 8, 4, 32), (std::vector<std::uint64_t>{8, 8, 8, 1}));
}

// m == pp (current Megatron-Core, no all-warm-up branch): ranks whose warm-up (pp - r - 1) * 2 +
// (v - 1) * pp reaches m * v = 32 run every forward first and hold all of them; the others hold
// warm-up + 1.
TEST(PipelineCli, InterleavedWithMEqualToPp) {
  const json j = analyze_json(nvidia({"--global-batch", "512"}));  // 512 / 64 = 8
  ASSERT_FALSE(j.is_null());
  for (const auto& s : j.at("stages")) {
    const std::int64_t r = i64(s.at("stage"));
    const std::int64_t warmup = (8 - r - 1) * 2 + 3 * 8;
    EXPECT_EQ(i64(s.at("in_flight_microbatches")), std::min<std::int64_t>(warmup + 1, 32)) << r;
    if (warmup >= 32) {
      std::uint64_t expected = 0;
      for (const auto& c : s.at("chunks")) expected += 8 * u64(c.at("activations_per_microbatch"));
      EXPECT_EQ(u64(s.at("bytes").at("activations")), expected) << r;
    }
  }
}

// Megatron's docstring layout, pp 16 x vpp 2: 32 stages, "t*3" is three layers, 61 t.
TEST(PipelineCli, MegatronDocstringLayoutOnSixteenRanks) {
  const json j = analyze_json({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--vpp", "2", "--ep", "64",
                               "--dp", "64", "--sp", "--pipeline-model-parallel-layout", "Et*3|(tt|)*29,m|L"});
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(i64(j.at("parallel").at("num_chunks")), 32);
  std::int64_t layers = 0;
  for (const auto& s : j.at("stages")) {
    for (const auto& c : s.at("chunks")) layers += i64(c.at("num_layers"));
  }
  EXPECT_EQ(layers, 61);
  EXPECT_EQ(i64(j.at("stages")[0].at("chunks")[0].at("num_layers")), 3);
  EXPECT_EQ(i64(j.at("stages")[14].at("chunks")[1].at("chunk")), 30);
  EXPECT_EQ(i64(j.at("stages")[14].at("chunks")[1].at("mtp_depths")), 1);
  EXPECT_TRUE(j.at("stages")[15].at("chunks")[1].at("loss").get<bool>());
  // Without --global-batch: enough micro-batches; rank r holds (16 - r - 1) * 2 + 16 + 1.
  for (std::size_t r = 0; r < 16; ++r) {
    EXPECT_EQ(i64(j.at("stages")[r].at("in_flight_microbatches")), (15 - static_cast<std::int64_t>(r)) * 2 + 17) << r;
  }
}

// Syntax errors point at the offending position (0-based).
TEST(PipelineCli, MalformedLayoutStringsPointAtThePosition) {
  struct Case {
    const char* text;
    const char* where;
  };
  for (const Case& c : {Case{"Et|(tt|*30mL", "position 12"},  // group never closed: at the end
                        Case{"Et|(tt|)*mL", "position 9"},    // '*' without a number
                        Case{"Ex|tL", "position 1"},          // not a layout item
                        Case{"Et|tt)|(tt|)*29mL", "position 5"}}) {
    expect_exit_2(nvidia_with(c.text),
                  {"--pipeline-model-parallel-layout", "position", c.where});
  }
}

// Strings that parse but do not fit the model or the layout: exit 2 naming the flag and rule.
TEST(PipelineCli, LayoutStringsThatDoNotFitAreRefused) {
  expect_exit_2(nvidia_with("Et|(tt|)*29ttmL"),
                {"--pipeline-model-parallel-layout", "32 stages"});  // 31 stages for pp 8 x vpp 4
  expect_exit_2(nvidia_with("E|(tt|)*30mL"),
                {"--pipeline-model-parallel-layout", "61 t"});  // 60 t
  expect_exit_2(nvidia_with("Et|(tt|)*30mLE"),
                {"--pipeline-model-parallel-layout", "one E"});  // two E
  // The right string for another pp: 32 stages are not pp 16 x vpp 1.
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--ep", "8", "--dp", "32", "--sp",
                 "--pipeline-model-parallel-layout", "Et|(tt|)*30mL"},
                {"--pipeline-model-parallel-layout", "16 stages"});
  // MTP placed with --mtp 0.
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--mtp", "0", "--tp", "2", "--pp", "8", "--vpp", "4", "--ep", "64",
                 "--dp", "64", "--sp", "--pipeline-model-parallel-layout", "Et|(tt|)*30mL"},
                {"--pipeline-model-parallel-layout", "MTP"});
  // Two ways of splitting at once.
  expect_exit_2(nvidia({"--decoder-first-pipeline-num-layers", "3"}), {"pipeline split"});
}

// ---------------------------------------------------------------------------------------------
// Megatron's other splits.

TEST(PipelineCli, FirstAndLastStageLayers) {
  // 61 - 3 - 2 = 56 = 14 x 4.
  const json j = analyze_json(dsv3({"--decoder-first-pipeline-num-layers", "3", "--decoder-last-pipeline-num-layers", "2"}));
  ASSERT_FALSE(j.is_null());
  std::int64_t first = 0;
  for (std::size_t p = 0; p < 16; ++p) {
    const auto& s = j.at("stages")[p];
    const std::int64_t n = p == 0 ? 3 : p == 15 ? 2 : 4;
    EXPECT_EQ(i64(s.at("num_layers")), n) << p;
    EXPECT_EQ(i64(s.at("first_layer")), first) << p;
    first += n;
  }
  EXPECT_EQ(first, 61);
  EXPECT_TRUE(j.at("stages")[0].at("has_embedding").get<bool>());
  EXPECT_TRUE(j.at("stages")[15].at("has_head").get<bool>());
  // 61 - 4 - 4 = 53 does not split over 14.
  expect_exit_2(dsv3({"--decoder-first-pipeline-num-layers", "4", "--decoder-last-pipeline-num-layers", "4"}),
                {"--decoder-first/last-pipeline-num-layers"});
  expect_exit_2(dsv3({"--decoder-first-pipeline-num-layers", "-2"}), {"--decoder-first-pipeline-num-layers", "-2"});
}

// A negative layer count is no layer count, -1 included (moemem uses -1 internally for "not
// given"): DeepSeek-V2-Lite's 27 layers over pp 3 would otherwise pass as an even split.
TEST(PipelineCli, NegativeFirstStageLayersAreRefused) {
  expect_exit_2({"analyze", "--model", "deepseek-v2-lite", "--pp", "3", "--decoder-first-pipeline-num-layers", "-1"},
                {"--decoder-first-pipeline-num-layers", "-1"});
  expect_exit_2({"analyze", "--model", "deepseek-v2-lite", "--pp", "3", "--decoder-last-pipeline-num-layers", "-1"},
                {"--decoder-last-pipeline-num-layers", "-1"});
}

TEST(PipelineCli, EmbeddingAndLossCountedInTheSplit) {
  // DeepSeek-V2-Lite: 27 layers + the embedding = 28 = 4 x 7.
  const json j = analyze_json({"analyze", "--model", "deepseek-v2-lite", "--pp", "4", "--account-for-embedding-in-pipeline-split"});
  ASSERT_FALSE(j.is_null());
  const std::int64_t expected[] = {6, 7, 7, 7};
  for (std::size_t p = 0; p < 4; ++p) EXPECT_EQ(i64(j.at("stages")[p].at("num_layers")), expected[p]) << p;
  // Both: 29 is not divisible by 4.
  expect_exit_2({"analyze", "--model", "deepseek-v2-lite", "--pp", "4", "--account-for-embedding-in-pipeline-split",
                 "--account-for-loss-in-pipeline-split"},
                {"--account-for-embedding/loss-in-pipeline-split"});
  // DeepSeek-V3, both: 63 = 9 x 7; the end stages hold 6.
  const json k = analyze_json({"analyze", "--model", "deepseek-v3", "--pp", "9", "--account-for-embedding-in-pipeline-split",
                               "--account-for-loss-in-pipeline-split"});
  ASSERT_FALSE(k.is_null());
  for (std::size_t p = 0; p < 9; ++p) {
    EXPECT_EQ(i64(k.at("stages")[p].at("num_layers")), p == 0 || p == 8 ? 6 : 7) << p;
  }
}

// ---------------------------------------------------------------------------------------------
// The paper profile keeps one micro-batch per stage whatever the schedule.

TEST(PipelineCli, PaperProfileIgnoresTheSchedule) {
  const Args base = {"analyze", "--profile", "paper", "--tp", "2", "--pp", "16", "--ep", "8", "--dp", "32", "--sp"};
  const json plain = analyze_json(base);
  ASSERT_FALSE(plain.is_null());
  for (const Args& extra : {Args{"--schedule", "gpipe", "--global-batch", "1024"}, Args{"--schedule", "zb-h1"},
                            Args{"--global-batch", "1024"}, Args{"--global-batch", "128"}}) {
    SCOPED_TRACE(joined(extra));
    const json j = analyze_json(concat(base, extra));
    ASSERT_FALSE(j.is_null());
    ASSERT_EQ(j.at("stages").size(), 16u);
    for (std::size_t p = 0; p < 16; ++p) {
      const auto& s = j.at("stages")[p];
      EXPECT_EQ(i64(s.at("in_flight_microbatches")), 1) << p;
      EXPECT_EQ(s.at("bytes"), plain.at("stages")[p].at("bytes")) << p;
      EXPECT_EQ(u64(s.at("bytes").at("activations")), u64(s.at("activations_per_microbatch"))) << p;
    }
  }
}

}  // namespace
