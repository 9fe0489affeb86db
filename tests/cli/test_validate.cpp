// moemem validate (issue 7, first part): every record of the public set gets a prediction or a
// stated reason; the JSON has the documented fields; thresholds decide the exit status.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <algorithm>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"
#include "moemem/validate.hpp"

namespace {

using moemem::test::run_cli;
using nlohmann::json;

// Thresholds no set can fail: the tests below look at the records, not the pass/fail line.
const std::vector<std::string> kLoose = {"--max-median-error", "1000", "--max-error", "1000",
                                         "--max-device-median-error", "1000", "--min-mean-error", "-1000"};

moemem::test::CliResult validate(std::vector<std::string> args) {
  args.insert(args.begin(), "validate");
  args.insert(args.end(), kLoose.begin(), kLoose.end());
  return moemem::test::run_cli(args);
}

TEST(Validate, EveryRecordHasAPredictionOrAReason) {
  for (const char* level : {"high", "medium", "low"}) {
    const auto r = validate({"--min-confidence", level, "--format", "json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = json::parse(r.out);
    ASSERT_FALSE(j.at("records").empty());
    for (const auto& rec : j.at("records")) {
      for (const char* key : {"id", "predicted_bytes", "measured_bytes", "metric", "error_pct", "reason"}) {
        ASSERT_TRUE(rec.contains(key)) << key;
      }
      const bool predicted = !rec.at("predicted_bytes").is_null();
      // A run that ran out of memory has no error, only whether the prediction exceeds the GPU.
      const bool oom = rec.at("metric") == "out-of-memory";
      EXPECT_EQ(predicted && !oom, !rec.at("error_pct").is_null()) << rec.at("id");
      EXPECT_EQ(predicted && oom, !rec.at("oom_consistent").is_null()) << rec.at("id");
      if (!predicted) {
        EXPECT_FALSE(rec.at("reason").is_null()) << rec.at("id");
      }
    }
  }
}

// Issue 12: every record of the public set carries a moemem object; each one that names a model
// and arguments gets a prediction through analyze's path (none fails as "not representable").
TEST(Validate, EveryPublicRecordHasAMoememObjectAndEachRepresentableOneIsPredicted) {
  std::map<std::string, bool> representable;  // id -> has model and args
  const std::string_view set = moemem::public_measurement_set();
  std::size_t start = 0;
  while (start < set.size()) {
    const std::size_t end = std::min(set.find('\n', start), set.size());
    const std::string_view line = set.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    const json rec = json::parse(line);
    ASSERT_TRUE(rec.contains("moemem")) << rec.at("id");
    representable[rec.at("id").get<std::string>()] = !rec.at("moemem").contains("not_representable");
  }
  // Counted by hand: the shared set's 43 dense and 14 MoE/MLA records, 7 fine-tuning runs (ms-swift),
  // 4 from PEFT's docs (one hf ZeRO-3 LoRA run, three not representable: FSDP1, QLoRA + ZeRO-3) and
  // 1 from PEFT's MetaMathQA benchmark (single-GPU LoRA).
  EXPECT_EQ(representable.size(), 69u);
  const auto r = validate({"--min-confidence", "low", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> seen;
  const json doc = json::parse(r.out);
  for (const auto& rec : doc.at("records")) {
    const std::string id = rec.at("id").get<std::string>();
    const std::string base = id.substr(0, id.find('#'));
    ASSERT_TRUE(representable.contains(base)) << id;
    seen.insert(base);
    EXPECT_EQ(representable[base], !rec.at("predicted_bytes").is_null()) << id << ": " << rec.at("reason");
  }
  EXPECT_EQ(seen.size(), representable.size());
}

// A record's companion measurements (the DeepSeek-V3 14-layer runs publish peak reserved and
// device memory too) are results of their own, "<id>#<metric>", from the same prediction.
TEST(Validate, CompanionMeasurementsAreRowsOfTheirOwn) {
  const auto r = validate({"--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, json> by_id;
  const json doc = json::parse(r.out);
  for (const auto& rec : doc.at("records")) by_id[rec.at("id").get<std::string>()] = rec;
  const std::string id = "MG-DSV3-14L-64H100-B-overlap-recompute";
  ASSERT_TRUE(by_id.contains(id + "#reserved") && by_id.contains(id + "#device-used"));
  EXPECT_EQ(by_id[id].at("metric"), "allocated");
  EXPECT_EQ(by_id[id + "#reserved"].at("measured_bytes").get<std::uint64_t>(), 68392ull << 20);  // 68,392 MB (MiB)
  EXPECT_EQ(by_id[id + "#device-used"].at("measured_bytes").get<std::uint64_t>(), 74803ull << 20);
  EXPECT_EQ(by_id[id].at("measured_bytes").get<std::uint64_t>(), 60378ull << 20);
  // allocated <= reserved <= device on one prediction
  EXPECT_LE(by_id[id].at("predicted_bytes").get<std::uint64_t>(), by_id[id + "#reserved"].at("predicted_bytes").get<std::uint64_t>());
  EXPECT_LE(by_id[id + "#reserved"].at("predicted_bytes").get<std::uint64_t>(),
            by_id[id + "#device-used"].at("predicted_bytes").get<std::uint64_t>());
}

TEST(Validate, SignedErrorIsPredictedOverMeasured) {
  const auto r = validate({"--format", "json"});
  ASSERT_EQ(r.code, 0);
  const json doc = json::parse(r.out);
  for (const auto& rec : doc.at("records")) {
    if (rec.at("error_pct").is_null()) continue;
    const double p = rec.at("predicted_bytes").get<double>(), m = rec.at("measured_bytes").get<double>();
    EXPECT_NEAR(rec.at("error_pct").get<double>(), 100.0 * (p - m) / m, 1e-9);
  }
}

// The summary has every family, every metric and all, each with median, max and mean signed error.
TEST(Validate, SummaryPerFamilyAndPerMetric) {
  const auto r = validate({"--format", "json"});
  ASSERT_EQ(r.code, 0);
  const json doc = json::parse(r.out);
  std::map<std::string, json> groups;
  for (const auto& g : doc.at("summary").at("groups")) groups[g.at("group").get<std::string>()] = g;
  for (const char* g : {"torchtitan", "Megatron-LM", "FlagPerf (Megatron)", "metric allocated", "metric reserved",
                        "metric device-used", "metric allocated+reserved", "all"}) {
    ASSERT_TRUE(groups.contains(g)) << g;
    for (const char* key : {"median_abs_error_pct", "max_abs_error_pct", "mean_signed_error_pct"}) {
      EXPECT_TRUE(groups[g].contains(key)) << g << " " << key;
    }
  }
  // mean signed error of "all" is the mean of the records' signed errors
  double sum = 0;
  int n = 0;
  for (const auto& rec : doc.at("records")) {
    if (rec.at("error_pct").is_null()) continue;
    sum += rec.at("error_pct").get<double>();
    ++n;
  }
  EXPECT_NEAR(groups["all"].at("mean_signed_error_pct").get<double>(), sum / n, 1e-9);
  EXPECT_EQ(groups["all"].at("predicted").get<int>(), n);
}

TEST(Validate, EveryPredictionSaysWhichModelItUsed) {
  const auto r = validate({"--min-confidence", "low", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  for (const auto& rec : doc.at("records")) {
    if (rec.at("predicted_bytes").is_null()) continue;
    EXPECT_EQ(rec.at("reason").get<std::string>().rfind("model ", 0), 0u) << rec.at("id");
  }
}

TEST(Validate, ThresholdsDecideTheExitStatus) {
  using moemem::test::run_cli;
  // No threshold can be met with zero tolerance (the predictions are not exact).
  EXPECT_EQ(run_cli({"validate", "--max-median-error", "0", "--max-error", "0"}).code, 4);
  EXPECT_EQ(validate({}).code, 0);
  // The mean signed error alone can fail a run: predictions may not lean low.
  std::vector<std::string> lean = kLoose;
  lean.back() = "1000";  // --min-mean-error 1000
  lean.insert(lean.begin(), "validate");
  EXPECT_EQ(run_cli(lean).code, 4);
}

// A set beside its model files: moemem.model names a file relative to the set.
TEST(Validate, CustomSetWithItsOwnModelFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "validate_set";
  fs::create_directories(dir / "models");
  {
    std::ofstream f(dir / "models" / "tiny.args");
    f << "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --vocab-size 32000 --swiglu\n";
  }
  {
    std::ofstream f(dir / "set.jsonl");
    f << R"({"id": "tiny", "framework": "Megatron-LM", "confidence": "high", "metric_kind": "max allocated", )"
      << R"("measured_value": 4.0, "measured_gib_normalized": 4.0, "moemem": {"model": "models/tiny.args", )"
      << R"("args": ["--pp", "2", "--dp", "2"], "metric": "allocated", "stage": "last", "unit": "GiB"}})" << "\n";
  }
  const auto r = validate({"--set", (dir / "set.jsonl").string(), "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json rec = json::parse(r.out).at("records")[0];
  EXPECT_FALSE(rec.at("predicted_bytes").is_null()) << rec.at("reason");
  EXPECT_EQ(rec.at("measured_bytes").get<std::uint64_t>(), 4ull << 30);
}

// FlagPerf's PP1 DP8 Llama3-8B run ran out of memory on an 80 GB A800: moemem must predict more
// than the GPU holds; a run predicted to fit fails validate.
TEST(Validate, OutOfMemoryRunsMustBePredictedNotToFit) {
  const auto r = validate({"--min-confidence", "high", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  bool seen = false;
  for (const auto& rec : doc.at("records")) {
    if (rec.at("id") != "FP-L3-8B-A800-PP1DP8TP1-bf16") continue;
    seen = true;
    EXPECT_EQ(rec.at("metric"), "out-of-memory");
    EXPECT_EQ(rec.at("measured_bytes").get<std::uint64_t>(), static_cast<std::uint64_t>(79.3 * 1073741824.0 + 0.5));
    EXPECT_GT(rec.at("predicted_bytes").get<std::uint64_t>(), rec.at("measured_bytes").get<std::uint64_t>());
    EXPECT_TRUE(rec.at("oom_consistent").get<bool>());
  }
  EXPECT_TRUE(seen);
  const std::string path = ::testing::TempDir() + "oom.jsonl";
  {
    std::ofstream f(path);  // Llama 3.1 8B on 8 GPUs with FSDP is far below 1,000 GiB
    f << R"({"id": "fits", "framework": "torchtitan", "confidence": "high", "metric_kind": "OOM", "measured_value": "OOM", )"
      << R"("measured_gib_normalized": null, "gpu_capacity_gib": 1000, "moemem": {"model": "llama-3.1-8b", "args": )"
      << R"(["--profile", "torchtitan", "--dp", "8", "--seq-len", "8192"], "stage": "peak", "expect": "out-of-memory"}})" << "\n";
  }
  const auto miss = validate({"--set", path});
  EXPECT_EQ(miss.code, 4) << miss.out;
  EXPECT_NE(miss.out.find("OOM MISSED"), std::string::npos) << miss.out;
  EXPECT_NE(miss.out.find("predicted to fit anyway: 1"), std::string::npos) << miss.out;
}

// A malformed moemem object is an error naming the record and the field, not a silent skip.
TEST(Validate, MalformedMoememObjectIsNamed) {
  const std::string path = ::testing::TempDir() + "moemem_object.jsonl";
  const auto run = [&](const std::string& moemem) {
    {
      std::ofstream f(path);
      f << R"({"id": "r1", "framework": "Megatron-LM", "confidence": "high", "metric_kind": "max allocated", )"
        << R"("measured_value": 40, "measured_gib_normalized": 40.0, "moemem": )" << moemem << "}\n";
    }
    return validate({"--set", path});
  };
  const std::string ok = R"("model": "llama-3.1-8b", "args": ["--dp", "8"], "stage": "peak")";
  auto r = run("{" + ok + R"(, "metric": "peak", "unit": "GiB"})");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("r1: moemem.metric: 'peak' is not accepted; expected allocated, reserved or device-used"), std::string::npos) << r.err;
  r = run("{" + ok + R"(, "metric": "allocated", "unit": "TB"})");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("r1: moemem.unit: 'TB'"), std::string::npos) << r.err;
  // 40 MiB is not the 40 GiB the record states
  r = run("{" + ok + R"(, "metric": "allocated", "unit": "MiB"})");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("r1: moemem.unit: 'MiB'"), std::string::npos) << r.err;
  r = run(R"({"model": "llama-3.1-8b", "args": ["--tp", "x"], "metric": "allocated", "unit": "GiB"})");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("r1: --tp: 'x' is not accepted"), std::string::npos) << r.err;
  r = run(R"({"model": "models/none.args", "args": [], "metric": "allocated", "unit": "GiB"})");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("r1: moemem.model"), std::string::npos) << r.err;
}

TEST(Validate, CustomSetAndBadInput) {
  using moemem::test::run_cli;
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
  EXPECT_NE(j.at("records")[0].at("reason").get<std::string>().find("no moemem object"), std::string::npos);

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

namespace {

using moemem::test::run_cli;

// Issue 12: analyze states the band measured runs of its profile fell in (from validate's public
// set) and its fit verdict uses the band's upper end unless --no-margin.
TEST(Uncertainty, AnalyzeStatesTheBandAndTheVerdictUsesItsUpperEnd) {
  // The band from validate itself: measured / predicted - 1 over the megatron device-used rows.
  const auto v = run_cli({"validate", "--format", "json", "--max-median-error", "1000", "--max-error", "1000",
                          "--max-device-median-error", "1000", "--min-mean-error", "-1000"});
  ASSERT_EQ(v.code, 0) << v.err;
  const json vj = json::parse(v.out);
  double lo = 1e9, hi = -1e9;
  int n = 0;
  for (const auto& rec : vj.at("records")) {
    if (rec.at("metric") != "device-used" || rec.at("error_pct").is_null() || rec.at("family") == "torchtitan") continue;
    const double off = 100.0 * (rec.at("measured_bytes").get<double>() / rec.at("predicted_bytes").get<double>() - 1.0);
    lo = std::min(lo, off);
    hi = std::max(hi, off);
    ++n;
  }
  ASSERT_GT(n, 0);
  const std::vector<std::string> args = {"analyze", "--model", "llama-3.1-8b", "--tp", "2", "--dp", "4", "--gpu-memory",
                                         "80GiB", "--format", "json"};
  const auto a = run_cli(args);
  ASSERT_EQ(a.code, 0) << a.err;
  const json aj = json::parse(a.out);
  const json& u = aj.at("uncertainty");
  EXPECT_EQ(u.at("metric"), "device-used");
  EXPECT_EQ(u.at("records").get<int>(), n);
  EXPECT_NEAR(u.at("low_pct").get<double>(), lo, 0.01);  // ratios of rounded byte counts
  EXPECT_NEAR(u.at("high_pct").get<double>(), hi, 0.01);
  EXPECT_TRUE(u.at("margin_applied").get<bool>());
  const double capacity = 80.0 * 1073741824.0;
  EXPECT_NEAR(aj.at("gpu").at("usable_bytes").get<double>(), capacity / (1.0 + hi / 100.0), 1.0);
  // A stage fits when its total times (1 + upper end) fits the GPU: 80 GiB / 1.25 ~ 64 GiB.
  std::vector<std::string> tight = args;
  for (auto& x : tight) {
    if (x == "80GiB") x = fmt::format("{}B", static_cast<std::uint64_t>(aj.at("stages")[0].at("bytes").at("total").get<double>() * 1.01));
  }
  const json close = json::parse(run_cli(tight).out);
  EXPECT_FALSE(close.at("stages")[0].at("fits").get<bool>());  // 1% headroom < the band's upper end
  tight.push_back("--no-margin");
  const json bare = json::parse(run_cli(tight).out);
  EXPECT_TRUE(bare.at("stages")[0].at("fits").get<bool>());
  EXPECT_FALSE(bare.at("uncertainty").at("margin_applied").get<bool>());
  // The table says it in words; the paper profile has no measurements to compare with.
  EXPECT_NE(run_cli({"analyze", "--model", "llama-3.1-8b", "--tp", "2", "--dp", "4"}).out.find("uncertainty: on "),
            std::string::npos);
  EXPECT_NE(run_cli({"analyze", "--profile", "paper"}).out.find("uncertainty: no published paper measurements"),
            std::string::npos);
}

// The hf profile's band comes from the training steps measured on a GPU (the device set, compiled
// in), computed the same way from validate --set's records; the megatron profile's has none of them.
TEST(Uncertainty, HfBandFromTheRunsMeasuredOnAGpu) {
  const std::string set = std::string(MOEMEM_TEST_DATA_DIR) + "/validation/measured-device.jsonl";
  const auto v = run_cli({"validate", "--set", set, "--min-confidence", "high", "--format", "json", "--max-median-error", "1000",
                          "--max-error", "1000", "--max-device-median-error", "1000", "--min-mean-error", "-1000"});
  ASSERT_EQ(v.code, 0) << v.err;
  double lo = 1e9, hi = -1e9;
  int n = 0;
  const json vj = json::parse(v.out);
  for (const auto& rec : vj.at("records")) {
    if (rec.at("metric") != "device-used" || rec.at("error_pct").is_null()) continue;
    const double off = 100.0 * (rec.at("measured_bytes").get<double>() / rec.at("predicted_bytes").get<double>() - 1.0);
    lo = std::min(lo, off);
    hi = std::max(hi, off);
    ++n;
  }
  ASSERT_GT(n, 0);
  const auto a = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--ddp", "--gpu", "h200-141g", "--format", "json"});
  ASSERT_EQ(a.code, 0) << a.err;
  const json u = json::parse(a.out).at("uncertainty");
  EXPECT_EQ(u.at("metric"), "device-used");
  EXPECT_EQ(u.at("records").get<int>(), n);
  EXPECT_EQ(u.at("own_records").get<int>(), n);
  EXPECT_NEAR(u.at("low_pct").get<double>(), lo, 0.01);
  EXPECT_NEAR(u.at("high_pct").get<double>(), hi, 0.01);
  const auto text = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--ddp"});
  EXPECT_NE(text.out.find(fmt::format("on {} hf runs ({} measured on a GPU by moemem's developers)", n, n)), std::string::npos)
      << text.out;
  const auto m = run_cli({"analyze", "--model", "llama-3.1-8b", "--tp", "2", "--dp", "4", "--format", "json"});
  EXPECT_EQ(json::parse(m.out).at("uncertainty").at("own_records").get<int>(), 0);
}

}  // namespace
