// Megatron's --tp-comm-overlap (Transformer Engine's userbuffers) and --delay-wgrad-compute
// (src/analyze/userbuffers.cpp). Sizes by hand from the shapes Megatron-LM d98e8a64
// (training/initialize.py _initialize_tp_communicators) and TransformerEngine d0067d0d
// (pytorch/module/base.py initialize_ub, add_ub; common/comm_gemm_overlap/comm_gemm_overlap.cpp) give.
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

// The PR 6429 run at TP2 with sp (tests/cli/megatron_cli_helpers.hpp), no recomputation.
Args dsv3_14l(const Args& extra = {}, const char* tp = "2") { return moemem::test::pr6429_run(extra, tp); }

json explain_items(const Args& args, const std::string& stage) {
  const auto r = run_cli(concat(concat({"explain"}, args), {"--stage", stage, "--format", "json"}));
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? json::parse(r.out).at("items") : json::array();
}

std::uint64_t module_bytes(const json& items, const std::string& module, const std::string& category) {
  std::uint64_t sum = 0;
  for (const auto& it : items) {
    if (it.at("module") == module && it.at("category") == category) sum += it.at("bytes").get<std::uint64_t>();
  }
  return sum;
}

std::uint64_t stage_bytes(const json& j, std::size_t s, const char* category) {
  return j.at("stages").at(s).at("bytes").at(category).get<std::uint64_t>();
}

// Twelve buffers of [s*b/cp, h] = 2048 x 7168 bf16 (8 all-gather side, 4 reduce-scatter side),
// 29,360,128 bytes each = 352,321,536, plus the communicator's control region 3,268,864:
// 355,590,400 bytes of runtime on every stage (cudaMalloc/cuMemCreate: outside the allocator).
TEST(TpCommOverlapCli, TwelveFullShapeBuffersPerRankOutsideTheAllocator) {
  const json plain = analyze_json(dsv3_14l());
  const json ub = analyze_json(dsv3_14l({"--tp-comm-overlap"}));
  ASSERT_FALSE(plain.is_null());
  ASSERT_FALSE(ub.is_null());
  for (std::size_t s = 0; s < 4; ++s) {
    SCOPED_TRACE(s);
    EXPECT_EQ(stage_bytes(ub, s, "runtime") - stage_bytes(plain, s, "runtime"), 355'590'400u);
    // The GEMM workspaces gain TE's 3 userbuffers streams' cuBLAS workspaces (3 x (32 MiB + 1 KiB),
    // get_cublas_workspace(ub=True)), allocated through PyTorch.
    EXPECT_EQ(stage_bytes(ub, s, "buffers") - stage_bytes(plain, s, "buffers"), 3u * ((32u << 20) + 1024u));
    EXPECT_EQ(stage_bytes(ub, s, "activations"), stage_bytes(plain, s, "activations"));
  }
  EXPECT_EQ(module_bytes(explain_items(dsv3_14l({"--tp-comm-overlap"}), "1"), "userbuffers", "runtime"), 355'590'400u);
}

// FP8: the eight all-gather side buffers are uint8 (add_ub fp8_buf), the four others stay bf16:
// 2048 x 7168 x (8 x 1 + 4 x 2) = 234,881,024, plus 3,268,864 = 238,149,888.
TEST(TpCommOverlapCli, Fp8AllGatherBuffersAreOneByte) {
  const auto items = explain_items(dsv3_14l({"--tp-comm-overlap", "--fp8", "tensorwise"}), "1");
  EXPECT_EQ(module_bytes(items, "userbuffers", "runtime"), 238'149'888u);
}

TEST(TpCommOverlapCli, NeedsTpAboveOneAndSequenceParallelism) {
  expect_exit_2(concat({"analyze"}, dsv3_14l({"--tp-comm-overlap"}, "1")), {"--tp-comm-overlap"});
  const Args no_sp = {"--model", MOEMEM_TEST_DATA_DIR "/validation/models/deepseek-v3-14l.json", "--tp", "2", "--ep", "16",
                      "--dp", "16", "--tp-comm-overlap"};
  expect_exit_2(concat({"analyze"}, no_sp), {"--tp-comm-overlap"});
}

// One MoE layer's expert GEMM inputs and output gradients, R = tokens/tp x top_k = 1024 x 8 = 8192
// rows: fc1 input R x h (8192 x 7168 x 2 = 117,440,512), fc1 output gradient R x 2 ffn
// (8192 x 4096 x 2 = 67,108,864), fc2 input R x ffn (33,554,432), fc2 output gradient R x h
// (117,440,512): 335,544,320 bytes on each stage with MoE layers.
TEST(DelayWgradCli, HoldsOneMoeLayersExpertInputsAndOutputGradients) {
  const Args overlap = {"--overlap-moe-expert-parallel-comm"};
  const json plain = analyze_json(dsv3_14l(overlap));
  const json delay = analyze_json(dsv3_14l(concat(overlap, {"--delay-wgrad-compute"})));
  ASSERT_FALSE(plain.is_null());
  ASSERT_FALSE(delay.is_null());
  for (std::size_t s = 0; s < 4; ++s) {
    SCOPED_TRACE(s);
    EXPECT_EQ(stage_bytes(delay, s, "activations") - stage_bytes(plain, s, "activations"), 335'544'320u);
  }
  const auto items = explain_items(dsv3_14l(concat(overlap, {"--delay-wgrad-compute"})), "2");
  EXPECT_EQ(module_bytes(items, "delayed_wgrad", "activations"), 335'544'320u);
}

TEST(DelayWgradCli, NeedsTheEpOverlap) {
  expect_exit_2(concat({"analyze"}, dsv3_14l({"--delay-wgrad-compute"})), {"--overlap-moe-expert-parallel-comm"});
}

// Launch scripts: both switches are read; --tp-comm-overlap-cfg is refused by name.
TEST(TpCommOverlapCli, ScriptSwitchesReadAndCfgRefused) {
  const std::string model =
      "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --ffn-hidden-size 4096 --vocab-size 32000 "
      "--seq-length 1024 --micro-batch-size 1 --tensor-model-parallel-size 2 --sequence-parallel ";
  const std::string dir = ::testing::TempDir();
  const auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + name;
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return path;
  };
  const auto ok = run_cli({"explain", "--stage", "0", "--format", "json", "--dp", "1", "--megatron-args",
                           write("ub.args", model + "--tp-comm-overlap\n")});
  ASSERT_EQ(ok.code, 0) << ok.err;
  // 1024 x 1024 x 2 x 12 = 25,165,824, plus 3,268,864.
  EXPECT_EQ(module_bytes(json::parse(ok.out).at("items"), "userbuffers", "runtime"), 28'434'688u);
  const auto cfg = run_cli({"analyze", "--dp", "1", "--megatron-args",
                            write("ubcfg.args", model + "--tp-comm-overlap --tp-comm-overlap-cfg ub.yaml\n")});
  EXPECT_EQ(cfg.code, 2);
  EXPECT_NE(cfg.err.find("--tp-comm-overlap-cfg"), std::string::npos) << cfg.err;
}

}  // namespace
