// Megatron-Core's optimizer CPU offload (--optimizer-cpu-offload, --optimizer-offload-fraction;
// megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py): the offloaded fraction of each
// rank's optimizer shard (fp32 master weights and moments) and a pinned fp32 copy of its
// gradients live in host memory; the GPU keeps the rest, its bf16 weights and its main gradients.
#include <cstdint>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"

namespace {

using nlohmann::json;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::ceil_div;
using moemem::test::activations_cli::concat;
using moemem::test::activations_cli::dsv3;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::i64;
using moemem::test::activations_cli::u64;

// Optimizer-shard elements of stage s: non-expert over dp*cp = 32, expert over edp; what trains
// (the routers' score-correction biases are buffers).
std::uint64_t shard(const json& r, std::size_t s, bool expert) {
  const auto& p = r.at("stages").at(s).at("params").at("trainable");
  if (!expert) return ceil_div(u64(p.at("non_expert")), 32);
  return ceil_div(u64(p.at("expert")), static_cast<std::uint64_t>(i64(r.at("parallel").at("edp"))));
}

TEST(OffloadCli, WholeOptimizerShardMovesToTheHost) {
  const json base = analyze_json(dsv3()), off = analyze_json(dsv3({"--optimizer-cpu-offload"}));
  ASSERT_FALSE(base.is_null());
  ASSERT_FALSE(off.is_null());
  for (std::size_t s = 0; s < 16; ++s) {
    SCOPED_TRACE(s);
    const auto& a = base.at("stages").at(s).at("bytes");
    const auto& b = off.at("stages").at(s).at("bytes");
    const std::uint64_t elements = shard(base, s, false) + shard(base, s, true);
    EXPECT_EQ(u64(a.at("optimizer")), 12 * elements);  // fp32 master, exp_avg, exp_avg_sq
    EXPECT_EQ(u64(b.at("optimizer")), 0u);
    EXPECT_EQ(u64(b.at("host")), 16 * elements);  // and the pinned fp32 gradient copy
    EXPECT_EQ(u64(b.at("weights")), u64(a.at("weights")));
    EXPECT_EQ(u64(b.at("gradients")), u64(a.at("gradients")));  // main gradients stay on the GPU
  }
}

TEST(OffloadCli, AFractionOffloadsThatShareRoundedDown) {
  const json base = analyze_json(dsv3()), off = analyze_json(dsv3({"--optimizer-cpu-offload", "--optimizer-offload-fraction", "0.25"}));
  ASSERT_FALSE(base.is_null());
  ASSERT_FALSE(off.is_null());
  const std::uint64_t ne = shard(base, 1, false) / 4, ex = shard(base, 1, true) / 4;  // floor(shard x 0.25)
  const auto& a = base.at("stages").at(1).at("bytes");
  const auto& b = off.at("stages").at(1).at("bytes");
  EXPECT_EQ(u64(a.at("optimizer")) - u64(b.at("optimizer")), 12 * (ne + ex));
  EXPECT_EQ(u64(b.at("host")), 16 * (ne + ex));
}

TEST(OffloadCli, BadOffloadInputsExitTwo) {
  expect_exit_2(concat({"analyze"}, dsv3({"--optimizer-offload-fraction", "0.5"})),
                {"--optimizer-offload-fraction", "--optimizer-cpu-offload"});
  expect_exit_2(concat({"analyze"}, dsv3({"--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.5"})),
                {"--optimizer-offload-fraction", "1.5"});
  expect_exit_2(concat({"analyze"}, dsv3({"--optimizer-cpu-offload", "--profile", "paper"})), {"--optimizer-cpu-offload", "megatron"});
}

}  // namespace
