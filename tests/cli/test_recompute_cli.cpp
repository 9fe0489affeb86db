// Selective recomputation through `moemem explain` (issue 4): each recompute module changes
// exactly the tensors it names (explain of a MoE stage, selective X against none; the
// recomputation transient ignored); modules combine as a union; bad module lists exit 2.
// Base configuration: activations_cli_helpers.hpp.
// Expected values are derived by hand from the rules (the issue, docs/formulas.md,
// Megatron-Core) and from relations between runs, never copied from moemem's output.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"

namespace {

using nlohmann::json;
using moemem::test::activations_cli::Args;
using moemem::test::activations_cli::concat;
using moemem::test::activations_cli::dsv3;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::items_of;
using moemem::test::activations_cli::saved_tensors;
using moemem::test::activations_cli::expect_exit_2;

using Names = std::set<std::string>;

// Names whose bytes differ between the two runs; every one must shrink or disappear, and no item
// may appear that the run without recomputation lacks.
Names changed_items(const std::map<std::string, std::uint64_t>& none, const std::map<std::string, std::uint64_t>& sel) {
  Names out;
  for (const auto& [name, bytes] : none) {
    const auto it = sel.find(name);
    const std::uint64_t now = it == sel.end() ? 0 : it->second;
    if (now != bytes) {
      out.insert(name);
      EXPECT_LT(now, bytes) << name << " grew under recomputation";
    }
  }
  for (const auto& [name, bytes] : sel) {
    EXPECT_TRUE(none.contains(name)) << name << " appears only under recomputation";
  }
  return out;
}

Names changed_by(const std::string& modules, std::int64_t stage, const Args& extra = {}) {
  SCOPED_TRACE("--recompute-modules " + modules + " on stage " + std::to_string(stage));
  const json none = explain_json(dsv3(concat({"--recompute", "none"}, extra)), stage);
  const json sel = explain_json(dsv3(concat({"--recompute", "selective", "--recompute-modules", modules}, extra)), stage);
  if (none.is_null() || sel.is_null()) return {"<run failed>"};
  // Recomputation frees activations only: weights, gradients and optimizer states are unchanged.
  for (const char* cat : {"weights", "gradients", "optimizer", "runtime"}) {
    EXPECT_EQ(items_of(none, cat), items_of(sel, cat)) << cat;
  }
  return changed_items(saved_tensors(none), saved_tensors(sel));
}

TEST(RecomputeCli, LayernormFreesTheTwoNormOutputs) {
  EXPECT_EQ(changed_by("layernorm", 1), (Names{"attn.norm_output (q/kv input)", "mlp.norm_output (router input)"}));
  // Stage 0 (dense layers 0-2, MoE layer 3): the dense layers' pre-MLP norm is fused into fc1
  // (Transformer Engine's LayerNormLinear keeps its own ln_out), so layernorm skips it
  // (Megatron-LM transformer_layer.py wraps only non-IdentityOp norms).
  EXPECT_EQ(changed_by("layernorm", 0), (Names{"attn.norm_output (q/kv input)", "mlp.norm_output (router input)"}));
}

// q and k, not v: TE's fused attention keeps its own V when the head sizes differ (192 vs 128).
TEST(RecomputeCli, MlaUpProjFreesTheUpProjectionInputsAndQK) {
  EXPECT_EQ(changed_by("mla_up_proj", 1), (Names{"attn.q_compressed_norm (q_up input)", "attn.kv_compressed_norm (kv_up input)",
                                                 "attn.q", "attn.k"}));
}

TEST(RecomputeCli, MoeActFreesOnlyTheExpertActivationOutput) {
  EXPECT_EQ(changed_by("moe_act", 1), (Names{"experts.act_output (fc2 input)"}));
}

TEST(RecomputeCli, MoeFreesEveryRouterExpertAndSharedExpertTensor) {
  const json none = explain_json(dsv3({"--recompute", "none"}), 1);
  ASSERT_FALSE(none.is_null());
  Names expected;
  for (const auto& [name, bytes] : saved_tensors(none)) {
    if (name.starts_with("router.") || name.starts_with("experts.") || name.starts_with("shared.")) expected.insert(name);
  }
  // The MoE block's tensors as the megatron profile names them (docs/formulas.md): router scores
  // and map, four routed-expert tensors (fc1 input and output, activation output, probabilities),
  // two shared-expert tensors.
  EXPECT_EQ(expected.size(), 2u + 4u + 2u);
  EXPECT_EQ(changed_by("moe", 1), expected);
}

TEST(RecomputeCli, SharedExpertsFreesTheSharedMlpIntermediates) {
  EXPECT_EQ(changed_by("shared_experts", 1), (Names{"shared.fc1_output", "shared.act_output (fc2 input)"}));
}

TEST(RecomputeCli, CoreAttnFreesWhatTheKernelSavesBeyondItsInputs) {
  // Flash keeps the log-sum-exp; eager the softmax output (Megatron's DotProductAttention).
  EXPECT_EQ(changed_by("core_attn", 1), (Names{"attn.softmax_lse"}));
  EXPECT_EQ(changed_by("core_attn", 1, {"--attention", "eager", "--attention-dropout", "0"}), (Names{"attn.softmax"}));
  // With attention dropout (Megatron's default 0.1) also its mask and the dropped-out probabilities.
  EXPECT_EQ(changed_by("core_attn", 1, {"--attention", "eager"}),
            (Names{"attn.dropout_mask", "attn.dropout_output (bmm input)", "attn.softmax"}));
}

TEST(RecomputeCli, MlpFreesNothingOnAMoeStageAndTheDenseMlpOnStageZero) {
  EXPECT_EQ(changed_by("mlp", 1), Names{});
  // Stage 0 holds layers 0-3: three dense layers (first_k_dense_replace 3) and one MoE layer.
  // With the fused norm's output, which the checkpointed fc1 (LayerNormLinear) recomputes.
  EXPECT_EQ(changed_by("mlp", 0), (Names{"mlp.fc1_output", "mlp.act_output (fc2 input)", "mlp.norm_output (fc1 input)"}));
}

TEST(RecomputeCli, ModulesCombineAsTheUnionOfWhatEachFrees) {
  Names both = changed_by("layernorm", 1);
  for (const auto& n : changed_by("moe_act", 1)) both.insert(n);
  for (const auto& n : changed_by("mla_up_proj", 1)) both.insert(n);
  EXPECT_EQ(changed_by("layernorm,mla_up_proj,moe_act", 1), both);
}

TEST(RecomputeCli, UnknownModuleAndModulesWithFullExitTwo) {
  expect_exit_2(concat({"analyze"}, dsv3({"--recompute-modules", "layernorm,bogus"})), {"--recompute-modules", "bogus"});
  expect_exit_2(concat({"analyze"}, dsv3({"--recompute", "full", "--recompute-modules", "moe"})), {"--recompute-modules"});
  expect_exit_2(concat({"analyze"}, dsv3({"--recompute", "partial"})), {"--recompute", "partial"});
}

// A module of a layer kind the model lacks recomputes nothing (Megatron skips it too): the bytes
// are those of the list without it, and the report says so instead of implying a saving.
TEST(RecomputeCli, ModulesTheModelLacksAreNamedAndChangeNothing) {
  const Args llama = {"--model", "llama-3.1-8b", "--dp", "8", "--micro-batch", "1", "--seq-len", "4096"};
  const json with = moemem::test::activations_cli::analyze_json(concat(llama, {"--recompute-modules", "core_attn,moe_act,mla_up_proj"}));
  const json without = moemem::test::activations_cli::analyze_json(concat(llama, {"--recompute-modules", "core_attn"}));
  ASSERT_FALSE(with.is_null());
  ASSERT_FALSE(without.is_null());
  EXPECT_EQ(with.at("peak"), without.at("peak"));
  ASSERT_EQ(with.at("warnings").size(), 2u) << with.at("warnings").dump();
  EXPECT_NE(with.at("warnings")[0].get<std::string>().find("moe_act: llama-3.1-8b has no routed experts"), std::string::npos);
  EXPECT_NE(with.at("warnings")[1].get<std::string>().find("mla_up_proj"), std::string::npos);
  EXPECT_TRUE(!without.contains("warnings") || without.at("warnings").empty());
}

// --recompute-method and --recompute-num-layers belong to full recomputation: Megatron-Core asserts
// against a method with selective recomputation (arguments.py) and reads neither without
// recomputation, so moemem refuses them rather than dropping them.
TEST(RecomputeCli, MethodAndGroupSizeOnlyWithFullRecomputation) {
  expect_exit_2(concat({"analyze"}, dsv3({"--recompute-method", "block"})), {"--recompute-method", "block", "--recompute full", "none"});
  expect_exit_2(concat({"analyze"}, dsv3({"--recompute-num-layers", "2"})), {"--recompute-num-layers", "2", "--recompute full"});
  expect_exit_2(concat({"analyze"}, dsv3({"--recompute", "selective", "--recompute-method", "uniform"})),
                {"--recompute-method", "uniform", "selective"});
  expect_exit_2(concat({"analyze"}, dsv3({"--recompute-modules", "moe_act", "--recompute-num-layers", "1"})),
                {"--recompute-num-layers", "selective"});
  // With full recomputation both are read.
  EXPECT_FALSE(explain_json(dsv3({"--recompute", "full", "--recompute-method", "block", "--recompute-num-layers", "2"}), 1).is_null());
}

}  // namespace
