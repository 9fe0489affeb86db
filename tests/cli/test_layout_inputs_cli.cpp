// Layout strings as Megatron and DualPipe read them (issue 13, "Layouts"): vpp inferred from the
// number of stages, DualPipe's two model copies written out, and an empty group repeated.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"

namespace {

using nlohmann::json;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::concat;
using moemem::test::activations_cli::Args;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::i64;

// Megatron's own example (docs: "Custom Pipeline Model Parallel Layout"): DeepSeek-V3 on PP16 with
// "Et*3|(tt|)*29,m|L" is PP16 VPP2, rank 0 holding the embedding with 3 layers and 2 more layers.
TEST(LayoutInputs, VppIsInferredFromTheLayoutStringAsMegatronDoes) {
  const json r = analyze_json({"--model", "deepseek-v3", "--pp", "16", "--ep", "8", "--dp", "8",
                               "--pipeline-model-parallel-layout", "Et*3|(tt|)*29,m|L"});
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(i64(r.at("parallel").at("vpp")), 2);
  EXPECT_EQ(r.at("parallel").at("schedule"), "interleaved");
  const auto& s0 = r.at("stages").at(0);
  EXPECT_EQ(i64(s0.at("num_layers")), 5);
  EXPECT_TRUE(s0.at("has_embedding").get<bool>());
  EXPECT_EQ(i64(r.at("stages").at(14).at("mtp_depths")), 1);  // chunk 30: "m"
  EXPECT_TRUE(r.at("stages").at(15).at("has_head").get<bool>());  // chunk 31: "L"
  // A vpp that contradicts the layout's stage count is still an error.
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--pp", "16", "--vpp", "4", "--ep", "8", "--dp", "8",
                 "--pipeline-model-parallel-layout", "Et*3|(tt|)*29,m|L"},
                {"--pipeline-model-parallel-layout", "64 stages"});
}

// DualPipe: rank r holds stage r of one direction's copy and stage pp-1-r of the other's, so both
// copies written out (2 x pp stages, halves equal) is the same run as one copy of pp stages.
TEST(LayoutInputs, DualPipeAcceptsBothModelCopiesWrittenOut) {
  const Args base = {"--model", "deepseek-v3", "--pp", "4", "--ep", "8", "--dp", "8", "--schedule", "dualpipe"};
  Args one = base, two = base;
  for (const char* a : {"--pipeline-model-parallel-layout", "Et*15|t*16|t*16|t*14mL"}) one.emplace_back(a);
  for (const char* a : {"--pipeline-model-parallel-layout", "Et*15|t*16|t*16|t*14mL|Et*15|t*16|t*16|t*14mL"}) two.emplace_back(a);
  const json a = analyze_json(one), b = analyze_json(two);
  ASSERT_FALSE(a.is_null());
  ASSERT_FALSE(b.is_null());
  EXPECT_EQ(a.at("stages"), b.at("stages"));
  // A single model in 2 x pp chunks is DualPipeV's V, not DualPipe's two copies: named, not guessed.
  Args v = base;
  for (const char* x : {"--pipeline-model-parallel-layout", "Et*3|(t*8|)*6,t*10mL"}) v.emplace_back(x);
  expect_exit_2(concat({"analyze"}, v), {"--pipeline-model-parallel-layout", "dualpipev"});
}

TEST(LayoutInputs, AnEmptyGroupRepeatedIsEmptyAndFast) {
  // Repeated 2^40 times over (nested) it used to loop; empty is empty.
  expect_exit_2({"analyze", "--pp", "4", "--pipeline-model-parallel-layout", "((Et*61mL)*0)*1048576"},
                {"--pipeline-model-parallel-layout", "4 stages"});
  expect_exit_2({"analyze", "--pp", "4", "--pipeline-model-parallel-layout", "((()*1048576)*1048576)*1048576Et*61mL"},
                {"--pipeline-model-parallel-layout", "4 stages"});
}

// An empty value read as the option not given (the even split), silently.
TEST(LayoutInputs, EmptyLayoutAndSplitAreRefused) {
  expect_exit_2({"analyze", "--pp", "2", "--pipeline-model-parallel-layout", ""}, {"--pipeline-model-parallel-layout", "non-empty"});
  expect_exit_2({"analyze", "--pp", "2", "--layers-per-stage", ""}, {"--layers-per-stage", "non-empty"});
  // An empty value was "not given" for the string options: --gpu "$GPU" with GPU unset dropped
  // the fit check silently. Every option that takes a value refuses it, in every command.
  for (const char* cmd : {"analyze", "explain", "search"}) {
    expect_exit_2({cmd, "--model", "llama-3.1-8b", "--gpu", ""}, {"--gpu", "non-empty"});
    expect_exit_2({cmd, "--model", "llama-3.1-8b", "--recompute", ""}, {"--recompute", "non-empty"});
  }
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--gpu-memory", ""}, {"--gpu-memory", "non-empty"});
}

// Megatron's arguments.py turns sequence parallelism off at tp 1 ("Disabling sequence parallelism
// because tensor model parallelism is disabled"): the report says so rather than echo the flag.
TEST(LayoutInputs, SequenceParallelIsOffWithoutTensorParallelism) {
  const json one = analyze_json({"--model", "llama-3.1-8b", "--tp", "1", "--sp", "--dp", "8"});
  ASSERT_FALSE(one.is_null());
  EXPECT_FALSE(one.at("parallel").at("sp").get<bool>());
  const json two = analyze_json({"--model", "llama-3.1-8b", "--tp", "2", "--sp", "--dp", "4"});
  ASSERT_FALSE(two.is_null());
  EXPECT_TRUE(two.at("parallel").at("sp").get<bool>());
}

}  // namespace

namespace {

// The cli contract's names in analyze's JSON: peak.band_pct as [low, high] percent, warnings a list
// (empty when there are none).
TEST(LayoutInputs, ReportCarriesTheContractsBandAndWarnings) {
  const json r = analyze_json({"--model", "llama-3.1-8b", "--dp", "8"});
  ASSERT_FALSE(r.is_null());
  const auto& band = r.at("peak").at("band_pct");
  ASSERT_EQ(band.size(), 2u);
  EXPECT_EQ(band.at(0), r.at("uncertainty").at("low_pct"));
  EXPECT_EQ(band.at(1), r.at("uncertainty").at("high_pct"));
  EXPECT_TRUE(r.at("warnings").is_array());
}

}  // namespace

namespace {

// Messages that name what was typed (a metamorphic sweep found each one naming something else).
TEST(LayoutInputs, ErrorsNameTheFlagAndTheValueGiven) {
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--profile", "torchtitan", "--dp", "4", "--dp-replicate", "0x10"},
                {"--dp-replicate", "0x10", "an integer"});
  expect_exit_2({"search", "--model", "mixtral-8x7b", "--gpu", "h100-80g", "--gpus", "8", "--global-batch", "0"},
                {"--global-batch", "'0'"});
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--pp", "4", "--decoder-last-pipeline-num-layers", "3"},
                {"'last 3'"});
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--decoder-first-pipeline-num-layers", "32"},
                {"--decoder-first-pipeline-num-layers", "2 or more stages"});
  // GPipe holds every micro-batch of the step: the global batch is among what overflows.
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--pp", "4", "--schedule", "gpipe", "--global-batch", "1099511627776"},
                {"--global-batch", "1099511627776"});
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--finetune", "lora", "--lora-rank", "2147483648"},
                {"--lora-rank", "2147483648", "at most 1048576"});
}

}  // namespace
