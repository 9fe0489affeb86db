// Qwen3.5-MoE (model_type qwen3_5_moe, its text model qwen3_5_moe_text; issue 14): Qwen3-Next's
// Gated DeltaNet and gated-attention layers, every layer sparse, an MTP block, and the multimodal
// checkpoint's vision tower, read from config.json files under tests/data/configs (provenance:
// data/models/SOURCES.md). The totals are worked by hand below and equal the published
// safetensors totals; analysis runs under the megatron profile; keys the reader cannot honour are refused.
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

json config_json(const std::string& name) { return json::parse(text_of(config_path(name))); }

std::uint64_t count_of(const json& c) { return build_inventory(parse_hf_config(c.dump(), "q.json")).checkpoint_total().value(); }

// Qwen3.6-35B-A3B (the published config.json; Qwen3.5-35B-A3B has the same architecture and
// total): h 2048, 40 layers (layer_types: every fourth full attention, 3, 7, ..., 39), vocab
// 248320 untied, 256 experts of 512 (top 8) and a shared expert of 512 on every layer.
// - Gated DeltaNet layer: key_dim 16 x 128 = 2048, value_dim 32 x 128 = 4096; in_proj_qkv
//   (2 x 2048 + 4096) x 2048 = 16,777,216; in_proj_z 4096 x 2048 = 8,388,608; in_proj_b and
//   in_proj_a 32 x 2048 = 65,536 each; conv1d 8192 x 4 = 32,768; dt_bias, A_log 32 each; norm
//   128; out_proj 2048 x 4096 = 8,388,608. Sum 33,718,464; x 30 = 1,011,553,920.
// - Attention layer: q_proj 2 x 16 x 256 x 2048 = 16,777,216 (query and gate); k_proj, v_proj
//   2 x 256 x 2048 = 1,048,576 each; o_proj 2048 x 4096 = 8,388,608; q_norm, k_norm 256 each.
//   Sum 27,263,488; x 10 = 272,634,880.
// - Sparse block: router 256 x 2048 = 524,288; experts 256 x 3 x 512 x 2048 = 805,306,368;
//   shared expert 3 x 512 x 2048 = 3,145,728; shared_expert_gate 2048. Sum 808,978,432; with the
//   two layer norms (4,096) x 40 = 32,359,301,120.
// - Text: 1,011,553,920 + 272,634,880 + 32,359,301,120 + embedding and lm_head 2 x 248320 x 2048
//   (1,017,118,720) + final norm 2048 = 34,660,610,688.
// - Vision (depth 27, hidden 1152, intermediate 4304): patch_embed 1152 x (3 x 2 x 16 x 16) +
//   1152 = 1,770,624; pos_embed 2304 x 1152 = 2,654,208; a block: 4 x 1152 (norms) + 3456 x 1152 +
//   3456 (qkv) + 1152 x 1152 + 1152 (proj) + 4304 x 1152 + 4304 (fc1) + 1152 x 4304 + 1152 (fc2)
//   = 15,239,504, x 27 = 411,466,608; merger: norm 2 x 1152, fc1 4608 x 4608 + 4608, fc2
//   2048 x 4608 + 2048 = 30,679,808. Sum 446,571,248.
// - MTP: pre-fc norms 2 x 2048, fc 2048 x 4096 = 8,388,608, one attention sparse layer
//   27,263,488 + 808,978,432 + 4,096, mtp.norm 2048. Sum 844,640,768.
// Total 34,660,610,688 + 446,571,248 + 844,640,768 = 35,951,822,704: the Hub's safetensors total
// for Qwen/Qwen3.6-35B-A3B and Qwen/Qwen3.5-35B-A3B (BF16; 71,903,645,408 bytes = 2 x that).
TEST(Qwen3_5Moe, ThirtyFiveBCountIsTheSafetensorsTotal) {
  const ModelSpec m = load_model(config_path("qwen3.6-35b-a3b"));
  EXPECT_EQ(m.model_type, "qwen3_5_moe_text");
  EXPECT_TRUE(m.is_hybrid());
  EXPECT_TRUE(m.has_vision());
  EXPECT_EQ(m.num_moe_layers(), 40);
  EXPECT_EQ(m.mixer_at(2), MixerKind::gated_delta_net);
  EXPECT_EQ(m.mixer_at(39), MixerKind::attention);
  EXPECT_EQ(m.mtp_layers, 1);
  EXPECT_TRUE(m.unrecognised_keys.empty()) << m.unrecognised_keys.front();
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.linear_attn.in_proj_qkv.weight").rows, 8192);
  EXPECT_EQ(tensor(inv, "layers.0.linear_attn.in_proj_z.weight").rows, 4096);
  EXPECT_EQ(tensor(inv, "layers.0.linear_attn.in_proj_a.weight").rows, 32);
  EXPECT_THROW((void)tensor(inv, "layers.0.linear_attn.in_proj_qkvz.weight"), std::runtime_error);
  EXPECT_EQ(tensor(inv, "layers.3.mlp.experts.down_proj").copies, 256);
  EXPECT_EQ(tensor(inv, "mtp.fc.weight").cols, 4096);
  EXPECT_EQ(tensor(inv, "mtp.layers.0.self_attn.o_proj.weight").cols, 4096);
  EXPECT_EQ(tensor(inv, "visual.merger.linear_fc2.weight").rows, 2048);
  EXPECT_EQ(tensor(inv, "visual.blocks.26.attn.qkv.bias").rows, 3456);
  EXPECT_EQ(role_total(inv, Role::gdn_in_qkvz) + role_total(inv, Role::gdn_in_ba), 30ull * (16777216 + 8388608 + 131072));
  EXPECT_EQ(module_total(inv, Module::vision), 446571248u);
  // Module mtp: the pre-fc norms, fc and mtp.norm (2 x 2048 + 8,388,608 + 2048); the MTP layer's
  // own tensors count with attention and the experts. Everything placed on the MTP: 844,640,768.
  EXPECT_EQ(module_total(inv, Module::mtp), 8394752u);
  std::uint64_t on_mtp = 0;
  for (const auto& t : inv.tensors) on_mtp += t.placement == Placement::mtp ? t.params().value() : 0;
  EXPECT_EQ(on_mtp, 844640768u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 41ull * 805306368);  // 40 layers and the MTP layer
  EXPECT_EQ(inv.total().value(), inv.checkpoint_total().value());  // the MTP shares embedding and head
  EXPECT_EQ(inv.checkpoint_total().value(), 35951822704u);
  // Active: 8 of 256 experts on the 40 main layers (MTP left out): 35,951,822,704 - 844,640,768
  // - 40 x 248 x 3,145,728 = 3,901,560,176 (3,454,988,928 without the vision tower: "A3B").
  EXPECT_EQ(active_params(inv, m).value(), 3901560176u);
}

// The text model alone (Qwen3_5MoeForCausalLM's qwen3_5_moe_text config): no vision tower,
// 35,951,822,704 - 446,571,248 = 35,505,251,456 with the MTP block, 34,660,610,688 without.
TEST(Qwen3_5Moe, TheTextConfigAloneHasNoVisionTower) {
  const json text = config_json("qwen3.6-35b-a3b").at("text_config");
  const ModelSpec m = parse_hf_config(text.dump(), "t.json");
  EXPECT_FALSE(m.has_vision());
  EXPECT_EQ(build_inventory(m).checkpoint_total().value(), 35505251456u);
  json no_mtp = text;
  no_mtp["mtp_num_hidden_layers"] = 0;
  EXPECT_EQ(count_of(no_mtp), 34660610688u);
  // Without num_key_value_heads, Qwen3_5MoeTextConfig's default (2, the 35B's own) applies.
  json no_kv = text;
  no_kv.erase("num_key_value_heads");
  EXPECT_EQ(count_of(no_kv), 35505251456u);
  // A library caller cannot ask for MTP layers the block does not hold.
  ModelSpec two = m;
  two.mtp_layers = 2;
  EXPECT_THROW(validate_model(two), InputError);
}

// Qwen3.5-397B-A17B: h 4096, 60 layers (45 linear, 15 full), 512 experts of 1024 (top 10), a
// shared expert of 1024, 32 heads and 2 KV heads of 256, linear 16 key and 64 value heads of 128.
// - Gated DeltaNet: in_proj_qkv (4096 + 8192) x 4096 = 50,331,648; in_proj_z 8192 x 4096 =
//   33,554,432; in_proj_b, in_proj_a 64 x 4096 each = 524,288; conv1d 12288 x 4 = 49,152;
//   dt_bias, A_log 64 each; norm 128; out_proj 4096 x 8192 = 33,554,432. Sum 118,014,208; x 45 =
//   5,310,639,360.
// - Attention: q_proj 2 x 32 x 256 x 4096 = 67,108,864; k, v 512 x 4096 = 2,097,152 each; o_proj
//   4096 x 8192 = 33,554,432; norms 512. Sum 104,858,112; x 15 = 1,572,871,680.
// - Sparse block: router 2,097,152; experts 512 x 3 x 1024 x 4096 = 6,442,450,944; shared
//   12,582,912; gate 4096. Sum 6,457,135,104; with two norms (8,192) x 60 = 387,428,597,760.
// - Text: + embedding and head 2 x 248320 x 4096 = 2,034,237,440, final norm 4096:
//   396,346,350,336. Vision: 446,571,248 with the merger's fc2 widened to 4096 rows (+ 2048 x
//   4608 + 2048 = 9,439,232): 456,010,480. MTP: 8192 + 4096 x 8192 (33,554,432) + 104,858,112 +
//   6,457,135,104 + 8192 + 4096 = 6,595,568,128.
// Total 403,397,928,944: the parameter count of the checkpoint's safetensors headers (text
// 396,346,350,336, vision 456,010,480, MTP 6,595,568,128; SOURCES.md), the Hub's figure.
TEST(Qwen3_5Moe, FlagshipCountIsTheSafetensorsTotal) {
  const ModelSpec m = load_model("qwen3.5-397b-a17b");
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(role_total(inv, Role::gdn_out), 45ull * 33554432);
  EXPECT_EQ(module_total(inv, Module::vision), 456010480u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 61ull * 6442450944);
  EXPECT_EQ(inv.checkpoint_total().value(), 403397928944u);
  // Active: 396,802,360,816 - 60 x 502 x 12,582,912 = 17,805,051,376 (17,349,040,896 text: "A17B").
  EXPECT_EQ(active_params(inv, m).value(), 17805051376u);
}

// Qwen3.5-122B-A10B: h 3072, 48 layers (36 linear, 12 full), 256 experts of 1024 (top 8), shared
// 1024, 32 heads and 2 KV heads of 256, linear 16 key and 64 value heads of 128.
// - Gated DeltaNet: (12288 + 8192 + 128) x 3072 + 12288 x 4 + 128 + 128 + 3072 x 8192 =
//   88,523,008; x 36 = 3,186,828,288. Attention: (16384 + 1024) x 3072 + 3072 x 8192 + 512 =
//   78,643,712; x 12 = 943,724,544.
// - Sparse block: 256 x 3072 + 256 x 3 x 1024 x 3072 + 3 x 1024 x 3072 + 3072 = 2,426,145,792;
//   with two norms x 48 = 116,455,292,928. Embedding and head 1,525,678,080; final norm 3072.
//   Text 122,111,526,912. Vision (merger to 3072): 446,571,248 + 1024 x 4608 + 1024 =
//   451,290,864. MTP: 2 x 3072 + 3072 x 6144 + 78,643,712 + 2,426,145,792 + 6144 + 3072 =
//   2,523,679,232.
// Total 125,086,497,008, the Hub's safetensors total for Qwen/Qwen3.5-122B-A10B (SOURCES.md).
TEST(Qwen3_5Moe, MidSizeCountIsTheSafetensorsTotal) {
  EXPECT_EQ(build_inventory(load_model("Qwen/Qwen3.5-122B-A10B")).checkpoint_total().value(), 125086497008u);
}

TEST(Qwen3_5Moe, KeysItCannotHonourAreRefusedByName) {
  const json base = config_json("qwen3.6-35b-a3b");
  const auto refused = [&](const char* key, const json& value, const char* word) {
    json c = base;
    c["text_config"][key] = value;
    expect_error(c.dump(), word);
  };
  refused("attention_bias", true, "attention_bias");
  refused("attn_output_gate", false, "attn_output_gate");
  refused("mtp_use_dedicated_embeddings", true, "mtp_use_dedicated_embeddings");
  refused("mtp_num_hidden_layers", 2, "mtp_num_hidden_layers");
  refused("mlp_only_layers", json::array({0}), "mlp_only_layers");
  refused("decoder_sparse_step", 2, "decoder_sparse_step");
  refused("linear_num_value_heads", 24, "linear_num_value_heads");  // not a multiple of 16 key heads
  json layers = base;
  layers["text_config"]["layer_types"][3] = "sliding_attention";
  expect_error(layers.dump(), "layer_types[3]");
  // The neutral values of the keys Qwen3_5MoeTextConfig removes are accepted.
  json neutral = base;
  neutral["text_config"]["decoder_sparse_step"] = 1;
  neutral["text_config"]["mlp_only_layers"] = json::array();
  EXPECT_EQ(count_of(neutral), 35951822704u);
  // Another family does not get an MTP embedding silently.
  json next = config_json("qwen3-next-80b-a3b");
  next["mtp_use_dedicated_embeddings"] = true;
  expect_error(next.dump(), "mtp_use_dedicated_embeddings");
}

// The wrapper needs its text model and a vision tower with every size; deepstack mergers (which
// Qwen3.5's tower does not build) and a tie_word_embeddings at odds with the text's are refused.
TEST(Qwen3_5Moe, TheWrapperNeedsBothTowers) {
  const json base = config_json("qwen3.6-35b-a3b");
  json c = base;
  c.erase("text_config");
  expect_error(c.dump(), "text_config");
  c = base;
  c.erase("vision_config");
  expect_error(c.dump(), "vision_config");
  c = base;
  c["vision_config"].erase("out_hidden_size");
  expect_error(c.dump(), "out_hidden_size");
  c = base;
  c["vision_config"]["num_heads"] = 15;
  expect_error(c.dump(), "num_heads");
  c = base;
  c["vision_config"]["deepstack_visual_indexes"] = json::array({8, 16, 24});
  expect_error(c.dump(), "deepstack_visual_indexes");
  c = base;
  c["tie_word_embeddings"] = true;
  expect_error(c.dump(), "tie_word_embeddings");
  // A key of the tower moemem does not know is reported, not dropped.
  c = base;
  c["vision_config"]["window_size"] = 112;
  const ModelSpec m = parse_hf_config(c.dump(), "q.json");
  ASSERT_EQ(m.unrecognised_keys.size(), 1u);
  EXPECT_EQ(m.unrecognised_keys.front(), "vision_config.window_size");
}

// count works (presets in any case and by repository id); analyze and search refuse the model
// up front, naming the Gated DeltaNet layers, as for Qwen3-Next.
TEST(Qwen3_5Moe, AnalysisAndCountWork) {
  const auto count = run_cli({"count", "--model", "QWEN/Qwen3.5-397B-A17B"});
  EXPECT_EQ(count.code, 0) << count.err;
  EXPECT_NE(count.out.find("403,397,928,944"), std::string::npos) << count.out;
  const auto small = run_cli({"count", "--model", "Qwen3.6-35B-A3B"});
  EXPECT_NE(small.out.find("35,951,822,704"), std::string::npos) << small.out << small.err;
  const auto a = run_cli({"analyze", "--model", "qwen3.5-397b-a17b", "--ep", "8", "--dp", "8"});
  EXPECT_EQ(a.code, 0) << a.err;
  const auto s = run_cli({"search", "--model", "qwen3.6-35b-a3b", "--gpus", "16", "--gpu", "h100-80g", "--global-batch", "64"});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("Gated DeltaNet"), std::string::npos) << s.err;
}

}  // namespace
