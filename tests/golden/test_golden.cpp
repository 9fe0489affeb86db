// Golden tests: every tests/golden/*.json file lists CLI invocations, a JSON pointer into their
// output, the expected value, a tolerance and the source of the number. The expected values
// come from the reference analysis or public facts, never from moemem's own output.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using nlohmann::json;

struct GoldenCase {
  std::string file, name, source, path, unit;
  std::vector<std::string> args;
  json expected;
  double tolerance = 0;
};

// Shown by GoogleTest in test names and failures instead of raw bytes.
void PrintTo(const GoldenCase& g, std::ostream* os) { *os << g.file << ":" << g.name; }

std::vector<GoldenCase> load_cases() {
  std::vector<GoldenCase> out;
  for (const auto& entry : std::filesystem::directory_iterator(MOEMEM_GOLDEN_DIR)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    const json doc = json::parse(in);
    for (const auto& c : doc.at("cases")) {
      GoldenCase g;
      g.file = entry.path().filename().string();
      g.name = c.at("name").get<std::string>();
      g.source = c.at("source").get<std::string>();
      g.path = c.at("path").get<std::string>();
      g.unit = c.value("unit", "");
      g.args = c.at("args").get<std::vector<std::string>>();
      g.expected = c.at("expected");
      g.tolerance = c.at("tolerance").get<double>();
      out.push_back(std::move(g));
    }
  }
  return out;
}

class Golden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(Golden, MatchesReference) {
  const auto& g = GetParam();
  SCOPED_TRACE(g.file + ": " + g.name + " (source: " + g.source + ")");
  const auto r = moemem::test::run_cli(g.args);
  ASSERT_EQ(r.code, 0) << r.err;
  const json out = json::parse(r.out);
  const json& actual = out.at(json::json_pointer(g.path));
  if (g.unit == "GiB") {
    const double gib = actual.get<double>() / 1073741824.0;
    EXPECT_NEAR(gib, g.expected.get<double>(), g.tolerance);
  } else if (g.tolerance == 0) {
    // Exact integers: compare as integers, never through floating point.
    ASSERT_TRUE(actual.is_number_integer()) << actual;
    EXPECT_EQ(actual.get<std::int64_t>(), g.expected.get<std::int64_t>());
  } else {
    EXPECT_NEAR(actual.get<double>(), g.expected.get<double>(), g.tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, Golden, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<GoldenCase>& p) {
                           std::string n = p.param.file.substr(0, p.param.file.find('.')) + "_" + p.param.name;
                           for (auto& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

// The golden files themselves must not be empty or silently skipped.
TEST(GoldenFiles, EveryFileHasCases) { EXPECT_GE(load_cases().size(), 30u); }

}  // namespace
