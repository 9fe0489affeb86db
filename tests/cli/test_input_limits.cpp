// Issue 13, "Every input": records, configs and file names a fuzzing campaign found to crash
// (exit 3, a stack overflow) or to mislead. Each is a named error (exit 2) or, for file names that
// are not UTF-8, still valid JSON output.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::CliResult;
using moemem::test::joined;
using moemem::test::run_cli;

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs the CLI in-process; an exception escaping run() is exit 3 in the real executable.
CliResult run(const std::vector<std::string>& args) {
  try {
    return run_cli(args);
  } catch (const std::exception& e) {
    ADD_FAILURE() << joined(args) << " threw out of run(): " << e.what();
  }
  return {};
}

void expect_error(const std::vector<std::string>& args, const std::vector<std::string>& words) {
  SCOPED_TRACE(joined(args));
  const CliResult r = run(args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("moemem: error: ", 0), 0u) << r.err;
  for (const auto& w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
}

// A record of the set's schema around a given moemem object.
std::string record(const std::string& moemem) {
  return R"({"id": "r1", "framework": "Megatron-LM", "confidence": "high", "metric_kind": "max allocated", )"
         R"("measured_value": 40, "measured_gib_normalized": 40.0, "moemem": )" +
         moemem + "}\n";
}

// Fields of the wrong type were read through nlohmann's value()/get(), whose type_error escaped
// as exit 3. Each is now an error naming the record, the field, the value and what is accepted.
TEST(ValidateRecordTypes, EveryFieldOfTheWrongTypeIsNamed) {
  const std::string ok = R"("model": "llama-3.1-8b", "args": ["--dp", "8"], "unit": "GiB")";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"{" + ok + R"(, "metric": 5})", {"r1: moemem.metric: '5'", "allocated, reserved or device-used"}},
      {"{" + ok + R"(, "metric": "allocated", "companions": 5})", {"r1: moemem.companions: '5'", "a list of"}},
      {"{" + ok + R"(, "metric": "allocated", "companions": [5]})", {"r1: moemem.companions: '5'", "objects {metric, value, unit}"}},
      {"{" + ok + R"(, "metric": "allocated", "companions": [{"metric": [], "value": 1, "unit": "GiB"}]})",
       {"r1: moemem.metric: '[]'"}},
      {R"({"model": 5, "args": [], "metric": "allocated", "unit": "GiB"})", {"r1: moemem.model: '5'", "a preset name"}},
      {"{" + ok + R"(, "metric": "allocated", "expect": 5})", {"r1: moemem.expect: '5'", "out-of-memory"}},
      {"{" + ok + R"(, "metric": "allocated", "expect": "oom"})", {"r1: moemem.expect: 'oom'"}},
      {R"({"model": "llama-3.1-8b", "stage": {}, "metric": "allocated", "unit": "GiB"})", {"r1: moemem.stage: '{}'"}},
      {R"({"model": "llama-3.1-8b", "stage": 3, "metric": "allocated", "unit": "GiB"})", {"r1: moemem.stage: '3'", "a stage below 1"}},
      {R"({"model": "llama-3.1-8b", "metric": "allocated", "unit": 3})", {"r1: moemem.unit: '3'", "GiB, MiB, GB or bytes"}},
      {R"({"model": "llama-3.1-8b", "metric": "allocated", "unit": "GiB", "value": null})", {"r1: moemem.value"}},
      {R"(null)", {}},  // no moemem object: a record without a prediction (exit 4), not an error
  };
  const std::string path = ::testing::TempDir() + "types.jsonl";
  for (const auto& [moemem, words] : cases) {
    std::ofstream(path) << record(moemem);
    if (words.empty()) {
      EXPECT_EQ(run({"validate", "--set", path}).code, 4) << moemem;
      continue;
    }
    expect_error({"validate", "--set", path}, words);
  }
  // A record-level field of the wrong type names the line.
  std::ofstream(path) << R"({"id": "x", "metric_kind": "m", "measured_gib_normalized": 1, "confidence": 3})" << "\n";
  expect_error({"validate", "--set", path}, {"line 1: confidence: '3'", "high, medium or low"});
}

// A 200 KB config nested 100,000 deep overflowed the stack in dump() (the error message) or in
// the text_config copy: the depth is checked on the text before parsing.
TEST(JsonLimits, DeepNestingIsANamedErrorNotAStackOverflow) {
  const std::string arrays = temp_file("deep.config.json", std::string(100000, '[') + std::string(100000, ']'));
  expect_error({"count", "--model", arrays}, {"deep.config.json", "nested more than 32 deep", "nesting depth limit"});
  std::string chain;
  for (int i = 0; i < 30000; ++i) chain += R"({"text_config":)";
  chain += "{}" + std::string(30000, '}');
  const std::string wrappers = temp_file("chain.config.json", chain);
  expect_error({"count", "--model", wrappers}, {"chain.config.json", "nesting depth limit"});
  const std::string inner = temp_file("inner.config.json", R"({"model_type": "llama", "x": )" + std::string(50000, '[') +
                                                                std::string(50000, ']') + "}");
  expect_error({"analyze", "--model", inner, "--format", "json"}, {"inner.config.json", "nesting depth limit"});
  const std::string set = temp_file("deep.jsonl", R"({"id": )" + std::string(5000, '[') + std::string(5000, ']') + "}\n");
  expect_error({"validate", "--set", set}, {"deep.jsonl line 1", "nesting depth limit"});
  // Brackets inside strings do not count.
  const std::string quoted = temp_file("quoted.jsonl", R"({"id": ")" + std::string(100, '[') + R"(", "metric_kind": 1})" + "\n");
  expect_error({"validate", "--set", quoted}, {"quoted.jsonl line 1", "measured_gib_normalized"});
}

TEST(JsonLimits, OversizedFilesAreRefusedBeforeReading) {
  const std::string path = ::testing::TempDir() + "huge.config.json";
  {
    std::ofstream f(path, std::ios::binary);
    f << "{";
    f.seekp((std::streamoff{17} << 20));  // 17 MiB, sparse
    f << "}";
  }
  expect_error({"count", "--model", path}, {"huge.config.json", "input size limit"});
  const std::string set = ::testing::TempDir() + "huge.jsonl";
  std::filesystem::copy_file(path, set, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(set, std::uintmax_t{65} << 20);
  expect_error({"validate", "--set", set}, {"huge.jsonl", "input size limit"});
}

// nlohmann's dump() throws on bytes that are not UTF-8; a file name on Linux is any bytes, and it
// is printed as the model's name. The JSON output replaces them with U+FFFD.
TEST(JsonOutput, FileNamesThatAreNotUtf8StillGiveJson) {
  const std::string good = std::string(MOEMEM_TEST_DATA_DIR) + "/configs/llama-3.1-8b.config.json";
  const std::string bad = ::testing::TempDir() + "model\xff\xfe.json";
  std::filesystem::copy_file(good, bad, std::filesystem::copy_options::overwrite_existing);
  for (const std::vector<std::string>& args : {std::vector<std::string>{"count", "--model", bad, "--format", "json"},
                                               {"analyze", "--model", bad, "--format", "json"},
                                               {"explain", "--stage", "0", "--model", bad, "--format", "json"}}) {
    const CliResult r = run(args);
    ASSERT_EQ(r.code, 0) << joined(args) << r.err;
    EXPECT_TRUE(nlohmann::json::accept(r.out)) << joined(args);
    EXPECT_NE(r.out.find("model\xef\xbf\xbd"), std::string::npos) << joined(args);
  }
  const std::string set = ::testing::TempDir() + "set\xff.jsonl";
  std::ofstream(set) << record(R"({"model": "llama-3.1-8b", "args": ["--dp", "8"], "metric": "allocated", "unit": "GiB"})");
  const CliResult v = run({"validate", "--set", set, "--format", "json"});
  EXPECT_NE(v.code, 2) << v.err;
  EXPECT_TRUE(nlohmann::json::accept(v.out)) << v.out;
}

// "128K" is a string, not 128.
TEST(ConfigValues, SizesWithSuffixesAreRefused) {
  nlohmann::json c = nlohmann::json::parse(read(std::string(MOEMEM_TEST_DATA_DIR) + "/configs/llama-3.1-8b.config.json"));
  c["vocab_size"] = "128K";
  const std::string path = temp_file("vocab128k.config.json", c.dump());
  expect_error({"count", "--model", path}, {"vocab_size: '\"128K\"'", "an integer"});
}

// A misspelled key changed the number with only a stderr note (and keys beside text_config got
// none): the JSON lists them under `warnings`, and --strict refuses them.
TEST(UnknownKeys, ListedInJsonWarningsAndRefusedUnderStrict) {
  nlohmann::json c = nlohmann::json::parse(read(std::string(MOEMEM_TEST_DATA_DIR) + "/configs/llama-3.1-8b.config.json"));
  const nlohmann::json wrapper = {{"model_type", "llava"}, {"vision_config", {{"hidden_size", 1024}}}, {"text_config", c}};
  c["hiden_size"] = 1024;
  const std::string typo = temp_file("typo.config.json", c.dump());
  const std::string beside = temp_file("wrapper.config.json", wrapper.dump());
  const std::vector<std::vector<std::string>> commands = {
      {"analyze", "--format", "json"}, {"explain", "--stage", "0", "--format", "json"}, {"count", "--format", "json"},
      {"paper", "--ep", "1", "--format", "json"},
      {"search", "--gpus", "8", "--gpu", "h100-80g", "--global-batch", "8", "--format", "json", "--top", "1"}};
  for (const auto& [path, key] : {std::pair{typo, std::string("hiden_size")}, std::pair{beside, std::string("vision_config")}}) {
    for (const auto& command : commands) {
      std::vector<std::string> args = command;
      args.insert(args.begin() + 1, {"--model", path});
      SCOPED_TRACE(joined(args));
      const CliResult r = run(args);
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_NE(r.err.find("config keys not understood"), std::string::npos) << r.err;
      const auto j = nlohmann::json::parse(r.out);
      ASSERT_TRUE(j.contains("warnings")) << r.out.substr(0, 200);
      ASSERT_EQ(j.at("warnings").size(), 1u) << j.at("warnings").dump();
      EXPECT_NE(j.at("warnings")[0].get<std::string>().find("'" + key + "' not understood"), std::string::npos);
      args.push_back("--strict");
      expect_error(args, {"config keys: '" + key + "' is not accepted", "--strict"});
    }
  }
  // A config without such keys has no warnings, and --strict accepts it.
  const CliResult clean = run({"count", "--model", "llama-3.1-8b", "--format", "json", "--strict"});
  ASSERT_EQ(clean.code, 0) << clean.err;
  EXPECT_FALSE(nlohmann::json::parse(clean.out).contains("warnings"));
}

}  // namespace
