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
#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"
#include "moemem/model.hpp"

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
  const std::string script = ::testing::TempDir() + "script\xff.args";
  std::filesystem::copy_file(std::string(MOEMEM_TEST_DATA_DIR) + "/megatron/llama3_70b_tp8_pp4.args", script,
                             std::filesystem::copy_options::overwrite_existing);
  const CliResult m = run({"analyze", "--megatron-args", script, "--format", "json"});
  ASSERT_EQ(m.code, 0) << m.err;
  EXPECT_TRUE(nlohmann::json::accept(m.out));
  const std::string set = ::testing::TempDir() + "set\xff.jsonl";
  std::ofstream(set) << record(R"({"model": "llama-3.1-8b", "args": ["--dp", "8"], "metric": "allocated", "unit": "GiB"})");
  const CliResult v = run({"validate", "--set", set, "--format", "json"});
  EXPECT_NE(v.code, 2) << v.err;
  EXPECT_TRUE(nlohmann::json::accept(v.out)) << v.out;
}

// "128K" is a string, not 128.
// A batch and sequence whose layers each fit in 64 bits but whose stage sum does not: the error
// names the inputs that scale it, not the ledger line where the sum overflowed.
TEST(Overflow, AStageSumThatOverflowsNamesTheBatchAndSequence) {
  expect_error({"analyze", "--model", "llama-3.1-405b", "--micro-batch", "4096", "--seq-len", "1048576"},
               {"--micro-batch/--seq-len: '4096 x 1048576'", "fit in 64 bits"});
  expect_error({"explain", "--model", "llama-3.1-405b", "--micro-batch", "4096", "--seq-len", "1048576", "--stage", "0"},
               {"--micro-batch/--seq-len"});
}

TEST(ConfigValues, SizesWithSuffixesAreRefused) {
  nlohmann::json c = nlohmann::json::parse(read(std::string(MOEMEM_TEST_DATA_DIR) + "/configs/llama-3.1-8b.config.json"));
  c["vocab_size"] = "128K";
  const std::string path = temp_file("vocab128k.config.json", c.dump());
  expect_error({"count", "--model", path}, {"vocab_size: '\"128K\"'", "an integer"});
}

// A misspelled key changed the number with only a stderr note (and keys beside text_config got
// none): the JSON lists them under `warnings`, and --strict refuses them.
// A multimodal wrapper moemem does not count whole (its vision tower) is refused by name, not
// narrowed to its language model: llava, mistral3, or an unknown type around a text_config.
TEST(UnknownKeys, WrappersWithUncountedTowersAreRefused) {
  const nlohmann::json c = nlohmann::json::parse(read(std::string(MOEMEM_TEST_DATA_DIR) + "/configs/llama-3.1-8b.config.json"));
  for (const auto& [wrapper, field] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"model_type", "llava"}, {"vision_config", {{"hidden_size", 1024}}}, {"text_config", c}}, "vision_config"},
           {{{"model_type", "mistral3"}, {"vision_config", {{"hidden_size", 1024}}}, {"text_config", c}}, "vision_config"},
           {{{"model_type", "totally_unknown"}, {"text_config", c}}, "model_type"}}) {
    const std::string path = temp_file("wrapped.config.json", wrapper.dump());
    expect_error({"count", "--model", path}, {field, "text_config's contents"});
  }
}

TEST(UnknownKeys, ListedInJsonWarningsAndRefusedUnderStrict) {
  nlohmann::json c = nlohmann::json::parse(read(std::string(MOEMEM_TEST_DATA_DIR) + "/configs/llama-3.1-8b.config.json"));
  // A text type nesting its config, with a key beside it moemem does not understand.
  const nlohmann::json wrapper = {{"model_type", "llama"}, {"max_length", 4096}, {"text_config", c}};
  c["hiden_size"] = 1024;
  const std::string typo = temp_file("typo.config.json", c.dump());
  const std::string beside = temp_file("wrapper.config.json", wrapper.dump());
  const std::vector<std::vector<std::string>> commands = {
      {"analyze", "--format", "json"}, {"explain", "--stage", "0", "--format", "json"}, {"count", "--format", "json"},
      {"paper", "--ep", "1", "--format", "json"},
      {"search", "--gpus", "8", "--gpu", "h100-80g", "--global-batch", "8", "--format", "json", "--top", "1"}};
  for (const auto& [path, key] : {std::pair{typo, std::string("hiden_size")}, std::pair{beside, std::string("max_length")}}) {
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

// `--cuda-context 0.52` was read as 0.52 bytes (1 byte): a size needs its unit (0 needs none).
TEST(SizeUnits, ANumberWithoutAUnitIsRefused) {
  for (const char* flag : {"--cuda-context", "--nccl-per-group", "--gpu-memory"}) {
    expect_error({"analyze", "--model", "llama-3.1-8b", flag, "0.52"}, {std::string(flag) + ": '0.52' is not accepted", "unit"});
  }
  const auto runtime = [](const std::string& size) {
    const CliResult r = run({"analyze", "--model", "llama-3.1-8b", "--cuda-context", size, "--format", "json"});
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out).at("stages")[0].at("bytes").at("runtime").get<std::uint64_t>();
  };
  EXPECT_EQ(runtime("0.52GiB") - runtime("0"), 558345749u);  // ceil(0.52 x 2^30 = 558345748.48)
  EXPECT_EQ(runtime("1024B") - runtime("0"), 1024u);
}

// The distributed optimizer is ZeRO-1; asked for together with --zero 0 it silently became ZeRO-1.
TEST(Contradictions, ZeroStageZeroWithTheDistributedOptimizer) {
  expect_error({"analyze", "--model", "llama-3.1-8b", "--zero", "0", "--distributed-optimizer"},
               {"--zero: '0 with --distributed-optimizer' is not accepted", "ZeRO-1"});
  for (const auto& ok : {std::vector<std::string>{"--zero", "1", "--distributed-optimizer"}, {"--distributed-optimizer"}, {"--zero", "0"}}) {
    std::vector<std::string> args = {"analyze", "--model", "llama-3.1-8b"};
    args.insert(args.end(), ok.begin(), ok.end());
    EXPECT_EQ(run(args).code, 0) << joined(args);
  }
}

// tp x pp x cp from the command line against a script's world size: checked, named (it was a
// signed overflow).
TEST(Overflow, WorldSizeOverDegreesIsChecked) {
  const std::string script = temp_file("world.sh", "torchrun --nproc-per-node 8 --nnodes 4 pretrain_gpt.py "
                                                   "--tensor-model-parallel-size 2\n");
  for (const char* tp : {"1048576", "4611686018427387904"}) {
    const CliResult r = run({"analyze", "--model", "llama-3.1-8b", "--megatron-args", script, "--tp", tp, "--pp", tp, "--cp", tp});
    EXPECT_EQ(r.code, 2) << tp << r.err;
    EXPECT_NE(r.err.find("world size: '32' is not accepted; expected a multiple of tp*pp*cp"), std::string::npos) << r.err;
  }
}

// Products of two config sizes in the inventory were signed multiplications: a ModelSpec from a
// library caller (not bounded by the config readers) overflowed silently.
TEST(Overflow, TensorDimensionsAreCheckedProducts) {
  moemem::ModelSpec m = moemem::load_model("llama-3.1-8b");
  m.num_heads = m.num_kv_heads = std::int64_t{1} << 40;
  m.head_dim = std::int64_t{1} << 30;
  EXPECT_THROW((void)moemem::build_inventory(m), moemem::OverflowError);
}

// Every source's model is bounded: layers (2^40 was a bad_alloc, 3,000,000 took 20 s and 2.4 GB)
// and key/value heads (at most the query heads).
TEST(ModelBounds, LayersAndKeyValueHeads) {
  moemem::ModelSpec m = moemem::load_model("llama-3.1-8b");
  m.num_layers = std::int64_t{1} << 40;
  EXPECT_THROW(moemem::validate_model(m), moemem::InputError);
  m = moemem::load_model("llama-3.1-8b");
  m.num_kv_heads = m.num_heads * 2;
  try {
    moemem::validate_model(m);
    ADD_FAILURE() << "more key/value heads than query heads accepted";
  } catch (const moemem::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads: '64'"), std::string::npos) << e.what();
  }
  m.num_kv_heads = 0;
  EXPECT_THROW(moemem::validate_model(m), moemem::InputError);
}

// Megatron-Core divides the dense and shared-expert MLPs' intermediate sizes over tp
// (ColumnParallelLinear/RowParallelLinear's divide() asserts); moemem accepted sizes that do not
// divide. The megatron profile refuses them now, in analyze, search and validate alike.
TEST(TensorParallelRules, MlpSizesMustDivideByTp) {
  nlohmann::json c = nlohmann::json::parse(read(std::string(MOEMEM_TEST_DATA_DIR) + "/configs/llama-3.1-8b.config.json"));
  c["intermediate_size"] = 14337;
  const std::string odd = temp_file("odd_ffn.config.json", c.dump());
  expect_error({"analyze", "--model", odd, "--tp", "2"}, {"--tp: '2' is not accepted", "intermediate_size (14337)"});
  EXPECT_EQ(run({"analyze", "--model", odd, "--tp", "1"}).code, 0);
  EXPECT_EQ(run({"analyze", "--model", odd, "--tp", "2", "--profile", "torchtitan"}).code, 0);  // DTensor shards unevenly
  // search: no layout with tp 2 is evaluated.
  const CliResult s = run({"search", "--model", odd, "--gpus", "8", "--gpu", "h100-80g", "--global-batch", "8", "--tp", "2",
                           "--format", "json"});
  EXPECT_EQ(s.code, 2) << s.err;  // every candidate refused: bad input, named on stderr
  EXPECT_NE(s.err.find("intermediate_size (14337)"), std::string::npos) << s.err;
  EXPECT_EQ(nlohmann::json::parse(s.out).at("evaluated"), 0);

  nlohmann::json q = nlohmann::json::parse(read(std::string(MOEMEM_TEST_DATA_DIR) + "/configs/qwen2-57b-a14b.config.json"));
  q["shared_expert_intermediate_size"] = 20481;
  const std::string shared = temp_file("odd_shared.config.json", q.dump());
  expect_error({"analyze", "--model", shared, "--tp", "4"}, {"--tp: '4' is not accepted", "shared experts' intermediate size (20481)"});
}

}  // namespace
