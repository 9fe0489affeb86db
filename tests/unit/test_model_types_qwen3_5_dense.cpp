// Qwen3.5 (model_type qwen3_5, its text model qwen3_5_text; issue 14): Qwen3-Next's Gated
// DeltaNet and gated-attention layers, a dense SwiGLU MLP on every layer and on the MTP layer,
// and the multimodal checkpoint's vision tower, read from config.json files under
// tests/data/configs (provenance: data/models/SOURCES.md). The totals are worked by hand below
// and equal the published safetensors totals; analysis runs under the megatron profile; keys the reader
// cannot honour are refused.
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

std::uint64_t on_mtp(const Inventory& inv) {
  std::uint64_t n = 0;
  for (const auto& t : inv.tensors) n += t.placement == Placement::mtp ? t.params().value() : 0;
  return n;
}

// Qwen3.5-27B: h 5120, 64 layers (layer_types: every fourth full attention, 3, 7, ..., 63), vocab
// 248320 untied, 24 heads and 4 KV heads of 256, linear 16 key and 48 value heads of 128,
// intermediate_size 17408 on every layer.
// - Gated DeltaNet layer: key_dim 16 x 128 = 2048, value_dim 48 x 128 = 6144; in_proj_qkv
//   (2 x 2048 + 6144) x 5120 = 52,428,800; in_proj_z 6144 x 5120 = 31,457,280; in_proj_b and
//   in_proj_a 48 x 5120 = 245,760 each; conv1d 10240 x 4 = 40,960; dt_bias, A_log 48 each; norm
//   128; out_proj 5120 x 6144 = 31,457,280. Sum 115,876,064; x 48 = 5,562,051,072.
// - Attention layer: q_proj 2 x 24 x 256 x 5120 = 62,914,560 (query and gate); k_proj, v_proj
//   4 x 256 x 5120 = 5,242,880 each; o_proj 5120 x 6144 = 31,457,280; q_norm, k_norm 256 each.
//   Sum 104,858,112; x 16 = 1,677,729,792.
// - MLP: gate_proj, up_proj, down_proj 3 x 17408 x 5120 = 267,386,880; with the two layer norms
//   (10,240) 267,397,120; x 64 = 17,113,415,680.
// - Text: 5,562,051,072 + 1,677,729,792 + 17,113,415,680 + embedding and lm_head
//   2 x 248320 x 5120 (2,542,796,800) + final norm 5120 = 26,895,998,464.
// - Vision (depth 27, hidden 1152, intermediate 4304, merger to 5120): patch_embed 1152 x 1536 +
//   1152 = 1,770,624; pos_embed 2304 x 1152 = 2,654,208; a block 15,239,504 (norms 4 x 1152, qkv
//   3456 x 1152 + 3456, proj 1152 x 1152 + 1152, fc1 4304 x 1152 + 4304, fc2 1152 x 4304 + 1152),
//   x 27 = 411,466,608; merger: norm 2 x 1152, fc1 4608 x 4608 + 4608, fc2 5120 x 4608 + 5120 =
//   44,838,656. Sum 460,730,096.
// - MTP: pre-fc norms 2 x 5120, fc 5120 x 10240 = 52,428,800, one attention layer 104,858,112
//   with its dense MLP 267,386,880 and two norms 10,240, mtp.norm 5120. Sum 424,699,392.
// Total 26,895,998,464 + 460,730,096 + 424,699,392 = 27,781,427,952: the Hub's safetensors total
// for Qwen/Qwen3.5-27B and Qwen/Qwen3.6-27B (SOURCES.md). An MTP layer without its dense MLP, or
// no MTP block, would miss it by 267,386,880 or 424,699,392.
TEST(Qwen3_5Dense, TwentySevenBCountIsTheSafetensorsTotal) {
  const ModelSpec m = load_model(config_path("qwen3.5-27b"));
  EXPECT_EQ(m.model_type, "qwen3_5_text");
  EXPECT_TRUE(m.is_hybrid());
  EXPECT_TRUE(m.has_vision());
  EXPECT_FALSE(m.is_moe());
  EXPECT_EQ(m.num_moe_layers(), 0);
  EXPECT_EQ(m.mixer_at(62), MixerKind::gated_delta_net);
  EXPECT_EQ(m.mixer_at(63), MixerKind::attention);
  EXPECT_EQ(m.mtp_layers, 1);
  EXPECT_TRUE(m.unrecognised_keys.empty()) << m.unrecognised_keys.front();
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.linear_attn.in_proj_qkv.weight").rows, 10240);
  EXPECT_EQ(tensor(inv, "layers.0.linear_attn.in_proj_z.weight").rows, 6144);
  EXPECT_EQ(tensor(inv, "layers.0.linear_attn.in_proj_b.weight").rows, 48);
  EXPECT_EQ(tensor(inv, "layers.0.mlp.gate_proj.weight").rows, 17408);
  EXPECT_EQ(tensor(inv, "layers.3.mlp.down_proj.weight").cols, 17408);
  EXPECT_EQ(tensor(inv, "layers.3.self_attn.o_proj.weight").cols, 6144);
  EXPECT_EQ(tensor(inv, "mtp.layers.0.mlp.up_proj.weight").rows, 17408);
  EXPECT_EQ(tensor(inv, "mtp.fc.weight").cols, 10240);
  EXPECT_EQ(tensor(inv, "visual.merger.linear_fc2.weight").rows, 5120);
  EXPECT_THROW((void)tensor(inv, "layers.0.mlp.experts.down_proj"), std::runtime_error);
  EXPECT_THROW((void)tensor(inv, "layers.0.mlp.gate.weight"), std::runtime_error);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 0u);
  EXPECT_EQ(module_total(inv, Module::dense_mlp), 65ull * 267386880);  // 64 layers and the MTP layer
  EXPECT_EQ(role_total(inv, Role::gdn_out), 48ull * 31457280);
  EXPECT_EQ(module_total(inv, Module::vision), 460730096u);
  EXPECT_EQ(on_mtp(inv), 424699392u);
  EXPECT_EQ(inv.total().value(), inv.checkpoint_total().value());  // the MTP shares embedding and head
  EXPECT_EQ(inv.checkpoint_total().value(), 27781427952u);
  // Dense: every parameter outside the MTP block is active, 27,781,427,952 - 424,699,392.
  EXPECT_EQ(active_params(inv, m).value(), 27356728560u);
}

// Qwen3.5-9B: h 4096, 32 layers (24 linear, 8 full), vocab 248320 untied, 16 heads and 4 KV heads
// of 256, linear 16 key and 32 value heads of 128, intermediate_size 12288.
// - Gated DeltaNet: in_proj_qkv (4096 + 4096) x 4096 = 33,554,432; in_proj_z 4096 x 4096 =
//   16,777,216; in_proj_b, in_proj_a 32 x 4096 each = 262,144; conv1d 8192 x 4 = 32,768; dt_bias,
//   A_log 32 each; norm 128; out_proj 4096 x 4096 = 16,777,216. Sum 67,403,968; x 24 =
//   1,617,695,232.
// - Attention: q_proj 2 x 16 x 256 x 4096 = 33,554,432; k, v 1024 x 4096 = 4,194,304 each; o_proj
//   4096 x 4096 = 16,777,216; norms 512. Sum 58,720,768; x 8 = 469,766,144.
// - MLP 3 x 12288 x 4096 = 150,994,944, with two norms (8,192) x 32 = 4,832,100,352.
// - Text: + embedding and head 2 x 248320 x 4096 = 2,034,237,440, final norm 4096:
//   8,953,803,264. Vision: 460,730,096 with the merger's fc2 at 4096 rows (- 1024 x 4608 - 1024 =
//   4,719,616): 456,010,480. MTP: 8192 + 4096 x 8192 (33,554,432) + 58,720,768 + 150,994,944 +
//   8192 + 4096 = 243,290,624.
// Total 9,653,104,368, the Hub's safetensors total for Qwen/Qwen3.5-9B (SOURCES.md).
TEST(Qwen3_5Dense, NineBCountIsTheSafetensorsTotal) {
  const ModelSpec m = load_model("Qwen/Qwen3.5-9B");
  EXPECT_EQ(m.dense_ffn, 12288);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(module_total(inv, Module::vision), 456010480u);
  EXPECT_EQ(on_mtp(inv), 243290624u);
  EXPECT_EQ(inv.checkpoint_total().value(), 9653104368u);
}

// Qwen3.5-0.8B: h 1024, 24 layers (18 linear, 6 full), vocab 248320 tied (no lm_head), 8 heads
// and 2 KV heads of 256, linear 16 key and 16 value heads of 128, intermediate_size 3584; a
// smaller vision tower (depth 12, hidden 768, intermediate 3072, 12 heads, merger to 1024).
// - Gated DeltaNet: in_proj_qkv (4096 + 2048) x 1024 = 6,291,456; in_proj_z 2048 x 1024 =
//   2,097,152; in_proj_b, in_proj_a 16 x 1024 each = 32,768; conv1d 6144 x 4 = 24,576; dt_bias,
//   A_log 16 each; norm 128; out_proj 1024 x 2048 = 2,097,152. Sum 10,543,264; x 18 = 189,778,752.
// - Attention: q_proj 2 x 8 x 256 x 1024 = 4,194,304; k, v 512 x 1024 = 524,288 each; o_proj
//   1024 x 2048 = 2,097,152; norms 512. Sum 7,340,544; x 6 = 44,043,264.
// - MLP 3 x 3584 x 1024 = 11,010,048, with two norms (2,048) x 24 = 264,290,304.
// - Text: + the tied embedding 248320 x 1024 = 254,279,680, final norm 1024: 752,393,024.
// - Vision: patch_embed 768 x 1536 + 768 = 1,180,416; pos_embed 2304 x 768 = 1,769,472; a block:
//   norms 4 x 768, qkv 2304 x 768 + 2304, proj 768 x 768 + 768, fc1 3072 x 768 + 3072, fc2
//   768 x 3072 + 768 = 7,087,872, x 12 = 85,054,464; merger: norm 2 x 768, fc1 3072 x 3072 + 3072,
//   fc2 1024 x 3072 + 1024 = 12,588,544. Sum 100,592,896.
// - MTP: 2 x 1024 + 1024 x 2048 (2,097,152) + 7,340,544 + 11,010,048 + 2 x 1024 + 1024 =
//   20,452,864.
// Total 752,393,024 + 100,592,896 + 20,452,864 = 873,438,784, the Hub's safetensors total for
// Qwen/Qwen3.5-0.8B (SOURCES.md; 752,393,024, the text alone, is what its GGUF export holds).
TEST(Qwen3_5Dense, SmallestCountIsTheSafetensorsTotalWithTiedEmbeddings) {
  const ModelSpec m = load_model(config_path("qwen3.5-0.8b"));
  EXPECT_TRUE(m.tie_embeddings);
  const Inventory inv = build_inventory(m);
  EXPECT_THROW((void)tensor(inv, "lm_head.weight"), std::runtime_error);
  EXPECT_EQ(module_total(inv, Module::vision), 100592896u);
  EXPECT_EQ(on_mtp(inv), 20452864u);
  EXPECT_EQ(inv.checkpoint_total().value(), 873438784u);
  EXPECT_EQ(count_of(config_json("qwen3.5-0.8b")), 873438784u);
}

// The text model alone (Qwen3_5ForCausalLM's qwen3_5_text config): no vision tower,
// 27,781,427,952 - 460,730,096 = 27,320,697,856 with the MTP block, 26,895,998,464 without.
TEST(Qwen3_5Dense, TheTextConfigAloneHasNoVisionTower) {
  const json text = config_json("qwen3.5-27b").at("text_config");
  const ModelSpec m = parse_hf_config(text.dump(), "t.json");
  EXPECT_EQ(m.model_type, "qwen3_5_text");
  EXPECT_FALSE(m.has_vision());
  EXPECT_EQ(build_inventory(m).checkpoint_total().value(), 27320697856u);
  json no_mtp = text;
  no_mtp["mtp_num_hidden_layers"] = 0;
  EXPECT_EQ(count_of(no_mtp), 26895998464u);
  // Without layer_types, full_attention_interval 4 gives the same layers.
  json interval = text;
  interval.erase("layer_types");
  EXPECT_EQ(count_of(interval), 27320697856u);
  // Qwen3_5TextConfig's defaults where a key is absent: 4 KV heads, intermediate_size 12288,
  // head_dim 256, no MTP block.
  const json bare = {{"model_type", "qwen3_5_text"}, {"hidden_size", 4096}, {"vocab_size", 248320},
                     {"num_hidden_layers", 32}, {"num_attention_heads", 16}};
  const ModelSpec d = parse_hf_config(bare.dump(), "d.json");
  EXPECT_EQ(d.num_kv_heads, 4);
  EXPECT_EQ(d.dense_ffn, 12288);
  EXPECT_EQ(d.head_dim, 256);
  EXPECT_EQ(d.mtp_layers, 0);
  // The bare config is the 9B's text model without its MTP block: 8,953,803,264.
  EXPECT_EQ(count_of(bare), 8953803264u);
}

TEST(Qwen3_5Dense, KeysItCannotHonourAreRefusedByName) {
  const json base = config_json("qwen3.5-27b");
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
  refused("mlp_bias", true, "mlp_bias");
  refused("num_key_value_heads", 5, "num_key_value_heads");
  refused("linear_num_value_heads", 24, "linear_num_value_heads");  // not a multiple of 16 key heads
  // Qwen3-Next's MoE keys, which Qwen3_5TextConfig removes: experts this reader does not build.
  refused("num_experts", 256, "num_experts");
  refused("moe_intermediate_size", 512, "moe_intermediate_size");
  refused("shared_expert_intermediate_size", 512, "shared_expert_intermediate_size");
  refused("decoder_sparse_step", 2, "decoder_sparse_step");
  json layers = base;
  layers["text_config"]["layer_types"][3] = "sliding_attention";
  expect_error(layers.dump(), "layer_types[3]");
  // A key moemem does not know is reported, not dropped.
  json unknown = base;
  unknown["text_config"]["output_gate_type"] = "swish";
  const ModelSpec m = parse_hf_config(unknown.dump(), "q.json");
  ASSERT_EQ(m.unrecognised_keys.size(), 1u);
  EXPECT_EQ(m.unrecognised_keys.front(), "output_gate_type");
}

// The wrapper needs its text model and a vision tower with every size; a tie_word_embeddings at
// odds with the text's is refused; a wrapper whose text_config names another type still builds
// Qwen3_5TextConfig, as Qwen3_5Config does.
TEST(Qwen3_5Dense, TheWrapperNeedsBothTowers) {
  const json base = config_json("qwen3.5-0.8b");
  json c = base;
  c.erase("text_config");
  expect_error(c.dump(), "text_config");
  c = base;
  c.erase("vision_config");
  expect_error(c.dump(), "vision_config");
  c = base;
  c["vision_config"].erase("depth");
  expect_error(c.dump(), "depth");
  c = base;
  c["vision_config"]["deepstack_visual_indexes"] = json::array({3, 6, 9});
  expect_error(c.dump(), "deepstack_visual_indexes");
  c = base;
  c["tie_word_embeddings"] = false;
  expect_error(c.dump(), "tie_word_embeddings");
  c = base;
  c["text_config"]["model_type"] = "qwen3_5_moe_text";
  EXPECT_EQ(count_of(c), 873438784u);
  expect_error(json{{"model_type", "qwen3_5"}, {"hidden_size", 1024}}.dump(), "text_config");
}

// count works (presets in any case and by repository id); analyze and search refuse the model
// up front, naming its type and the Gated DeltaNet layers, as for Qwen3.5-MoE and Qwen3-Next.
TEST(Qwen3_5Dense, AnalysisAndCountWork) {
  const auto count = run_cli({"count", "--model", "QWEN/Qwen3.5-27B"});
  EXPECT_EQ(count.code, 0) << count.err;
  EXPECT_NE(count.out.find("27,781,427,952"), std::string::npos) << count.out;
  const auto small = run_cli({"count", "--model", "Qwen3.5-0.8B"});
  EXPECT_NE(small.out.find("873,438,784"), std::string::npos) << small.out << small.err;
  const auto a = run_cli({"analyze", "--model", "qwen3.5-27b", "--tp", "4", "--dp", "2"});
  EXPECT_EQ(a.code, 0) << a.err;
  const auto file = run_cli({"analyze", "--model", config_path("qwen3.5-0.8b")});
  EXPECT_EQ(file.code, 0) << file.err;
  const auto s = run_cli({"search", "--model", "qwen3.5-9b", "--gpus", "8", "--gpu", "h100-80g", "--global-batch", "64"});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("Gated DeltaNet"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("qwen3_5_text"), std::string::npos) << s.err;
}

}  // namespace
