// moemem validate (issue 7, first part): every record of the public set gets a prediction or a
// stated reason; the JSON has the documented fields; thresholds decide the exit status.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::run_cli;
using nlohmann::json;

TEST(Validate, EveryRecordHasAPredictionOrAReason) {
  for (const char* level : {"high", "medium", "low"}) {
    const auto r = run_cli({"validate", "--min-confidence", level, "--format", "json", "--max-median-error", "1000",
                            "--max-error", "1000"});
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = json::parse(r.out);
    ASSERT_FALSE(j.at("records").empty());
    for (const auto& rec : j.at("records")) {
      for (const char* key : {"id", "predicted_bytes", "measured_bytes", "metric", "error_pct", "reason"}) {
        ASSERT_TRUE(rec.contains(key)) << key;
      }
      const bool predicted = !rec.at("predicted_bytes").is_null();
      EXPECT_EQ(predicted, !rec.at("error_pct").is_null()) << rec.at("id");
      if (!predicted) {
        EXPECT_FALSE(rec.at("reason").is_null()) << rec.at("id");
      }
    }
  }
}

TEST(Validate, SignedErrorIsPredictedOverMeasured) {
  const auto r = run_cli({"validate", "--format", "json", "--max-median-error", "1000", "--max-error", "1000"});
  ASSERT_EQ(r.code, 0);
  const json doc = json::parse(r.out);
  for (const auto& rec : doc.at("records")) {
    if (rec.at("error_pct").is_null()) continue;
    const double p = rec.at("predicted_bytes").get<double>(), m = rec.at("measured_bytes").get<double>();
    EXPECT_NEAR(rec.at("error_pct").get<double>(), 100.0 * (p - m) / m, 1e-9);
  }
}

TEST(Validate, EveryPredictionSaysWhichModelItUsed) {
  const auto r = run_cli({"validate", "--min-confidence", "low", "--format", "json", "--max-median-error", "1000",
                          "--max-error", "1000"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  int presets = 0;
  for (const auto& rec : doc.at("records")) {
    if (rec.at("predicted_bytes").is_null()) continue;
    const std::string reason = rec.at("reason").get<std::string>();
    const bool preset = reason.rfind("preset ", 0) == 0;
    presets += preset ? 1 : 0;
    EXPECT_TRUE(preset || reason.find("model_arch") != std::string::npos) << rec.at("id") << ": " << reason;
  }
  EXPECT_GT(presets, 0);  // the torchtitan Llama 3.1 records name presets
}

TEST(Validate, ThresholdsDecideTheExitStatus) {
  // No threshold can be met with zero tolerance (the predictions are not exact).
  EXPECT_EQ(run_cli({"validate", "--max-median-error", "0", "--max-error", "0"}).code, 4);
  EXPECT_EQ(run_cli({"validate", "--max-median-error", "1000", "--max-error", "1000"}).code, 0);
}

TEST(Validate, CustomSetAndBadInput) {
  const std::string path = ::testing::TempDir() + "one.jsonl";
  {
    std::ofstream f(path);
    f << R"({"id": "x", "framework": "torchtitan", "confidence": "high", "metric_kind": "max reserved", "measured_gib_normalized": 10.0, "model_arch": {}})"
      << "\n";
  }
  const auto r = run_cli({"validate", "--set", path, "--format", "json"});
  EXPECT_EQ(r.code, 4);  // nothing predictable: fails rather than passing vacuously
  const auto j = json::parse(r.out);
  ASSERT_EQ(j.at("records").size(), 1u);
  EXPECT_NE(j.at("records")[0].at("reason").get<std::string>().find("model architecture"), std::string::npos);

  const std::string bad = ::testing::TempDir() + "bad.jsonl";
  {
    std::ofstream f(bad);
    f << "{\"id\": \"x\",\n";
  }
  const auto b = run_cli({"validate", "--set", bad});
  EXPECT_EQ(b.code, 2);
  EXPECT_NE(b.err.find("line 1"), std::string::npos) << b.err;
  EXPECT_EQ(run_cli({"validate", "--set", "/no/such.jsonl"}).code, 2);
  EXPECT_EQ(run_cli({"validate", "--min-confidence", "certain"}).code, 2);
  EXPECT_EQ(run_cli({"validate", "--max-error", "-1"}).code, 2);
}

// A negative measurement printed 18446744068340842496 bytes and zero gave null errors: both are
// named errors now; null (nothing published) stays a record without a prediction.
TEST(Validate, MeasurementMustBeAPositiveSize) {
  const std::string path = ::testing::TempDir() + "measured.jsonl";
  for (const std::string value : {"-5", "0", "\"80\"", "1e7"}) {  // (1e400: see NumberOverflowIsNamed)
    {
      std::ofstream f(path);
      f << R"({"id": "x", "framework": "torchtitan", "confidence": "high", "metric_kind": "max reserved", "measured_gib_normalized": )"
        << value << R"(, "model_arch": {}})" << "\n";
    }
    const auto r = run_cli({"validate", "--set", path});
    EXPECT_EQ(r.code, 2) << value;
    const std::string shown = json::parse(value).dump();
    EXPECT_NE(r.err.find("line 1: measured_gib_normalized: '" + shown + "' is not accepted; expected a positive size"),
              std::string::npos)
        << r.err;
  }
}

// nlohmann reports 1e400 as out_of_range, not parse_error: that escaped as exit 3.
TEST(Validate, NumberOverflowIsNamed) {
  const std::string path = ::testing::TempDir() + "overflow.jsonl";
  {
    std::ofstream f(path);
    f << R"({"id": "x", "metric_kind": "max reserved", "measured_gib_normalized": 1e400})" << "\n";
  }
  const auto r = run_cli({"validate", "--set", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("line 1: 'a number beyond a 64-bit float' is not accepted"), std::string::npos) << r.err;
  const std::string config = ::testing::TempDir() + "overflow.config.json";
  {
    std::ofstream f(config);
    f << R"({"model_type": "llama", "hidden_size": 1e400})";
  }
  const auto c = run_cli({"count", "--model", config});
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("'a number beyond a 64-bit float' is not accepted"), std::string::npos) << c.err;
}

}  // namespace
