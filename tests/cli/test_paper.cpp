// `moemem paper` prints the reference analysis's tables; the figures it shows must be the
// report's own (paper-method.md §3-§7), in every output format.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::run_cli;

TEST(PaperCommand, TextShowsTheReportsFigures) {
  const auto r = run_cli({"paper"});
  ASSERT_EQ(r.code, 0) << r.err;
  // §3 "85.74 GiB" per middle stage; §4 11.64 GiB; §5 table totals 81.50 / 40.45 / 19.92 / 9.66;
  // §6 MLA 21.59, MoE 1.39, total 22.98 GiB at b = 1.
  for (const char* figure : {"46,029,144,064", "85.74", "6,250,364,928", "12,500,729,856", "11.64", "81.50",
                             "40.45", "19.92", "9.66", "21.59", "1.39", "22.98", "5.52", "2.76", "1.38"}) {
    EXPECT_NE(r.out.find(figure), std::string::npos) << "missing " << figure;
  }
}

TEST(PaperCommand, JsonZeroTableIsExactBytes) {
  const auto r = run_cli({"paper", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const nlohmann::json* zero = nullptr;
  for (const auto& t : j.at("tables")) {
    if (t.at("title").get<std::string>().find("ZeRO") != std::string::npos) zero = &t;
  }
  ASSERT_NE(zero, nullptr);
  // §5: bytes per parameter 2/4/8 on 6,250,364,928 parameters, or on the 741,009,408 sharded.
  const auto& rows = zero->at("rows");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].at("total").get<std::uint64_t>(), 14ull * 6250364928ull);
  EXPECT_EQ(rows[1].at("optimizer").get<std::uint64_t>(), 8ull * 741009408ull);
  EXPECT_EQ(rows[2].at("gradients").get<std::uint64_t>(), 4ull * 741009408ull);
  EXPECT_EQ(rows[3].at("parameters").get<std::uint64_t>(), 2ull * 741009408ull);
}

TEST(PaperCommand, EveryFormatRuns) {
  for (const char* f : {"table", "json", "csv", "markdown"}) {
    const auto r = run_cli({"paper", "--format", f});
    EXPECT_EQ(r.code, 0) << f << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << f;
  }
  for (const char* f : {"table", "json", "csv", "markdown"}) {
    for (const char* cmd : {"analyze", "count"}) {
      const auto r = run_cli({cmd, "--format", f});
      EXPECT_EQ(r.code, 0) << cmd << " " << f << ": " << r.err;
    }
  }
}

TEST(PaperCommand, OtherModelsAndStagesRun) {
  EXPECT_EQ(run_cli({"paper", "--model", "deepseek-v2", "--tp", "4", "--ep", "16"}).code, 0);
  EXPECT_EQ(run_cli({"paper", "--model", "deepseek-v2-lite", "--tp", "2", "--pp", "3", "--stage", "0", "--ep", "8"}).code, 0);
  EXPECT_EQ(run_cli({"paper", "--stage", "15"}).code, 0);
}

}  // namespace

namespace {

// §3's stage table names what each rank holds. Under DualPipe rank i holds stages i and
// pp - 1 - i (its two directions; the DualPipe README), so rank 0 holds layers 0-3 with the
// embedding and layer 60 with the head (61 layers, ceil(61/16) = 4 a stage); under interleaving (PP 8, VPP 2: 16 chunks of 4) rank 1 holds chunks 1 and
// 9, layers 4-7 and 36-39. One first-last range would misstate both.
std::string stage_layers(const std::vector<std::string>& extra, std::int64_t stage) {
  std::vector<std::string> args = {"paper", "--format", "json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_cli(args);
  EXPECT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const auto& t : j.at("tables")) {
    if (t.at("title").get<std::string>().find("Pipeline stages") == std::string::npos) continue;
    return t.at("rows").at(static_cast<std::size_t>(stage)).at("layers").get<std::string>();
  }
  return "";
}

TEST(PaperCommand, StageTableListsEveryChunkARankHolds) {
  EXPECT_EQ(stage_layers({}, 15), "60 + norm + head");
  EXPECT_EQ(stage_layers({"--schedule", "dualpipe"}, 0), "embedding + 0-3, 60 + norm + head");
  EXPECT_EQ(stage_layers({"--pp", "8", "--vpp", "2", "--schedule", "interleaved"}, 1), "4-7, 36-39");
}

}  // namespace
