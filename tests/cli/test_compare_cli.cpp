// `moemem compare A.json B.json` (issue 17): B - A of every category on every stage, from two
// analyze reports written by the CLI; stages only one report has; bad files exit 2. The expected
// differences are computed here from the two reports themselves.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::run_cli;
using nlohmann::json;

// A scratch directory removed at the end of the test.
struct Scratch {
  std::filesystem::path dir;
  Scratch() : dir(std::filesystem::temp_directory_path() /
                  ("moemem-compare-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()))) {
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) const {
    const auto path = (dir / name).string();
    std::ofstream(path) << text;
    return path;
  }
};

std::string analyze_text(const Args& args) {
  const auto r = run_cli(concat(concat({"analyze"}, args), {"--format", "json"}));
  EXPECT_EQ(r.code, 0) << r.err;
  return r.out;
}

const Args kBase = {"--model", "mixtral-8x7b", "--tp", "2", "--pp", "4", "--dp", "4", "--ep", "2", "--sp"};

TEST(Compare, EveryCategoryOfEveryStageIsBMinusA) {
  Scratch s;
  const std::string a_text = analyze_text(kBase), b_text = analyze_text(concat(kBase, {"--recompute", "full"}));
  const auto a = s.write("a.json", a_text), b = s.write("b.json", b_text);
  const auto r = run_cli({"compare", a, b, "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json c = json::parse(r.out), ja = json::parse(a_text), jb = json::parse(b_text);
  EXPECT_EQ(c.at("schema"), "moemem.compare/1");
  ASSERT_EQ(c.at("stages").size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    for (const char* k : {"weights", "gradients", "optimizer", "activations", "buffers", "fragmentation", "runtime", "total"}) {
      const auto expected = jb["stages"][i]["bytes"][k].get<std::int64_t>() - ja["stages"][i]["bytes"][k].get<std::int64_t>();
      EXPECT_EQ(c["stages"][i]["diff"][k].get<std::int64_t>(), expected) << "stage " << i << " " << k;
    }
  }
  // Full recomputation keeps fewer activations and changes no weights.
  EXPECT_LT(c["stages"][0]["diff"]["activations"].get<std::int64_t>(), 0);
  EXPECT_EQ(c["stages"][0]["diff"]["weights"].get<std::int64_t>(), 0);
  EXPECT_EQ(c.at("peak_diff_bytes").get<std::int64_t>(),
            jb["peak"]["total_bytes"].get<std::int64_t>() - ja["peak"]["total_bytes"].get<std::int64_t>());

  const auto table = run_cli({"compare", a, b});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("B - A"), std::string::npos);
  EXPECT_NE(table.out.find("peak: A stage"), std::string::npos);
}

// Host memory (offloaded optimizer states) is compared too, beside the device total it is not in.
TEST(Compare, HostMemoryIsCompared) {
  Scratch s;
  const std::string a_text = analyze_text(kBase), b_text = analyze_text(concat(kBase, {"--optimizer-cpu-offload"}));
  const auto a = s.write("a.json", a_text), b = s.write("b.json", b_text);
  const auto r = run_cli({"compare", a, b, "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json c = json::parse(r.out), jb = json::parse(b_text);
  const auto host = jb["stages"][0]["bytes"]["host"].get<std::int64_t>();
  ASSERT_GT(host, 0);
  EXPECT_EQ(c["stages"][0]["diff"]["host"].get<std::int64_t>(), host);
  const auto csv = run_cli({"compare", a, b, "--format", "csv"});
  EXPECT_NE(csv.out.find("diff_host_bytes"), std::string::npos);
  EXPECT_NE(run_cli({"compare", a, b}).out.find("host (not in total)"), std::string::npos);
}

TEST(Compare, AReportAgainstItselfDiffersByNothing) {
  Scratch s;
  const auto a = s.write("a.json", analyze_text(kBase));
  const json c = json::parse(run_cli({"compare", a, a, "--format", "json"}).out);
  for (const auto& stage : c.at("stages")) {
    for (const auto& [k, v] : stage.at("diff").items()) EXPECT_EQ(v.get<std::int64_t>(), 0) << k;
  }
}

TEST(Compare, StagesOnlyOneReportHasAreListedWithoutADifference) {
  Scratch s;
  const auto a = s.write("a.json", analyze_text(kBase));
  const auto b = s.write("b.json", analyze_text({"--model", "mixtral-8x7b", "--tp", "2", "--pp", "2", "--dp", "8"}));
  const auto r = run_cli({"compare", a, b, "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json c = json::parse(r.out);
  ASSERT_EQ(c.at("stages").size(), 4u);
  EXPECT_TRUE(c["stages"][3]["b"].is_null());
  EXPECT_TRUE(c["stages"][3]["diff"].is_null());
  EXPECT_FALSE(c["stages"][1]["diff"].is_null());
  EXPECT_EQ(run_cli({"compare", a, b, "--format", "csv"}).code, 0);
}

// One report or none: exit 2 saying two are needed and what they are (CLI11 said "b is required").
TEST(Compare, MissingReportsAreNamed) {
  for (const Args& args : {Args{"compare"}, Args{"compare", "some.json"}}) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("two reports, A.json B.json"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("analyze --format json"), std::string::npos) << r.err;
  }
}

TEST(Compare, BadFilesExit2NamingThem) {
  Scratch s;
  const auto good = s.write("a.json", analyze_text(kBase));
  const auto not_json = s.write("bad.json", "{\"schema\": ");
  const auto count = s.write("count.json", run_cli({"count", "--format", "json"}).out);
  for (const auto& [bad, says] : {std::pair{not_json, std::string("not JSON")},
                                  std::pair{count, std::string("moemem.report/1")},
                                  std::pair{(s.dir / "missing.json").string(), std::string("readable file")}}) {
    const auto r = run_cli({"compare", good, bad});
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  }
  EXPECT_EQ(run_cli({"compare", good}).code, 2);
}

// A report whose numbers are not exact non-negative byte counts is corrupt: refused naming the
// field and the value, never wrapped into a difference (2^64 and 1e20 do not fit an int64).
TEST(Compare, CorruptReportsExit2NamingTheField) {
  Scratch s;
  const std::string text = analyze_text(kBase);
  const auto good = s.write("a.json", text);
  const auto corrupt = [&](const std::string& name, const std::function<void(json&)>& edit) {
    json j = json::parse(text);
    edit(j);
    return s.write(name, j.dump());
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {corrupt("neg.json", [](json& j) { j["stages"][1]["bytes"]["weights"] = -5; }), {"stages[1].bytes.weights = -5"}},
      {corrupt("huge.json", [](json& j) { j["stages"][0]["bytes"]["total"] = 1e20; }), {"stages[0].bytes.total = 1e+20"}},
      {corrupt("wrap.json", [](json& j) { j["stages"][0]["bytes"]["total"] = std::uint64_t{1} << 63; }),
       {"stages[0].bytes.total = 9223372036854775808", "up to 2^62"}},
      {corrupt("text.json", [](json& j) { j["stages"][2]["bytes"]["optimizer"] = "abc"; }), {"stages[2].bytes.optimizer = \"abc\""}},
      {corrupt("empty.json", [](json& j) { j["stages"] = json::array(); }), {"stages = []", "non-empty"}},
      {corrupt("nobytes.json", [](json& j) { j["stages"][0].erase("bytes"); }), {"stages[0].bytes missing"}},
      {corrupt("peak.json", [](json& j) { j["peak"]["total_bytes"] = -1; }), {"peak.total_bytes = -1"}},
      {corrupt("stage.json", [](json& j) { j["peak"]["stage"] = 9; }), {"peak.stage = 9", "0 to 3"}},
      {corrupt("name.json", [](json& j) { j["model"]["name"] = 7; }), {"model.name = 7"}},
  };
  for (const auto& [bad, words] : cases) {
    const auto r = run_cli({"compare", good, bad});
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
    for (const auto& w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
  }
}

TEST(SearchQuiet, IsAcceptedAndPrintsNoProgress) {
  const auto r = run_cli({"search", "--model", "mixtral-8x7b", "--gpus", "16", "--gpu", "h100-80g", "--global-batch", "64",
                          "--top", "2", "--quiet", "--format", "json"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("searching:"), std::string::npos);
}

}  // namespace
