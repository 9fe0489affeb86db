// Xiaomi MiMo-V2-Flash (model_type mimo_v2_flash, issue 14): full and sliding-window attention
// layers of different key/value head counts, value heads narrower than query/key heads, sink
// logits on the sliding-window layers, a dense first layer then 47 MoE layers, and MTP layers of
// their own. Read from a config.json under tests/data/configs (reconstructed; provenance in
// data/models/SOURCES.md). The count is checked against the hand arithmetic below and the
// published rounded figures; analysis runs under the megatron profile; keys the reader cannot
// honour are refused by name.
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

json flash_config() { return json::parse(text_of(config_path("mimo-v2-flash"))); }

std::uint64_t total_of(const json& c) { return build_inventory(parse_hf_config(c.dump(), "m.json")).total().value(); }

// MiMo-V2-Flash: h 4096, vocab 152576 untied, 48 layers. hybrid_layer_pattern: full attention
// (0) on layers 0, 5, 11, 17, 23, 29, 35, 41, 47 (9 layers), sliding-window (1) on the other 39.
// moe_layer_freq: layer 0 dense, layers 1..47 MoE.
// - Full attention: 64 heads and 4 KV heads of 192, values of 128. q_proj 64 x 192 x 4096 =
//   50,331,648; k_proj 4 x 192 x 4096 = 3,145,728; v_proj 4 x 128 x 4096 = 2,097,152; o_proj
//   4096 x 64 x 128 = 33,554,432; no sinks (add_full_attention_sink_bias false). 89,128,960.
// - Sliding window: 64 heads and 8 KV heads of 192, values of 128. q_proj 50,331,648; k_proj
//   8 x 192 x 4096 = 6,291,456; v_proj 8 x 128 x 4096 = 4,194,304; o_proj 33,554,432;
//   attention_sink_bias 64. 94,371,904.
// - Two RMSNorms per layer: 8,192.
// - Dense MLP (layer 0): 3 x 16384 x 4096 = 201,326,592.
// - MoE: gate 256 x 4096 = 1,048,576; e_score_correction_bias 256; experts 256 x 3 x 2048 x
//   4096 = 6,442,450,944. 6,443,499,776.
// Layer 0: 89,128,960 + 201,326,592 + 8,192 = 290,463,744.
// 8 full MoE layers: 8 x (89,128,960 + 6,443,499,776 + 8,192) = 8 x 6,532,636,928 = 52,261,095,424.
// 39 sliding MoE layers: 39 x (94,371,904 + 6,443,499,776 + 8,192) = 39 x 6,537,879,872 = 254,977,315,008.
// Embedding and lm_head 2 x 152576 x 4096 = 1,249,902,592; final norm 4,096.
// Total 308,778,780,864: the card's "309B total"; a public card for MiMo-V2.6-Flash-RL (the same
// 48-layer trunk) gives "approximately 308.78B" for the trunk and "302.80B" for the routed
// experts (47 x 6,442,450,944 = 302,795,194,368).
// Active: 8 of 256 experts: total - 47 x 248 x 25,165,824 = 15,445,936,320 (the card's "15B").
TEST(MimoV2Flash, CountMatchesTheHandArithmetic) {
  const ModelSpec m = load_model("mimo-v2-flash");
  EXPECT_EQ(m.model_type, "mimo_v2_flash");
  EXPECT_EQ(m.num_moe_layers(), 47);
  EXPECT_EQ(m.layer_kinds[0], LayerKind::dense);
  EXPECT_FALSE(m.swa_at(0));
  EXPECT_TRUE(m.swa_at(1));
  EXPECT_FALSE(m.swa_at(5));
  EXPECT_FALSE(m.swa_at(47));
  EXPECT_EQ(m.mtp_layers, 0);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.k_proj.weight").rows, 768);   // 4 x 192
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.v_proj.weight").rows, 512);   // 4 x 128
  EXPECT_EQ(tensor(inv, "layers.1.self_attn.k_proj.weight").rows, 1536);  // 8 x 192
  EXPECT_EQ(tensor(inv, "layers.1.self_attn.v_proj.weight").rows, 1024);  // 8 x 128
  EXPECT_EQ(tensor(inv, "layers.1.self_attn.o_proj.weight").cols, 8192);  // 64 x 128
  EXPECT_EQ(tensor(inv, "layers.1.self_attn.attention_sink_bias").rows, 64);
  EXPECT_THROW((void)tensor(inv, "layers.5.self_attn.attention_sink_bias"), std::runtime_error);
  EXPECT_EQ(role_total(inv, Role::attn_sink), 39ull * 64);
  EXPECT_EQ(tensor(inv, "layers.1.mlp.gate.e_score_correction_bias").rows, 256);
  EXPECT_EQ(role_total(inv, Role::mlp_gate) + role_total(inv, Role::mlp_up) + role_total(inv, Role::mlp_down), 201326592u);
  // Attention module: 9 x 89,128,960 + 39 x 94,371,904 = 802,160,640 + 3,680,504,256.
  EXPECT_EQ(module_total(inv, Module::attention), 4482664896u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 302795194368u);
  EXPECT_EQ(module_total(inv, Module::router), 47ull * (1048576 + 256));
  EXPECT_EQ(module_total(inv, Module::shared_experts), 0u);
  EXPECT_EQ(inv.total().value(), 308778780864u);
  // Tensors: 3 outside the layers, 9 in layer 0, 776 per full MoE layer (2 norms, 4
  // projections, gate, bias, 3 x 256 experts), 777 per sliding one (and its sinks).
  EXPECT_EQ(tensor_count(inv), 3u + 9u + 8u * 776u + 39u * 777u);
  EXPECT_EQ(active_params(inv, m).value(), 15445936320u);
}

// The checkpoint also holds three MTP layers (model.mtp.layers.0-2; the card: "0.33B
// params/block"), which num_nextn_predict_layers (or --mtp) counts. Each: enorm, hnorm 4,096 each;
// eh_proj 4096 x 8192 = 33,554,432; input_layernorm and pre_mlp_layernorm 8,192; a sliding-window
// attention 94,371,904; a dense MLP 201,326,592; final_layernorm 4,096. 329,273,408 per layer,
// 987,820,224 for three: 309,766,601,088. No embedding or head copies.
TEST(MimoV2Flash, MtpLayersAreSlidingWindowAndDense) {
  json c = flash_config();
  c["num_nextn_predict_layers"] = 3;
  const ModelSpec m = parse_hf_config(c.dump(), "m.json");
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(inv.total().value(), 309766601088u);
  EXPECT_EQ(inv.checkpoint_total().value(), 309766601088u);
  EXPECT_EQ(module_total(inv, Module::mtp), 3ull * (4096 + 4096 + 33554432 + 4096));
  EXPECT_EQ(tensor(inv, "mtp.layers.2.eh_proj.weight").cols, 8192);
  EXPECT_EQ(tensor(inv, "mtp.layers.0.self_attn.k_proj.weight").rows, 1536);
  EXPECT_EQ(tensor(inv, "mtp.layers.0.self_attn.attention_sink_bias").rows, 64);
  EXPECT_EQ(tensor(inv, "mtp.layers.0.mlp.down_proj.weight").cols, 16384);
  EXPECT_EQ(tensor(inv, "mtp.layers.0.pre_mlp_layernorm.weight").rows, 4096);
  EXPECT_EQ(tensor(inv, "mtp.layers.1.final_layernorm.weight").rows, 4096);
  EXPECT_THROW((void)tensor(inv, "layers.48.embed_tokens.weight"), std::runtime_error);
  EXPECT_EQ(active_params(inv, m).value(), 15445936320u);  // MTP excluded
  const auto count = run_cli({"count", "--model", "mimo-v2-flash", "--mtp", "3"});
  EXPECT_EQ(count.code, 0) << count.err;
  EXPECT_NE(count.out.find("309,766,601,088"), std::string::npos) << count.out;
}

// add_full_attention_sink_bias puts sinks on the 9 full layers too (64 each); attention_bias puts
// biases on q, k and v (never o_proj): 9 x (12288 + 768 + 512) + 39 x (12288 + 1536 + 1024).
TEST(MimoV2Flash, SinkAndBiasKeysAddTheirTensors) {
  const std::uint64_t base = total_of(flash_config());
  json c = flash_config();
  c["add_full_attention_sink_bias"] = true;
  EXPECT_EQ(total_of(c), base + 9 * 64);
  c = flash_config();
  c["add_swa_attention_sink_bias"] = false;
  EXPECT_EQ(total_of(c), base - 39 * 64);
  c = flash_config();
  c["attention_bias"] = true;
  EXPECT_EQ(total_of(c), base + 9 * (12288 + 768 + 512) + 39 * (12288 + 1536 + 1024));
  // A second dense layer: 201,326,592 in place of 6,443,499,776.
  c = flash_config();
  c["moe_layer_freq"][1] = 0;
  EXPECT_EQ(total_of(c), base - 6443499776u + 201326592u);
}

TEST(MimoV2Flash, KeysItCannotHonourAreRefusedByName) {
  json c = flash_config();
  c["hybrid_layer_pattern"].erase(0);
  expect_error(c.dump(), "hybrid_layer_pattern");
  c = flash_config();
  c["hybrid_layer_pattern"][3] = 2;
  expect_error(c.dump(), "hybrid_layer_pattern[3]");
  c = flash_config();
  c["moe_layer_freq"] = 1;  // vLLM: no MoE layer; Megatron: every layer
  expect_error(c.dump(), "moe_layer_freq");
  c = flash_config();
  c["n_shared_experts"] = 1;
  expect_error(c.dump(), "n_shared_experts");
  c = flash_config();
  c["hybrid_block_size"] = 6;
  expect_error(c.dump(), "hybrid_block_size");
  c = flash_config();
  c["swa_num_key_value_heads"] = 7;
  expect_error(c.dump(), "swa_num_key_value_heads");
  c = flash_config();
  c.erase("v_head_dim");
  expect_error(c.dump(), "v_head_dim");
  c = flash_config();
  c.erase("swa_head_dim");
  expect_error(c.dump(), "swa_head_dim");
  c = flash_config();
  c["mlp_bias"] = true;
  expect_error(c.dump(), "mlp_bias");
  // Other families do not read the sliding-window sizes: a set value is refused.
  json llama = json::parse(text_of(config_path("llama-3.1-8b")));
  llama["swa_num_key_value_heads"] = 8;
  expect_error(llama.dump(), "swa_num_key_value_heads");
  llama.erase("swa_num_key_value_heads");
  llama["add_swa_attention_sink_bias"] = true;
  expect_error(llama.dump(), "add_swa_attention_sink_bias");
}

// A ModelSpec from a library caller is checked too: per-layer lists must have one entry per layer
// (the inventory indexes them by layer) and positive sizes.
TEST(MimoV2Flash, ValidateModelChecksThePerLayerLists) {
  ModelSpec m = load_model("mimo-v2-flash");
  m.swa_layers.pop_back();
  EXPECT_THROW(validate_model(m), InputError);
  m = load_model("mimo-v2-flash");
  m.swa.kv_heads = 0;
  EXPECT_THROW(validate_model(m), InputError);
  m = load_model("llama-3.3-nemotron-super-49b");
  m.nas_blocks[0].ffn_size = 0;
  EXPECT_THROW(validate_model(m), InputError);
  m = load_model("llama-3.3-nemotron-super-49b");
  m.nas_blocks.resize(79);
  EXPECT_THROW(validate_model(m), InputError);
  EXPECT_NO_THROW(validate_model(load_model("llama-3.3-nemotron-super-49b")));
}

// count and models work; analyze and search refuse the model up front, naming what is missing.
// Analysis under the megatron profile (the attention terms: tests/unit/test_mimo_activations.cpp).
TEST(MimoV2Flash, AnalysisAndCountWork) {
  const auto count = run_cli({"count", "--model", "XiaomiMiMo/MiMo-V2-Flash"});
  EXPECT_EQ(count.code, 0) << count.err;
  EXPECT_NE(count.out.find("308,778,780,864"), std::string::npos) << count.out;
  const auto models = run_cli({"models"});
  EXPECT_EQ(models.code, 0) << models.err;
  EXPECT_NE(models.out.find("mimo-v2-flash"), std::string::npos) << models.out;
  const auto a = run_cli({"analyze", "--model", "mimo-v2-flash", "--ep", "8", "--dp", "8"});
  EXPECT_EQ(a.code, 0) << a.err;
  const auto titan = run_cli({"analyze", "--model", "mimo-v2-flash", "--profile", "torchtitan", "--dp", "8"});
  EXPECT_EQ(titan.code, 2);
  EXPECT_NE(titan.err.find("per-layer key/value heads"), std::string::npos) << titan.err;
  const auto s = run_cli({"search", "--model", "mimo-v2-flash", "--gpus", "64", "--gpu", "h100-80g", "--global-batch", "64"});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("sliding-window"), std::string::npos) << s.err;
}

}  // namespace
