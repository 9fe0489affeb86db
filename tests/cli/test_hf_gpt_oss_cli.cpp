// --profile hf with model_type gpt_oss (issue 15: "the MoE models HF implements (..., gpt_oss)"):
// under transformers 4.x GptOss's training loop over experts indexes its 3-D expert parameters
// with a tensor, which copies each hit expert's weights, and each product saves its copy;
// transformers 5 indexes with an integer (views: nothing copied). Expected sizes by hand from gpt-oss-20b's
// config (24 layers, hidden 2880, 32 experts of intermediate 2880, top-4, 64 heads of 64), not
// from running moemem; the per-layer ledger (full and LoRA) is checked against autograd by check_hf.py.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "cli/run_cli.hpp"

namespace {

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::items_of;

Args gpt_oss(const Args& extra) {
  return concat({"--model", "gpt-oss-20b", "--profile", "hf", "--zero", "3", "--dp", "8", "--micro-batch", "1", "--seq-len",
                 "256", "--recompute", "none"},
                extra);
}

TEST(HfGptOss, ExpertLoopKeepsACopyOfEveryHitExpertsWeights) {
  // 256 tokens x top-4 = 1,024 rows reach all 32 experts: per layer 32 x (2880 x 5760 + 2880 x
  // 2880) bf16 = 32 x 49,766,400 B = 1,592,524,800 B; 24 layers 38,220,595,200 B (4.x).
  const auto a4 = items_of(explain_json(gpt_oss({"--transformers-version", "4"}), 0), "activations");
  EXPECT_EQ(a4.at("experts.weight_copies (gate_up_proj[e], down_proj[e])"), 38'220'595'200ull);
  // transformers 5, either experts implementation: no copies.
  for (const char* impl : {"eager", "grouped_mm"}) {
    EXPECT_EQ(items_of(explain_json(gpt_oss({"--experts-implementation", impl}), 0), "activations")
                  .count("experts.weight_copies (gate_up_proj[e], down_proj[e])"),
              0u)
        << impl;
  }
  const auto e = explain_json(gpt_oss({}), 0);
  const auto a = items_of(e, "activations");
  // Eager attention with sinks (the default for gpt_oss: HF's GptOss has no sdpa): the softmax in
  // bf16 over 257 columns, 64 x 256 x 257 x 2 = 8,421,376 B a layer, and its int64 row maxima
  // 64 x 256 x 8 = 131,072 B.
  EXPECT_EQ(a.at("attn.softmax (with the sink column)"), 24ull * 8'421'376);
  EXPECT_EQ(a.at("attn.max_indices"), 24ull * 131'072);
  EXPECT_EQ(analyze_json(gpt_oss({})).at("training").at("attention"), "eager");
}

TEST(HfGptOss, WhatTheModelDoesNotRunIsRefused) {
  expect_exit_2(concat({"analyze"}, gpt_oss({"--attention", "flash"})), {"--attention", "eager"});
  expect_exit_2(concat({"analyze"}, gpt_oss({"--attention", "sdpa"})), {"--attention", "eager"});
  expect_exit_2(concat({"analyze"}, gpt_oss({"--finetune", "qlora", "--lora-rank", "8"})), {"--finetune", "MXFP4"});
  // The experts are 3-D parameters, not modules PEFT's target_modules can name.
  expect_exit_2(concat({"analyze"}, gpt_oss({"--finetune", "lora", "--lora-rank", "8", "--lora-targets", "gate_up_proj"})),
                {"--lora-targets", "gate_up_proj"});
}

TEST(HfGptOss, LoraAllLinearAdaptsTheAttentionOnly) {
  // PEFT's all-linear finds gpt-oss's q/k/v/o nn.Linear modules only (the router and the experts
  // are not nn.Linear). r 16, per layer: q and o 16 x (2880 + 64 x 64) = 111,616 each, k and v
  // 16 x (2880 + 8 x 64) = 54,272 each: 331,776; 24 layers 7,962,624.
  const auto j = analyze_json(gpt_oss({"--finetune", "lora", "--lora-rank", "16"}));
  EXPECT_EQ(j.at("model").at("trainable_params"), 7'962'624);
  // The frozen experts' products still keep the weight copies (for the input's gradient, 4.x),
  // but not their inputs.
  const auto a = items_of(explain_json(gpt_oss({"--finetune", "lora", "--lora-rank", "16", "--transformers-version", "4"}), 0),
                          "activations");
  EXPECT_EQ(a.at("experts.weight_copies (gate_up_proj[e], down_proj[e])"), 38'220'595'200ull);
  EXPECT_EQ(a.count("experts.input (gathered)"), 0u);
  EXPECT_EQ(a.count("experts.down_input"), 0u);
}

TEST(HfGptOss, SearchTriesEveryDeepSpeedStage) {
  // gpt-oss-20b on 8 H100: its bf16 weights, fp32 master copy, gradients and moments (16 bytes a
  // parameter, 335 GB) fit only sharded, so the hf profile's search tries ZeRO 0-3 by default.
  const auto r = moemem::test::run_cli({"search", "--model", "gpt-oss-20b", "--profile", "hf", "--gpus", "8", "--gpu", "h100-80g",
                                        "--global-batch", "64", "--seq-len", "4096", "--threads", "2", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j.at("layouts").empty());
  for (const auto& l : j.at("layouts")) EXPECT_EQ(l.at("zero"), 3) << l.dump();
}

}  // namespace
