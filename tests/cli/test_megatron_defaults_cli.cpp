// Megatron-LM's defaults for what a launch script leaves out (megatron/training/arguments.py
// validate_args and argparse defaults; TransformerConfig), restated by hand:
// - --ffn-hidden-size: 4h, or under --swiglu int((4h x 2/3) / 64) x 64 (h 2048: 5440);
// - --seq-length: --encoder-seq-length's when only that is given;
// - --global-batch-size: --micro-batch-size x dp, one micro-batch per step;
// - --num-query-groups 1 under --group-query-attention; --moe-router-topk 2;
// - MLA: --kv-lora-rank 32, --qk-head-dim 128, --qk-pos-emb-head-dim 64, --v-head-dim 128;
// - --transformer-impl local: DotProductAttention, the unfused path.
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::run_cli;

std::string script(const std::string& name, const std::string& flags) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream f(path);
  f << "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 2048 --num-attention-heads 16 "
       "--disable-bias-linear --normalization RMSNorm --position-embedding-type rope --vocab-size 32000 "
       "--untie-embeddings-and-output-weights --micro-batch-size 1 --bf16 "
    << flags << "\n";
  return path;
}

nlohmann::json json_of(const std::vector<std::string>& args) {
  const auto r = run_cli(args);
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

std::string shape_of(const nlohmann::json& count, const std::string& tensor, const std::string& part = "-") {
  for (const auto& row : count.at("rows")) {
    if (row.at("tensor") == tensor && row.at("part") == part) return row.at("shape").get<std::string>();
  }
  return "";
}

TEST(MegatronDefaults, SwigluWithoutFfnSizeIsTwoThirdsOfFourH) {
  const auto c = json_of({"count", "--megatron-args", script("swiglu.sh", "--swiglu --seq-length 4096 --global-batch-size 8"),
                          "--by", "tensor", "--format", "json"});
  EXPECT_EQ(shape_of(c, "layers.0.mlp.gate_proj.weight"), "5440x2048");
  const auto g = json_of({"count", "--megatron-args", script("gelu.sh", "--seq-length 4096 --global-batch-size 8"), "--by",
                          "tensor", "--format", "json"});
  EXPECT_EQ(shape_of(g, "layers.0.mlp.fc1.weight"), "8192x2048");
}

TEST(MegatronDefaults, AttentionAndRouterDefaults) {
  const auto gqa = json_of({"count", "--megatron-args", script("gqa.sh", "--swiglu --group-query-attention --seq-length 4096"),
                            "--by", "tensor", "--format", "json"});
  EXPECT_EQ(shape_of(gqa, "layers.0.self_attn.k_proj.weight"), "128x2048");  // one group of head_dim 128
  const auto mla = json_of({"count", "--megatron-args", script("mla.sh", "--swiglu --multi-latent-attention --seq-length 4096"),
                            "--by", "tensor", "--format", "json"});
  // kv_lora 32, rope 64, 16 heads x 128 for K's non-RoPE part and for V.
  EXPECT_EQ(shape_of(mla, "layers.0.self_attn.kv_a_proj_with_mqa.weight", "kv_latent"), "32x2048");
  EXPECT_EQ(shape_of(mla, "layers.0.self_attn.kv_a_proj_with_mqa.weight", "k_rope"), "64x2048");
  EXPECT_EQ(shape_of(mla, "layers.0.self_attn.kv_b_proj.weight", "k_nope"), "2048x32");
  EXPECT_EQ(shape_of(mla, "layers.0.self_attn.kv_b_proj.weight", "v"), "2048x32");
  // Top-2 of 8 experts (each 3 x 5440 x 2048): 6 idle per layer, over 4 layers.
  const auto moe = json_of({"count", "--megatron-args",
                            script("moe.sh", "--swiglu --num-experts 8 --expert-model-parallel-size 8 --seq-length 4096"),
                            "--format", "json"});
  ASSERT_FALSE(moe.is_null());
  std::int64_t total = 0;
  for (const auto& row : moe.at("rows")) total += row.at("params").get<std::int64_t>();
  EXPECT_EQ(total - moe.at("active_params").get<std::int64_t>(), 6LL * 4 * 3 * 5440 * 2048);
}

TEST(MegatronDefaults, LengthAndBatchFollowMegatron) {
  const auto a = json_of({"analyze", "--megatron-args", script("enc.sh", "--swiglu --encoder-seq-length 16384"), "--format", "json"});
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(a.at("training").at("seq_len"), 16384);
  // 8 GPUs at tp 1: dp 8, so the global batch is 8 and each rank runs one micro-batch per step.
  EXPECT_EQ(a.at("training").at("global_batch"), 8);
  EXPECT_EQ(a.at("training").at("microbatches_per_step"), 1);
  const auto given = json_of({"analyze", "--megatron-args", script("gbs.sh", "--swiglu --seq-length 4096"), "--global-batch",
                              "64", "--format", "json"});
  EXPECT_EQ(given.at("training").at("microbatches_per_step"), 8);
}

TEST(MegatronDefaults, LocalTransformerImplIsUnfusedAttention) {
  const auto a = json_of({"analyze", "--megatron-args", script("local.sh", "--swiglu --seq-length 4096 --transformer-impl local"),
                          "--format", "json"});
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(a.at("training").at("attention"), "eager");
  const auto r = run_cli({"analyze", "--megatron-args", script("bad.sh", "--swiglu --seq-length 4096 --transformer-impl tensorrt")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--transformer-impl"), std::string::npos) << r.err;
}

}  // namespace
