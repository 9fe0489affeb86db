// MoE routing through `moemem explain` (issue 4): imbalance and capacity size the hottest
// expert rank, scaling exactly the routed-expert tensors; bad factors and dispatchers exit 2.
// Base configuration: activations_cli_helpers.hpp.
// Expected values are derived by hand from the rules (the issue, docs/formulas.md,
// Megatron-Core) and from relations between runs, never copied from moemem's output.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"

namespace {

using nlohmann::json;
using moemem::test::activations_cli::Args;
using moemem::test::activations_cli::joined;
using moemem::test::activations_cli::concat;
using moemem::test::activations_cli::dsv3;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::saved_tensors;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::kRouted;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::u64;

// Every saved tensor of stage 1 under `extra`, against the balanced run: "experts.*" items must
// be the balanced bytes scaled from R rows to `rows`, everything else unchanged.
void expect_routed_rows(const Args& extra, std::uint64_t rows) {
  SCOPED_TRACE(joined(extra) + " -> " + std::to_string(rows) + " rows");
  const json b = explain_json(dsv3(), 1);
  const json x = explain_json(dsv3(extra), 1);
  ASSERT_FALSE(b.is_null());
  ASSERT_FALSE(x.is_null());
  const auto base = saved_tensors(b), now = saved_tensors(x);
  ASSERT_EQ(base.size(), now.size());
  int experts = 0;
  for (const auto& [name, bytes] : base) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(now.contains(name));
    if (name.starts_with("experts.")) {
      ++experts;
      // Each is R rows x a per-row width: bytes scale with the rows exactly.
      ASSERT_EQ(bytes % kRouted, 0u);
      EXPECT_EQ(now.at(name), bytes / kRouted * rows);
    } else {
      EXPECT_EQ(now.at(name), bytes);
    }
  }
  EXPECT_EQ(experts, 4);
}

TEST(RoutingCli, ImbalanceTwoDoublesExactlyTheExpertTensors) { expect_routed_rows({"--moe-imbalance", "2"}, 2 * kRouted); }

TEST(RoutingCli, CapacityFactorCapsTheImbalance) {
  // min(2, 1.25) x 16384 = 20480 rows.
  expect_routed_rows({"--moe-imbalance", "2", "--moe-capacity-factor", "1.25"}, 20480);
  // Balanced routing never exceeds a capacity above 1.
  expect_routed_rows({"--moe-capacity-factor", "1.25"}, kRouted);
}

TEST(RoutingCli, FractionalImbalanceRoundsTheRowsUp) {
  // ceil(16384 x 1.3) = ceil(21299.2) = 21300 rows.
  expect_routed_rows({"--moe-imbalance", "1.3"}, 21300);
}

TEST(RoutingCli, BadFactorsExitTwoNamingTheFlag) {
  expect_exit_2(concat({"analyze"}, dsv3({"--moe-imbalance", "0.5"})), {"--moe-imbalance", "0.5"});
  expect_exit_2(concat({"analyze"}, dsv3({"--moe-capacity-factor=-1"})), {"--moe-capacity-factor", "-1"});
  expect_exit_2(concat({"analyze"}, dsv3({"--moe-capacity-factor", "0"})), {"--moe-capacity-factor"});
  expect_exit_2(concat({"analyze"}, dsv3({"--moe-imbalance", "lots"})), {"--moe-imbalance", "lots"});
  expect_exit_2(concat({"analyze"}, dsv3({"--moe-token-dispatcher", "nccl"})), {"--moe-token-dispatcher", "nccl"});
}

// The hottest rank receives at most every expert-parallel rank's tokens, once per local expert a
// token picks: ep x min(top_k, experts per rank) / top_k times the average. A larger factor is an
// input no routing can produce, so it is refused, naming the bound.
TEST(RoutingCli, ImbalanceIsBoundedByWhatTheLayoutCanReceive) {
  // DeepSeek-V3 at ep 8: 256 / 8 = 32 experts per rank, top-8: 8 x min(8, 32) / 8 = 8.
  EXPECT_FALSE(explain_json(dsv3({"--moe-imbalance", "8"}), 1).is_null());
  expect_exit_2(concat({"analyze"}, dsv3({"--moe-imbalance", "8.5"})), {"--moe-imbalance", "8.5", "from 1 to 8", "ep 8"});
  // Mixtral at ep 8: one expert per rank, top-2: 8 x min(2, 1) / 2 = 4.
  const Args mixtral = {"--model", "mixtral-8x7b", "--dp", "8", "--ep", "8", "--micro-batch", "1", "--seq-len", "4096"};
  EXPECT_FALSE(analyze_json(concat(mixtral, {"--moe-imbalance", "4"})).is_null());
  expect_exit_2(concat({"analyze"}, concat(mixtral, {"--moe-imbalance", "4.01"})), {"--moe-imbalance", "4.01", "from 1 to 4"});
  // ep 1: every expert is local, so routing cannot leave one rank hotter than the average.
  expect_exit_2(concat({"analyze", "--model", "mixtral-8x7b", "--dp", "8", "--micro-batch", "1", "--seq-len", "4096"},
                       {"--moe-imbalance", "1.5"}),
                {"--moe-imbalance", "1.5", "from 1 to 1", "ep 1"});
}

// The MoE dispatch transient (docs/formulas.md; Megatron-LM moe_layer.py / token_dispatcher.py):
// Mixtral 8x7B (h = 4096, top-2 of 8), one rank per pipeline, b = 1, s = 4096, no TP: tokens 4096,
// S = 4096 x 2 = 8192 sent, R = 8192 received (balanced), bf16.
TEST(RoutingCli, DispatchTransientFollowsExpertsPerRankAndCapacity) {
  const auto layer = [](const Args& extra) {
    const json r = analyze_json(concat({"--model", "mixtral-8x7b", "--dp", "8", "--micro-batch", "1", "--seq-len", "4096",
                                        "--hidden-dropout", "0", "--attention-dropout", "0"},
                                       extra));
    return r.is_null() ? 0 : u64(r.at("stages")[0].at("recompute_transient"));
  };
  // ep 4: 2 experts per rank: permuted S + all-to-all R + fc2 output R + unsorted R.
  EXPECT_EQ(layer({"--ep", "4"}), 2ull * 4096 * (8192 + 3 * 8192));  // 268,435,456
  // ep 8: one expert per rank, no sort: permuted S + fc2 output R + the combine's returned S.
  EXPECT_EQ(layer({"--ep", "8"}), 2ull * 4096 * (2 * 8192 + 8192));  // 201,326,592
  // Capacity 0.5 caps R at 4096 < S: the combine's all-to-all, 2S + 2R, is the larger point.
  EXPECT_EQ(layer({"--ep", "4", "--moe-capacity-factor", "0.5"}), 2ull * 4096 * (2 * 8192 + 2 * 4096));
  // DeepEP: received min(tokens x ep, R) = min(4096 x 4, 8192) = 8192 rows, and fc2's output R.
  EXPECT_EQ(layer({"--ep", "4", "--moe-token-dispatcher", "deepep"}), 2ull * 4096 * (8192 + 8192));
}

}  // namespace
