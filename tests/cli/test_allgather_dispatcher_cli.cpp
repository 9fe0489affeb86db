// Megatron's allgather dispatcher (token_dispatcher.py MoEAllGatherTokenDispatcher, Megatron-LM
// d98e8a64; Megatron's default moe_token_dispatcher_type). Sizes by hand from Mixtral-8x7B
// (h 4096, 8 experts, top-2, 32 MoE layers) at tp 2 with sp, etp = tp = 2 (Megatron's default),
// ep 4, dp 4, micro-batch 1 x 4096: each rank holds 4096 / 2 = 2048 tokens; the etp x ep group of
// 8 gathers N = 2048 x 8 = 16,384 rows.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "cli/run_cli.hpp"

namespace {

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::run_cli;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::items_of;

Args mixtral(const Args& extra = {}) {
  return concat({"--model", "mixtral-8x7b", "--tp", "2", "--sp", "--ep", "4", "--dp", "4", "--seq-len", "4096"}, extra);
}

constexpr std::uint64_t kRows = 16'384;  // N

TEST(AllgatherDispatcher, GatheredTokensAndTheirCombineAreCounted) {
  const auto act = items_of(explain_json(mixtral({"--moe-token-dispatcher", "allgather"}), 0), "activations");
  // masked_select keeps the local routing map: N x 8/4 local experts, a byte each, 32 layers.
  EXPECT_EQ(act.at("moe.local_map (masked_select mask)"), kRows * 2 * 32);
  // At the combine: the unpermuted [N, h] bf16 and its fp32 cast for the reduce-scatter.
  EXPECT_EQ(act.at("moe.unpermuted_output (transient)"), kRows * 4096 * 2);
  EXPECT_EQ(act.at("moe.combine_input_fp32 (transient)"), kRows * 4096 * 4);
  EXPECT_FALSE(act.contains("moe.a2a_output (transient)"));
  // The gathered tokens live in Megatron's global memory buffer: N x h bf16, larger than the
  // output layer's sequence-parallel gather (4096 x 4096).
  const auto buf = items_of(explain_json(mixtral({"--moe-token-dispatcher", "allgather"}), 0), "buffers");
  EXPECT_EQ(buf.at("global memory buffer ('mpu')"), kRows * 4096 * 2);
  const auto a2a = items_of(explain_json(mixtral(), 0), "buffers");
  EXPECT_EQ(a2a.at("global memory buffer ('mpu')"), 4096ull * 4096 * 2);
}

TEST(AllgatherDispatcher, RefusedWhereItIsNotModelled) {
  for (const char* profile : {"torchtitan", "hf", "paper"}) {
    const auto r = run_cli({"analyze", "--model", "moonlight-16b", "--profile", profile, "--recompute", "full",
                            "--moe-token-dispatcher", "allgather"});
    EXPECT_EQ(r.code, 2) << profile;
    EXPECT_NE(r.err.find("--moe-token-dispatcher"), std::string::npos) << r.err;
  }
  const auto graphs = run_cli(concat({"analyze"}, mixtral({"--moe-token-dispatcher", "allgather", "--cuda-graph-impl",
                                                           "transformer_engine", "--cuda-graph-scope", "moe_router,moe_preprocess"})));
  EXPECT_EQ(graphs.code, 2);
  EXPECT_NE(graphs.err.find("allgather"), std::string::npos) << graphs.err;
  const auto bad = run_cli({"analyze", "--model", "mixtral-8x7b", "--moe-token-dispatcher", "gather"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("alltoall, allgather or deepep"), std::string::npos) << bad.err;
}

}  // namespace
