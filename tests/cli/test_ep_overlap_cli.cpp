// Megatron's EP all-to-all overlap (--overlap-moe-expert-parallel-comm; Megatron-LM d98e8a64,
// pipeline_parallel/combined_1f1b.py, schedules.py get_pp_rank_microbatches): one more warm-up
// forward, then each steady step runs one micro-batch's forward beside another's backward, layer by
// layer. The micro-batches held before a step are those 1F1B holds after its steady forward; the
// forward's current layer comes on top. With full recomputation (PR 6429's branch) each model chunk
// is recomputed whole from its input.
#include <cstdint>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "cli/megatron_cli_helpers.hpp"
#include "cli/run_cli.hpp"

namespace {

using nlohmann::json;
using moemem::test::Args;
using moemem::test::concat;
using moemem::test::run_cli;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::u64;

Args dsv3_14l(const Args& extra = {}) { return moemem::test::pr6429_run(extra); }

const Args kOverlap = {"--overlap-moe-expert-parallel-comm"};

// The explain items of one stage, as JSON.
json explain_items(const Args& args, const std::string& stage) {
  const auto r = run_cli(concat(concat({"explain"}, args), {"--stage", stage, "--format", "json"}));
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? json::parse(r.out).at("items") : json::array();
}

std::uint64_t item_bytes(const json& items, const std::string& name) {
  std::uint64_t sum = 0;
  for (const auto& it : items) {
    if (it.at("item") == name) sum += it.at("bytes").get<std::uint64_t>();
  }
  return sum;
}

// Under the overlap the forward's data-loader batch sits beside every backward (its item in the
// overlapped run's ledger), where without it a forward beside its batch was one more candidate for
// the stage's largest moment (`plain`'s stage): what the overlap adds besides the forward's layer.
std::int64_t beside_backward(const json& items, const json& plain) {
  const auto moment = [](const json& s) {
    return std::max(s.at("recompute_transient").get<std::int64_t>(), s.at("loss_transient").get<std::int64_t>());
  };
  return static_cast<std::int64_t>(item_bytes(items, "data loader batch")) + moment(plain) -
         std::max(moment(plain), plain.at("input_batch_transient").get<std::int64_t>());
}

TEST(EpOverlapCli, HoldsTheSameMicroBatchesPlusOneForwardLayer) {
  const json plain = analyze_json(dsv3_14l({"--recompute", "none"}));
  const json overlap = analyze_json(dsv3_14l(concat({"--recompute", "none"}, kOverlap)));
  ASSERT_FALSE(plain.is_null());
  ASSERT_FALSE(overlap.is_null());
  for (std::size_t s = 0; s < 4; ++s) {
    SCOPED_TRACE(s);
    const auto& a = plain.at("stages").at(s);
    const auto& b = overlap.at("stages").at(s);
    // get_pp_rank_microbatches: warm-up + 1, and the forward of a combined step runs beside its
    // backward instead of before it: the count held before each step is 1F1B's peak count.
    EXPECT_EQ(b.at("in_flight_microbatches"), a.at("in_flight_microbatches"));
    const json items = explain_items(dsv3_14l(concat({"--recompute", "none"}, kOverlap)), std::to_string(s));
    const std::uint64_t layer = item_bytes(items, "next micro-batch's layer in forward");
    EXPECT_GT(layer, 0u);
    EXPECT_EQ(static_cast<std::int64_t>(u64(b.at("bytes").at("activations")) - u64(a.at("bytes").at("activations"))),
              static_cast<std::int64_t>(layer) + beside_backward(items, a));
    // One layer of one micro-batch is less than what one chunk (2 layers) of one micro-batch keeps.
    EXPECT_LT(layer, u64(a.at("bytes").at("activations")) / u64(a.at("in_flight_microbatches")) * 2);
  }
}

TEST(EpOverlapCli, FullRecomputationKeepsMegatronsSegments) {
  // PR 6429 (37f1af1036, "per layer segment") keeps Megatron's segments: with the overlap, uniform
  // recomputation of 1 layer keeps each layer's input as without it, and a steady step adds the
  // forward's current layer, which holds all it would save and its unsaved tensors until its segment
  // ends: the difference is that one item, and it is more than what one layer keeps (its input).
  const json overlap = analyze_json(dsv3_14l(concat({"--recompute", "full", "--recompute-num-layers", "1"}, kOverlap)));
  const json per_layer = analyze_json(dsv3_14l({"--recompute", "full", "--recompute-num-layers", "1"}));
  ASSERT_FALSE(overlap.is_null());
  ASSERT_FALSE(per_layer.is_null());
  for (std::size_t s = 0; s < 4; ++s) {
    SCOPED_TRACE(s);
    const auto& a = per_layer.at("stages").at(s);
    const auto& b = overlap.at("stages").at(s);
    EXPECT_EQ(b.at("activations_per_microbatch"), a.at("activations_per_microbatch"));
    const json items =
        explain_items(dsv3_14l(concat({"--recompute", "full", "--recompute-num-layers", "1"}, kOverlap)), std::to_string(s));
    const std::uint64_t layer = item_bytes(items, "next micro-batch's layer in forward");
    EXPECT_GT(layer, u64(a.at("activations_per_microbatch")) / 8);
    EXPECT_EQ(static_cast<std::int64_t>(u64(b.at("bytes").at("activations")) - u64(a.at("bytes").at("activations"))),
              static_cast<std::int64_t>(layer) + beside_backward(items, a));
  }
}

TEST(EpOverlapCli, LaunchScriptFlagIsReadNotRefused) {
  const std::string script = ::testing::TempDir() + "ep_overlap.sh";
  {
    std::FILE* f = std::fopen(script.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(
        "torchrun --nproc-per-node 8 --nnodes 8 pretrain_gpt.py --pipeline-model-parallel-size 4 "
        "--num-virtual-stages-per-pipeline-rank 2 --pipeline-model-parallel-layout 'Ett|(tt|)*6mL' "
        "--expert-model-parallel-size 16 --expert-tensor-parallel-size 1 --micro-batch-size 1 --global-batch-size 256 "
        "--seq-length 2048 --use-distributed-optimizer --hidden-dropout 0 --attention-dropout 0 "
        "--overlap-moe-expert-parallel-comm\n",
        f);
    std::fclose(f);
  }
  const auto r = run_cli({"analyze", "--model", MOEMEM_TEST_DATA_DIR "/validation/models/deepseek-v3-14l.json",
                          "--megatron-args", script, "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json flags = analyze_json(dsv3_14l(kOverlap));
  ASSERT_FALSE(flags.is_null());
  EXPECT_EQ(json::parse(r.out).at("peak"), flags.at("peak"));
}

TEST(EpOverlapCli, RefusedWhereMegatronRefusesIt) {
  const char* flag = "--overlap-moe-expert-parallel-comm";
  // expert parallelism is required
  expect_exit_2(concat({"analyze", "--model", "mixtral-8x7b", "--ep", "1"}, kOverlap), {flag, "expert parallelism"});
  // pp > 1 needs a virtual pipeline
  expect_exit_2(concat({"analyze", "--model", "mixtral-8x7b", "--ep", "8", "--dp", "8", "--pp", "4"}, kOverlap), {flag, "virtual pipeline"});
  // no "moe" among the recomputed modules
  expect_exit_2(concat({"analyze", "--model", "mixtral-8x7b", "--ep", "8", "--dp", "8", "--recompute", "selective", "--recompute-modules", "moe"},
                       kOverlap),
                {"--recompute-modules", "moe"});
  // PR 6429's full recomputation cannot replay dropout
  expect_exit_2(concat({"analyze", "--model", "mixtral-8x7b", "--ep", "8", "--dp", "8", "--recompute", "full", "--hidden-dropout", "0.1"}, kOverlap),
                {"--hidden-dropout", "0 with full recomputation"});
  // a megatron-profile setting
  expect_exit_2(concat({"analyze", "--model", "llama-3.1-8b", "--profile", "torchtitan"}, kOverlap), {flag, "megatron profile"});
}

}  // namespace
