// The one-chunk schedules through `moemem analyze` (issue 3): DeepSeek-V3 with TP2 PP16 EP8 DP32
// under 1F1B, GPipe and ZB-H1 (the micro-batches each stage holds, with and without a global
// batch), each stage's fit verdict and margin against the GPU (--gpu, --gpu-memory), and the
// paper profile, which ignores the schedule.
// Expected values are restated from the rules (the issue, Megatron-LM, the DualPipe README),
// and relations between runs, never copied from moemem's output.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/pipeline_cli_helpers.hpp"

namespace {

using moemem::test::CliResult;
using moemem::test::run_cli;
using nlohmann::json;
using moemem::test::pipeline_cli::Args;
using moemem::test::pipeline_cli::joined;
using moemem::test::pipeline_cli::concat;
using moemem::test::pipeline_cli::dsv3;
using moemem::test::pipeline_cli::analyze_json;
using moemem::test::pipeline_cli::u64;
using moemem::test::pipeline_cli::stage_transient;
using moemem::test::pipeline_cli::i64;
using moemem::test::pipeline_cli::expect_exit_2;

// ---------------------------------------------------------------------------------------------
// 1F1B on DeepSeek-V3: stage p holds min(16 - p, m) micro-batches.

// --global-batch 1024 with micro-batch 1 and dp 32: m = 32 >= pp. With the distributed optimizer
// the middle stages do not fit an 80 GB H800 (stage 1: 6.1e9 parameters x 6 bytes of weights
// and gradients ~ 37 GB, plus 15 micro-batches x 4 layers of > 900 MB of routed-expert and
// attention activations each ~ 54 GB) while the last one does (about 4e9 parameters and one
// micro-batch): the report must say which.
TEST(PipelineCli, OneFOneBDeepSeekV3StagePHoldsSixteenMinusP) {
  const Args args = dsv3({"--global-batch", "1024", "--distributed-optimizer", "--gpu", "h800-80g", "--no-margin"});
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
    EXPECT_EQ(u64(s.at("bytes").at("activations")), (16 - p) * per_mb + stage_transient(s));
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
  const json j = analyze_json(dsv3({"--global-batch", "1024", "--gpu-memory", "80GiB", "--no-margin"}));
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

// m < pp: --global-batch 128 over dp 32 gives m = 4; no stage holds more than 4.
TEST(PipelineCli, OneFOneBWithFewerMicroBatchesThanStages) {
  const json j = analyze_json(dsv3({"--global-batch", "128"}));
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(i64(j.at("training").at("microbatches_per_step")), 4);
  for (std::size_t p = 0; p < 16; ++p) {
    const auto& s = j.at("stages")[p];
    const std::uint64_t held = std::min<std::uint64_t>(16 - p, 4);
    EXPECT_EQ(u64(s.at("in_flight_microbatches")), held) << p;
    EXPECT_EQ(u64(s.at("bytes").at("activations")), held * u64(s.at("activations_per_microbatch")) + stage_transient(s)) << p;
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
    EXPECT_EQ(u64(gpipe.at("stages")[p].at("bytes").at("activations")), 32 * per_mb + stage_transient(gpipe.at("stages")[p]));
    EXPECT_EQ(u64(gpipe4.at("stages")[p].at("in_flight_microbatches")), 4u);
    EXPECT_EQ(u64(gpipe4.at("stages")[p].at("bytes").at("activations")), 4 * per_mb + stage_transient(gpipe4.at("stages")[p]));
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
