// REGRESSION FIXTURE (issue 11, the one-scenario refactor): every case of
// tests/data/regression/cases.jsonl (generated with a fixed seed by make_cases.py: models x layouts
// x schedules x recomputation x precision x profiles through analyze, explain, paper, count and
// search) must print exactly what the pre-refactor binary printed (expected.jsonl, recorded by
// snapshot.py at main 53e8806). Only search's timings and progress output are normalised, the same
// way as there (leading newlines too: no recorded output starts with one).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

std::string normalise(const std::string& text) {
  static const std::string key = "\"seconds\": ", compact = "\"seconds\":",
                           mark = " valid layouts evaluated on every stage in ", progress = "\rsearching:";
  const auto skip = [&](std::size_t i, const char* chars) {
    while (i < text.size() && std::string_view(chars).find(text[i]) != std::string_view::npos) ++i;
    return i;
  };
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, key.size(), key) == 0) {
      out += key + "T";
      i = skip(i + key.size(), "0123456789.e+-");
    } else if (text.compare(i, compact.size(), compact) == 0) {
      out += compact + "T";
      i = skip(i + compact.size(), "0123456789.e+-");
    } else if (text.compare(i, mark.size(), mark) == 0) {
      out += mark + "T";
      i = skip(i + mark.size(), "0123456789.");
    } else if (text.compare(i, progress.size(), progress) == 0) {
      while (i < text.size() && text[i] != '\n') ++i;
      ++i;
    } else {
      out += text[i++];
    }
  }
  // A search that took over a second ends its progress output with a newline, also when no
  // progress line was printed (it finished between two progress ticks).
  const auto first = out.find_first_not_of('\n');
  return first == std::string::npos ? std::string() : out.substr(first);
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

// Runs every case whose command is `command` and compares code, stdout and stderr.
void check_command(const std::string& command) {
  const std::string dir = MOEMEM_TEST_DATA_DIR;
  const auto cases = read_jsonl(dir + "/regression/cases.jsonl");
  std::map<std::string, nlohmann::json> expected;
  for (auto& e : read_jsonl(dir + "/regression/expected.jsonl")) expected[e.at("id").get<std::string>()] = e;
  ASSERT_EQ(cases.size(), expected.size());
  // Cases name config files relative to the repository root, and reports print that name.
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(std::filesystem::path(dir).parent_path().parent_path());
  int ran = 0;
  for (const auto& c : cases) {
    auto args = c.at("args").get<std::vector<std::string>>();
    if (args.front() != command) continue;
    const auto id = c.at("id").get<std::string>();
    const auto& want = expected.at(id);
    const auto got = moemem::test::run_cli(args);
    EXPECT_EQ(got.code, want.at("code").get<int>()) << id;
    EXPECT_EQ(normalise(got.out), want.at("out").get<std::string>()) << id << ": " << c.at("args").dump();
    EXPECT_EQ(normalise(got.err), want.at("err").get<std::string>()) << id << ": " << c.at("args").dump();
    ++ran;
  }
  std::filesystem::current_path(cwd);
  EXPECT_GT(ran, 0);
}

}  // namespace

TEST(Regression, AnalyzeOutputsUnchanged) { check_command("analyze"); }
TEST(Regression, ExplainOutputsUnchanged) { check_command("explain"); }
TEST(Regression, CountOutputsUnchanged) { check_command("count"); }
TEST(Regression, PaperOutputsUnchanged) { check_command("paper"); }
TEST(Regression, SearchOutputsUnchanged) { check_command("search"); }
