// FP8 training through `moemem explain` and `analyze` (issue 4): the cached FP8 tensors and
// their scales under blockwise, MXFP8 and tensorwise recipes, none under BF16, and the FP8 weight
// copies. Base configuration: activations_cli_helpers.hpp.
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
using moemem::test::activations_cli::dsv3;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::u64;
using moemem::test::activations_cli::items_of;
using moemem::test::activations_cli::saved_tensors;
using moemem::test::activations_cli::ceil_div;
using moemem::test::activations_cli::kHidden;
using moemem::test::activations_cli::kTokensSp;
using moemem::test::activations_cli::kRouted;
using moemem::test::activations_cli::kStage1Copies;

TEST(Fp8Cli, BlockwiseCachesDispatchedTokensInFp8WithOneFp32ScalePer128) {
  const json e = explain_json(dsv3({"--fp8", "blockwise"}), 1);
  ASSERT_FALSE(e.is_null());
  const auto a = saved_tensors(e);
  const std::uint64_t rh = kRouted * kHidden;
  ASSERT_TRUE(a.contains("experts.fc1_input (dispatched tokens)"));
  ASSERT_TRUE(a.contains("experts.fc1_input.scales"));
  EXPECT_EQ(a.at("experts.fc1_input (dispatched tokens)"), rh * 1 * kStage1Copies);
  EXPECT_EQ(a.at("experts.fc1_input.scales"), ceil_div(rh, 128) * 4 * kStage1Copies);
  // The fc2 input too (R x ffn 2048), and the attention's linear inputs.
  EXPECT_EQ(a.at("experts.act_output (fc2 input)"), kRouted * 2048 * 1 * kStage1Copies);
  EXPECT_EQ(a.at("experts.act_output.scales"), ceil_div(kRouted * 2048, 128) * 4 * kStage1Copies);
  EXPECT_FALSE(a.contains("experts.fc2_output (unpermute input)"));  // probabilities applied in the activation
  EXPECT_EQ(a.at("attn.norm_output (q/kv input)"), kTokensSp * kHidden * kStage1Copies);
  EXPECT_EQ(a.at("attn.norm_output.scales"), ceil_div(kTokensSp * kHidden, 128) * 4 * kStage1Copies);
}

TEST(Fp8Cli, Mxfp8KeepsOneE8m0BytePer32) {
  const json e = explain_json(dsv3({"--fp8", "mxfp8"}), 1);
  ASSERT_FALSE(e.is_null());
  const auto a = saved_tensors(e);
  const std::uint64_t rh = kRouted * kHidden;
  EXPECT_EQ(a.at("experts.fc1_input (dispatched tokens)"), rh * kStage1Copies);
  EXPECT_EQ(a.at("experts.fc1_input.scales"), ceil_div(rh, 32) * 1 * kStage1Copies);
}

TEST(Fp8Cli, TensorwiseKeepsOneFp32ScalePerTensor) {
  const json e = explain_json(dsv3({"--fp8", "tensorwise"}), 1);
  ASSERT_FALSE(e.is_null());
  const auto a = saved_tensors(e);
  EXPECT_EQ(a.at("experts.fc1_input (dispatched tokens)"), kRouted * kHidden * kStage1Copies);
  EXPECT_EQ(a.at("experts.fc1_input.scales"), 4 * kStage1Copies);
}

TEST(Fp8Cli, Bf16HasNoScalesAndNoWeightCopies) {
  const json e = explain_json(dsv3(), 1);
  ASSERT_FALSE(e.is_null());
  for (const auto& [name, bytes] : saved_tensors(e)) EXPECT_FALSE(name.ends_with(".scales")) << name;
  EXPECT_FALSE(items_of(e, "weights").contains("FP8 weight copies"));
  EXPECT_EQ(saved_tensors(e).at("experts.fc1_input (dispatched tokens)"), kRouted * kHidden * 2 * kStage1Copies);
  EXPECT_EQ(u64(analyze_json(dsv3()).at("stages")[1].at("fp8_weight_copies")), 0u);
}

TEST(Fp8Cli, WeightCopiesAreTwoFp8BytesPerGemmParameterPlusScales) {
  for (const char* recipe : {"blockwise", "mxfp8"}) {
    SCOPED_TRACE(recipe);
    const Args args = dsv3({"--fp8", recipe});
    const json e = explain_json(args, 1);
    const json r = analyze_json(args);
    ASSERT_FALSE(e.is_null());
    ASSERT_FALSE(r.is_null());
    // FP8-GEMM parameters of stage 1: every decoder linear layer (attention projections, routed
    // and shared experts), not norms nor router, read from the bf16 weight items (2 bytes each).
    std::uint64_t gemm_bytes = 0;
    bool copies_seen = false;
    for (const auto& i : e.at("items")) {
      if (i.at("category") != "weights") continue;
      const auto mod = i.at("module").get<std::string>();
      if (i.at("item") == "FP8 weight copies") {
        copies_seen = true;
        EXPECT_EQ(mod, "fp8");
        continue;
      }
      if (mod == "attention" || mod == "routed_experts" || mod == "shared_experts") gemm_bytes += u64(i.at("bytes"));
    }
    ASSERT_TRUE(copies_seen);
    ASSERT_EQ(gemm_bytes % 2, 0u);
    const std::uint64_t copies = 2 * (gemm_bytes / 2);  // row- and column-wise, 1 byte each
    const std::uint64_t scales = std::string(recipe) == "blockwise" ? ceil_div(copies, 128 * 128) * 4 : ceil_div(copies, 32);
    EXPECT_EQ(items_of(e, "weights").at("FP8 weight copies"), copies + scales);
    EXPECT_EQ(u64(r.at("stages")[1].at("fp8_weight_copies")), copies + scales);
  }
}

}  // namespace
