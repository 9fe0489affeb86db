// Orderings on every stage of the base configuration (issue 4), through `moemem analyze`:
// none >= selective >= full recomputation, flash < eager attention, FP8 < BF16 activations, and
// bf16 optimizer moments at two thirds of fp32's. Base configuration: activations_cli_helpers.hpp.
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
using moemem::test::activations_cli::dsv3;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::u64;
using moemem::test::activations_cli::i64;
using moemem::test::activations_cli::stage_bytes;
using moemem::test::activations_cli::kStage1Copies;

std::vector<std::uint64_t> activations(const json& report) {
  std::vector<std::uint64_t> out;
  for (const auto& s : report.at("stages")) out.push_back(u64(s.at("bytes").at("activations")));
  return out;
}

TEST(ActivationsCli, NoneAtLeastSelectiveAtLeastFullOnEveryStage) {
  const json none = analyze_json(dsv3({"--recompute", "none"}));
  ASSERT_FALSE(none.is_null());
  const auto n = activations(none);
  ASSERT_EQ(n.size(), 16u);
  for (const char* mod : {"core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe", "shared_experts"}) {
    SCOPED_TRACE(mod);
    const auto s = activations(analyze_json(dsv3({"--recompute", "selective", "--recompute-modules", mod})));
    ASSERT_EQ(s.size(), 16u);
    for (std::size_t p = 0; p < 16; ++p) {
      SCOPED_TRACE("stage " + std::to_string(p));
      EXPECT_GE(n[p], s[p]);
      // Every stage has MoE layers with norms, MLA, experts and attention: all but mlp free
      // something there; mlp only frees the dense MLP of stage 0.
      if (std::string(mod) != "mlp" || p == 0) EXPECT_GT(n[p], s[p]);
      else EXPECT_EQ(n[p], s[p]);
    }
  }
  const auto sel = activations(analyze_json(dsv3({"--recompute", "selective", "--recompute-modules", "layernorm,mla_up_proj,moe_act"})));
  const auto full = activations(analyze_json(dsv3({"--recompute", "full"})));
  ASSERT_EQ(sel.size(), 16u);
  ASSERT_EQ(full.size(), 16u);
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    EXPECT_GT(n[p], sel[p]);
    EXPECT_GE(sel[p], full[p]);
    EXPECT_GT(n[p], full[p]);
  }
}

TEST(ActivationsCli, FlashKeepsLessThanEagerOnEveryStageWithLayers) {
  const json flash = analyze_json(dsv3({"--attention", "flash"}));
  const json eager = analyze_json(dsv3({"--attention", "eager"}));
  ASSERT_FALSE(flash.is_null());
  ASSERT_FALSE(eager.is_null());
  EXPECT_EQ(flash.at("training").at("attention"), "flash");
  EXPECT_EQ(eager.at("training").at("attention"), "eager");
  // The megatron profile's default is flash.
  EXPECT_EQ(analyze_json(dsv3()).at("training").at("attention"), "flash");
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    ASSERT_GT(i64(flash.at("stages")[p].at("num_layers")), 0);
    EXPECT_LT(stage_bytes(flash, p, "activations"), stage_bytes(eager, p, "activations"));
  }
  // On stage 1 the difference is exactly the softmax output (bf16, b x heads/tp x s x s; Megatron's
  // unfused DotProductAttention saves it, not the scores) minus flash's fp32 log-sum-exp
  // (b x heads/tp x s), per layer and micro-batch. MLA has as many K/V heads as query heads, so
  // nothing is repeated.
  // Megatron's attention dropout (default 0.1) adds, under eager only, its one-byte mask and the
  // bf16 dropped-out probabilities that bmm saves: 3 more bytes per score element.
  const std::uint64_t heads = 128 / 2, s = 4096;
  const std::uint64_t per_layer = heads * s * s * 2 - heads * s * 4;
  const json eager_no_dropout = analyze_json(dsv3({"--attention", "eager", "--attention-dropout", "0"}));
  // Plus, while one layer computes, its raw scores (baddbmm's new output, read by the softmax).
  EXPECT_EQ(stage_bytes(eager_no_dropout, 1, "activations") - stage_bytes(flash, 1, "activations"),
            per_layer * kStage1Copies + heads * s * s * 2);
  EXPECT_EQ(stage_bytes(eager, 1, "activations") - stage_bytes(eager_no_dropout, 1, "activations"),
            heads * s * s * 3 * kStage1Copies);
}

TEST(ActivationsCli, Fp8KeepsLessThanBf16OnEveryStage) {
  const auto bf16 = activations(analyze_json(dsv3()));
  ASSERT_EQ(bf16.size(), 16u);
  for (const char* recipe : {"tensorwise", "delayed", "blockwise", "mxfp8"}) {
    SCOPED_TRACE(recipe);
    const json fp8 = analyze_json(dsv3({"--fp8", recipe}));
    ASSERT_FALSE(fp8.is_null());
    EXPECT_EQ(fp8.at("training").at("fp8"), recipe);
    const auto a = activations(fp8);
    ASSERT_EQ(a.size(), 16u);
    for (std::size_t p = 0; p < 16; ++p) EXPECT_LT(a[p], bf16[p]) << "stage " << p;
  }
}

TEST(ActivationsCli, Bf16MomentsAreTwoThirdsOfFp32OptimizerBytes) {
  const json fp32 = analyze_json(dsv3());
  const json bf16 = analyze_json(dsv3({"--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"}));
  ASSERT_FALSE(fp32.is_null());
  ASSERT_FALSE(bf16.is_null());
  EXPECT_EQ(fp32.at("training").at("dtypes").at("exp_avg"), "fp32");
  EXPECT_EQ(bf16.at("training").at("dtypes").at("exp_avg"), "bf16");
  EXPECT_EQ(bf16.at("training").at("dtypes").at("exp_avg_sq"), "bf16");
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    const std::uint64_t a = stage_bytes(fp32, p, "optimizer"), b = stage_bytes(bf16, p, "optimizer");
    EXPECT_LT(b, a);
    // master fp32 4 + moments 2 + 2 = 8 bytes against 4 + 4 + 4 = 12 per sharded element.
    EXPECT_EQ(b * 3, a * 2);
    // Nothing else moves but the allocator's share.
    for (const char* f : {"weights", "gradients", "activations", "runtime"}) {
      EXPECT_EQ(stage_bytes(fp32, p, f), stage_bytes(bf16, p, f)) << f;
    }
  }
  // --main-grads-dtype bf16 halves the main gradients.
  const json g = analyze_json(dsv3({"--main-grads-dtype", "bf16"}));
  for (std::size_t p = 0; p < 16; ++p) EXPECT_EQ(stage_bytes(g, p, "gradients") * 2, stage_bytes(fp32, p, "gradients"));
}

}  // namespace
