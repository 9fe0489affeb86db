// Qwen3-Next (model_type qwen3_next, issue 14): Gated DeltaNet linear-attention layers and gated
// softmax-attention layers, each with Qwen2-MoE's sparse block, read from a config.json under
// tests/data/configs (provenance: data/models/SOURCES.md). The count is exact against the
// published total; analysis runs under the megatron profile; the keys the reader cannot honour are refused by name.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"
#include "moemem/config.hpp"
#include "moemem/inventory.hpp"
#include "unit/inventory_helpers.hpp"

namespace {

using namespace moemem;
using namespace moemem::test;
using nlohmann::json;

json next_config() { return json::parse(text_of(config_path("qwen3-next-80b-a3b"))); }

// Qwen3-Next-80B-A3B: h 2048, 48 layers (every fourth full attention, from
// full_attention_interval 4: layers 3, 7, ..., 47), vocab 151936 untied, all layers MoE with 512
// experts of 512 (top 10) and a shared expert of 512 with its gate.
// - Gated DeltaNet layer: key_dim 16 x 128 = 2048, value_dim 32 x 128 = 4096;
//   in_proj_qkvz (2 x 2048 + 2 x 4096) x 2048 = 25,165,824; in_proj_ba 64 x 2048 = 131,072;
//   conv1d (2 x 2048 + 4096) x 4 = 32,768; dt_bias 32, A_log 32; norm 128;
//   out_proj 2048 x 4096 = 8,388,608. Sum 33,718,464, x 36 layers = 1,213,864,704.
// - Attention layer: q_proj 2 x 16 x 256 x 2048 = 16,777,216 (query and gate); k_proj and v_proj
//   2 x 256 x 2048 = 1,048,576 each; o_proj 2048 x 4096 = 8,388,608; q_norm, k_norm 256 each.
//   Sum 27,263,488, x 12 layers = 327,161,856.
// - MoE block: router 512 x 2048 = 1,048,576; experts 512 x 3 x 512 x 2048 = 1,610,612,736;
//   shared expert 3 x 512 x 2048 = 3,145,728; shared_expert_gate 2048. Sum 1,614,809,088.
// - Two RMSNorms per layer, 4,096. Layers: 1,213,864,704 + 327,161,856 + 48 x 1,614,813,184 =
//   79,052,059,392; embedding and lm_head 2 x 151936 x 2048 = 622,329,856; final norm 2048.
// Without the MTP block, 79,674,391,296: Qwen3-Coder-Next's published total (the same config,
// no mtp.* in its checkpoint; SOURCES.md), the model transformers builds. The Instruct and
// Thinking checkpoints (the preset's) store one MTP layer: mtp.fc 2048 x 4096 = 8,388,608,
// mtp.pre_fc_norm_embedding/_hidden and mtp.norm 3 x 2048, one full-attention MoE layer
// 27,263,488 + 1,614,809,088 + 4,096: 1,650,471,424, and 81,324,862,720 in all, the Hub's
// safetensors total for both (SOURCES.md).
TEST(Qwen3Next, CountIsExactAgainstThePublishedTotal) {
  const ModelSpec m = load_model("qwen3-next-80b-a3b");
  EXPECT_EQ(m.model_type, "qwen3_next");
  EXPECT_TRUE(m.is_hybrid());
  EXPECT_EQ(m.num_moe_layers(), 48);
  EXPECT_EQ(m.mixer_at(2), MixerKind::gated_delta_net);
  EXPECT_EQ(m.mixer_at(3), MixerKind::attention);
  EXPECT_EQ(m.mixer_at(47), MixerKind::attention);
  EXPECT_EQ(m.mtp_layers, 1);
  EXPECT_EQ(build_inventory(m).total().value(), 81324862720u);
  json coder = next_config();
  coder.erase("mtp_num_hidden_layers");
  const ModelSpec no_mtp = parse_hf_config(coder.dump(), "coder-next.json");
  EXPECT_EQ(no_mtp.mtp_layers, 0);
  const Inventory inv = build_inventory(no_mtp);
  EXPECT_EQ(tensor(inv, "layers.0.linear_attn.in_proj_qkvz.weight").rows, 12288);
  EXPECT_EQ(tensor(inv, "layers.0.linear_attn.conv1d.weight").params().value(), 32768u);
  EXPECT_EQ(tensor(inv, "layers.0.linear_attn.out_proj.weight").cols, 4096);
  EXPECT_THROW((void)tensor(inv, "layers.0.self_attn.q_proj.weight"), std::runtime_error);  // a linear layer
  EXPECT_THROW((void)tensor(inv, "layers.3.linear_attn.out_proj.weight"), std::runtime_error);
  EXPECT_EQ(role_total(inv, Role::q_proj) + role_total(inv, Role::q_gate), 12ull * 16777216);
  EXPECT_EQ(role_total(inv, Role::gdn_in_qkvz), 36ull * 25165824);
  EXPECT_EQ(role_total(inv, Role::gdn_dt_bias) + role_total(inv, Role::gdn_a_log), 36ull * 64);
  EXPECT_EQ(role_total(inv, Role::shared_expert_gate), 48ull * 2048);
  // Attention module: 36 x (33,718,464 - 128) + 12 x (27,263,488 - 512) = 1,213,860,096 + 327,155,712.
  EXPECT_EQ(module_total(inv, Module::attention), 1541015808u);
  // Norms: 48 x 4096 + 36 x 128 (gated norms) + 12 x 512 (q/k norms) = 196,608 + 4,608 + 6,144.
  EXPECT_EQ(module_total(inv, Module::norms), 207360u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 48ull * 1610612736);
  EXPECT_EQ(module_total(inv, Module::shared_experts), 48ull * (3145728 + 2048));
  EXPECT_EQ(module_total(inv, Module::router), 48ull * 1048576);
  EXPECT_EQ(inv.total().value(), 79674391296u);
  // Active: 10 of 512 experts: 79,674,391,296 - 48 x 502 x 3,145,728 = 3,874,929,408 ("A3B").
  EXPECT_EQ(active_params(inv, no_mtp).value(), 3874929408u);
  // Without num_key_value_heads and head_dim, Qwen3NextConfig's defaults (2 and 256, the 80B's
  // own) apply, not heads and hidden / heads: the same total.
  json bare = coder;
  bare.erase("num_key_value_heads");
  bare.erase("head_dim");
  EXPECT_EQ(build_inventory(parse_hf_config(bare.dump(), "n.json")).total().value(), 79674391296u);
}

// An explicit layer_types list is read as given (transformers 5 writes it), and must agree in
// length and kinds; without it full_attention_interval sets the pattern.
TEST(Qwen3Next, LayerTypesAndIntervalAgree) {
  json c = next_config();
  const std::uint64_t total = build_inventory(parse_hf_config(c.dump(), "n.json")).total().value();
  json listed = c;
  listed.erase("full_attention_interval");
  listed["layer_types"] = json::array();
  for (int i = 0; i < 48; ++i) listed["layer_types"].push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  EXPECT_EQ(build_inventory(parse_hf_config(listed.dump(), "n.json")).total().value(), total);
  // Every second layer full attention: 24 x (27,263,488 - 33,718,464) fewer parameters.
  json halves = c;
  halves["full_attention_interval"] = 2;
  EXPECT_EQ(build_inventory(parse_hf_config(halves.dump(), "n.json")).total().value(), total - 12ull * (33718464 - 27263488));
  json bad = listed;
  bad["layer_types"][5] = "sliding_attention";
  expect_error(bad.dump(), "layer_types[5]");
  bad = listed;
  bad["layer_types"].erase(0);
  expect_error(bad.dump(), "layer_types");
}

TEST(Qwen3Next, KeysItCannotHonourAreRefusedByName) {
  json c = next_config();
  c["attention_bias"] = true;
  expect_error(c.dump(), "attention_bias");
  c = next_config();
  c["linear_num_value_heads"] = 24;  // not a multiple of 16 key heads
  expect_error(c.dump(), "linear_num_value_heads");
  c = next_config();
  c["num_nextn_predict_layers"] = 1;  // an MTP block moemem does not build for this type
  expect_error(c.dump(), "num_nextn_predict_layers");
  c = next_config();
  c["mlp_only_layers"] = json::array({48});
  expect_error(c.dump(), "mlp_only_layers");
}

// A dense layer from mlp_only_layers takes intermediate_size 5120 instead of the sparse block:
// 3 x 5120 x 2048 = 31,457,280 in place of 1,614,809,088.
TEST(Qwen3Next, MlpOnlyLayersAreDense) {
  json c = next_config();
  const std::uint64_t total = build_inventory(parse_hf_config(c.dump(), "n.json")).total().value();
  c["mlp_only_layers"] = json::array({0});
  const ModelSpec m = parse_hf_config(c.dump(), "n.json");
  EXPECT_EQ(m.num_moe_layers(), 47);
  EXPECT_EQ(build_inventory(m).total().value(), total - 1614809088u + 31457280u);
}

// count works; analyze and search refuse the model up front, naming what is missing.
// Analysis under the megatron profile (the terms: tests/unit/test_gdn_activations.cpp); a timed
// search is refused by name (the step-time model does not time the Gated DeltaNet).
TEST(Qwen3Next, AnalysisAndCountWork) {
  const auto count = run_cli({"count", "--model", "qwen3-next-80b-a3b"});
  EXPECT_EQ(count.code, 0) << count.err;
  EXPECT_NE(count.out.find("81,324,862,720"), std::string::npos) << count.out;
  // --mtp 0 leaves the block out (Qwen3-Coder-Next's checkpoint); more than one is refused.
  EXPECT_NE(run_cli({"count", "--model", "qwen3-next-80b-a3b", "--mtp", "0"}).out.find("79,674,391,296"), std::string::npos);
  EXPECT_EQ(run_cli({"count", "--model", "qwen3-next-80b-a3b", "--mtp", "2"}).code, 2);
  const auto a = run_cli({"analyze", "--model", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--ep", "8", "--dp", "8"});
  EXPECT_EQ(a.code, 0) << a.err;
  const auto s = run_cli({"search", "--model", "qwen3-next-80b-a3b", "--gpus", "16", "--gpu", "h100-80g", "--global-batch", "64"});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("Gated DeltaNet"), std::string::npos) << s.err;
}

}  // namespace
