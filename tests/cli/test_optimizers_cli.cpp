// --optimizer (issue 15): each optimizer's states on top of the fp32 master weights, counted by
// hand for Llama-3.1-8B (8,030,261,248 parameters) on one GPU, and with Megatron's distributed
// optimizer sharding them as before. adam8bit and adafactor are not Megatron-Core optimizers and
// are refused; their states are checked through the library.
#include <cstdint>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "moemem/optimizer.hpp"

namespace {

using nlohmann::json;
using moemem::test::Args;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::ceil_div;
using moemem::test::activations_cli::concat;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::u64;

constexpr std::uint64_t kN = 8030261248;
// Muon's matrices: all 2-D but embedding and lm_head (2 x 128256 x 4096 = 1,050,673,152) and
// the norms (65 x 4096 = 266,240): 6,979,321,856.
constexpr std::uint64_t kMatrices = kN - 2 * 128256u * 4096 - 65 * 4096u;
static_assert(kMatrices == 6979321856);

std::uint64_t optimizer_bytes(const Args& extra) {
  const json r = analyze_json(concat({"--model", "llama-3.1-8b"}, extra));
  return r.is_null() ? 0 : u64(r.at("stages").at(0).at("bytes").at("optimizer"));
}

TEST(OptimizersCli, AdamwIsTheDefault) {
  EXPECT_EQ(optimizer_bytes({}), 12 * kN);
  EXPECT_EQ(optimizer_bytes({"--optimizer", "adamw"}), 12 * kN);
}

TEST(OptimizersCli, SgdKeepsAMomentumBufferUnlessItsMomentumIsZero) {
  EXPECT_EQ(optimizer_bytes({"--optimizer", "sgd"}), 8 * kN);  // master + fp32 momentum (0.9)
  EXPECT_EQ(optimizer_bytes({"--optimizer", "sgd", "--sgd-momentum", "0"}), 4 * kN);
}

TEST(OptimizersCli, LionKeepsOneMomentum) { EXPECT_EQ(optimizer_bytes({"--optimizer", "lion"}), 8 * kN); }

TEST(OptimizersCli, MuonKeepsAMomentumPerMatrixAndAdamForTheRest) {
  EXPECT_EQ(optimizer_bytes({"--optimizer", "muon"}), 4 * kN + 4 * kMatrices + 8 * (kN - kMatrices));
}

TEST(OptimizersCli, DistributedOptimizerShardsTheStates) {
  EXPECT_EQ(optimizer_bytes({"--optimizer", "lion", "--dp", "8", "--distributed-optimizer"}), 8 * ceil_div(kN, 8));
}

TEST(OptimizersCli, OptimizersMegatronLacksAreRefused) {
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--optimizer", "adam8bit"}, {"--optimizer", "adam8bit", "megatron"});
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--optimizer", "adafactor"}, {"--optimizer", "adafactor"});
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--optimizer", "muon", "--profile", "torchtitan"}, {"--optimizer", "torchtitan"});
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--optimizer", "adagrad"}, {"--optimizer", "adagrad"});
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--sgd-momentum", "0"}, {"--sgd-momentum", "--optimizer sgd"});
  expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--optimizer", "lion", "--optimizer-cpu-offload"},
                {"--optimizer-cpu-offload", "adamw"});
}

TEST(OptimizersLibrary, Adam8bitKeepsByteStatesAndBlockScales) {
  moemem::OptimizerCounts n;
  n.params = moemem::Count(1'000'000 + 100);  // one 1,000,000-element tensor and a 100-element one
  n.blocks = moemem::Count(3907);             // ceil(1,000,000 / 256)
  n.small = moemem::Count(100);               // below min_8bit_size: fp32 states
  moemem::FinetuneSettings f;
  f.optimizer = moemem::OptimizerKind::adam8bit;
  // master 4 x 1,000,100 + 2 x 1 x 1,000,000 + 2 x 4 x 3907 + 2 x 4 x 100
  EXPECT_EQ(moemem::optimizer_bytes(f, moemem::PrecisionRecipe{}, n).value(), 4000400u + 2000000 + 31256 + 800);
}

TEST(OptimizersLibrary, AdafactorKeepsTheFactoredSecondMomentOnly) {
  moemem::OptimizerCounts n;
  n.params = moemem::Count(4096u * 14336 + 4096);  // a 4096 x 14336 matrix and a 4096 norm
  n.factors = moemem::Count(4096 + 14336 + 4096);  // row + column vectors, the norm unfactored
  moemem::FinetuneSettings f;
  f.optimizer = moemem::OptimizerKind::adafactor;
  EXPECT_EQ(moemem::optimizer_bytes(f, moemem::PrecisionRecipe{}, n).value(), 4 * (4096u * 14336 + 4096) + 4 * (4096 + 14336 + 4096));
}

}  // namespace
