// Nemotron-H (model_type nemotron_h, issue 14): blocks of one norm and one mixer each (Mamba-2,
// attention, ReLU^2 MLP or MoE, from hybrid_override_pattern), read from config.json files under
// tests/data/configs (provenance: data/models/SOURCES.md). The counts are exact against the
// published totals; analysis runs under the megatron profile; keys that
// would add tensors moemem does not build are refused by name.
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

json nano30_config() { return json::parse(text_of(config_path("nemotron-3-nano-30b-a3b"))); }
json nano9_config() { return json::parse(text_of(config_path("nemotron-nano-9b-v2"))); }
std::uint64_t total_of(const json& c) { return build_inventory(parse_hf_config(c.dump(), "n.json")).total().value(); }

// NVIDIA-Nemotron-Nano-9B-v2: h 4480, vocab 131072 untied, 56 blocks "M-M-M-MM-M-M-M*-...":
// 27 Mamba-2, 4 attention, 25 MLP.
// - Mamba-2 block: inner 128 x 80 = 10,240; conv_dim 10,240 + 2 x 8 x 128 = 12,288;
//   in_proj (10,240 + 12,288 + 128) x 4480 = 101,498,880; conv1d 12,288 x 4 = 49,152 and its
//   bias 12,288; dt_bias, A_log, D 3 x 128 = 384; gated norm 10,240; out_proj 4480 x 10,240 =
//   45,875,200; block norm 4480. Sum 147,450,624, x 27 = 3,981,166,848.
// - Attention block: q_proj and o_proj 40 x 128 x 4480 = 22,937,600 each; k_proj and v_proj
//   8 x 128 x 4480 = 4,587,520 each; norm 4480. Sum 55,054,720, x 4 = 220,218,880.
// - MLP block: up_proj and down_proj 15,680 x 4480 = 70,246,400 each; norm 4480. Sum
//   140,497,280, x 25 = 3,512,432,000.
// - embeddings and lm_head 131,072 x 4480 = 587,202,560 each; norm_f 4480.
// Total 8,888,227,328: the Hub's safetensors total for nvidia/NVIDIA-Nemotron-Nano-9B-v2
// (SOURCES.md); the model card's 8.89B.
TEST(NemotronH, Nano9bV2CountIsExactAgainstThePublishedTotal) {
  const ModelSpec m = load_model("nemotron-nano-9b-v2");
  EXPECT_EQ(m.model_type, "nemotron_h");
  EXPECT_EQ(m.num_layers, 56);
  EXPECT_FALSE(m.is_moe());
  EXPECT_TRUE(m.is_hybrid());
  EXPECT_EQ(m.mixer_at(0), MixerKind::mamba2);
  EXPECT_EQ(m.mixer_at(1), MixerKind::none);
  EXPECT_EQ(m.mixer_at(14), MixerKind::attention);  // "M-M-M-MM-M-M-M*": the 15th block
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.mixer.in_proj.weight").rows, 22656);
  EXPECT_EQ(tensor(inv, "layers.0.mixer.conv1d.weight").params().value(), 49152u);
  EXPECT_EQ(tensor(inv, "layers.0.mixer.conv1d.bias").rows, 12288);
  EXPECT_EQ(tensor(inv, "layers.0.mixer.D").rows, 128);
  EXPECT_EQ(tensor(inv, "layers.0.mixer.norm.weight").rows, 10240);
  EXPECT_EQ(tensor(inv, "layers.1.mixer.up_proj.weight").rows, 15680);
  EXPECT_EQ(tensor(inv, "layers.14.mixer.k_proj.weight").rows, 1024);
  EXPECT_EQ(tensor(inv, "embeddings.weight").rows, 131072);
  EXPECT_EQ(tensor(inv, "norm_f.weight").rows, 4480);
  // One sub-layer per block: no MLP beside the attention, no attention beside the MLP.
  EXPECT_THROW((void)tensor(inv, "layers.14.mixer.up_proj.weight"), std::runtime_error);
  EXPECT_THROW((void)tensor(inv, "layers.1.mixer.q_proj.weight"), std::runtime_error);
  EXPECT_EQ(role_total(inv, Role::mamba_in_proj), 27ull * 101498880);
  EXPECT_EQ(role_total(inv, Role::mlp_gate), 0u);
  EXPECT_EQ(role_total(inv, Role::input_norm), 56ull * 4480);
  EXPECT_EQ(module_total(inv, Module::dense_mlp), 25ull * 140492800);
  EXPECT_EQ(inv.total().value(), 8888227328u);
  EXPECT_EQ(active_params(inv, m).value(), 8888227328u);  // dense: every parameter is active
}

// NVIDIA-Nemotron-Nano-12B-v2 (no preset: its config was not found; the sizes of Megatron-Bridge's
// NemotronNano12Bv2Provider on the 9B-v2 config): h 5120, intermediate_size 20480, 62 blocks
// "M-M-M-M*-..." (28 Mamba-2, 6 attention, 28 MLP), the same heads.
// - Mamba-2 block: in_proj 22,656 x 5120 = 115,998,720; conv1d 49,152 + bias 12,288; 384;
//   gated norm 10,240; out_proj 5120 x 10,240 = 52,428,800; norm 5120. Sum 168,504,704, x 28 =
//   4,718,131,712.
// - Attention block: q_proj, o_proj 5120 x 5120 = 26,214,400 each; k_proj, v_proj 1024 x 5120 =
//   5,242,880 each; norm 5120. Sum 62,919,680, x 6 = 377,518,080.
// - MLP block: 2 x 20,480 x 5120 + 5120 = 209,720,320, x 28 = 5,872,168,960.
// - embeddings and lm_head 2 x 131,072 x 5120 = 1,342,177,280; norm_f 5120.
// Total 12,310,001,152: the model card's 12.31B.
TEST(NemotronH, Nano12bV2ByHand) {
  json c = nano9_config();
  c["hidden_size"] = 5120;
  c["intermediate_size"] = 20480;
  c["num_hidden_layers"] = 62;
  c["hybrid_override_pattern"] = "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-";
  EXPECT_EQ(total_of(c), 12310001152u);
}

// NVIDIA-Nemotron-3-Nano-30B-A3B: h 2688, vocab 131072 untied, 52 blocks
// "MEMEM*EMEMEM*...": 23 Mamba-2, 6 attention, 23 MoE.
// - Mamba-2 block: inner 64 x 64 = 4096; conv_dim 4096 + 2 x 8 x 128 = 6144; in_proj
//   (4096 + 6144 + 64) x 2688 = 27,697,152; conv1d 6144 x 4 = 24,576 and bias 6144; dt_bias,
//   A_log, D 3 x 64 = 192; gated norm 4096; out_proj 2688 x 4096 = 11,010,048; block norm 2688.
//   Sum 38,744,896, x 23 = 891,132,608.
// - Attention block: q_proj and o_proj 32 x 128 x 2688 = 11,010,048 each; k_proj and v_proj
//   2 x 128 x 2688 = 688,128 each; norm 2688. Sum 23,399,040, x 6 = 140,394,240.
// - MoE block: router 128 x 2688 = 344,064 and e_score_correction_bias 128; 128 experts of
//   up_proj and down_proj 1856 x 2688: 128 x 2 x 4,988,928 = 1,277,165,568; shared expert
//   2 x 3712 x 2688 = 19,955,712; norm 2688. Sum 1,297,468,160, x 23 = 29,841,767,680.
// - embeddings and lm_head 131,072 x 2688 = 352,321,536 each; norm_f 2688.
// Total 31,577,940,288: the parameter count llama.cpp reports for this checkpoint converted to
// GGUF (SOURCES.md), which keeps every tensor; the model card's 31.6B.
TEST(NemotronH, Nano30bA3bCountIsExactAgainstThePublishedTotal) {
  const ModelSpec m = load_model("nemotron-3-nano-30b-a3b");
  EXPECT_EQ(m.num_layers, 52);
  EXPECT_EQ(m.num_moe_layers(), 23);
  EXPECT_EQ(m.moe.num_routed_experts, 128);
  EXPECT_EQ(m.moe.top_k, 6);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.mixer.in_proj.weight").rows, 10304);
  EXPECT_EQ(tensor(inv, "layers.1.mixer.gate.e_score_correction_bias").rows, 128);
  EXPECT_EQ(tensor(inv, "layers.1.mixer.experts.*.up_proj.weight").copies, 128);
  EXPECT_EQ(tensor(inv, "layers.1.mixer.shared_experts.down_proj.weight").cols, 3712);
  EXPECT_EQ(tensor(inv, "layers.5.mixer.o_proj.weight").cols, 4096);
  EXPECT_EQ(role_total(inv, Role::expert_gate) + role_total(inv, Role::shared_gate), 0u);  // ungated
  EXPECT_EQ(module_total(inv, Module::routed_experts), 23ull * 1277165568);
  EXPECT_EQ(module_total(inv, Module::shared_experts), 23ull * 19955712);
  EXPECT_EQ(module_total(inv, Module::router), 23ull * (344064 + 128));
  // Token mixers: 23 x (38,744,896 - 4096 - 2688) + 6 x (23,399,040 - 2688) = 890,976,576 +
  // 140,378,112.
  EXPECT_EQ(module_total(inv, Module::attention), 1031354688u);
  // Norms: 52 block norms x 2688 + 23 gated norms x 4096.
  EXPECT_EQ(module_total(inv, Module::norms), 52ull * 2688 + 23ull * 4096);
  EXPECT_EQ(inv.total().value(), 31577940288u);
  // Active: 6 of 128 experts: 31,577,940,288 - 23 x 122 x 2 x 4,988,928 = 3,580,076,352, the
  // card's "3.6B including embeddings" (3.2B without the 352,321,536 of the input embedding).
  EXPECT_EQ(active_params(inv, m).value(), 3580076352u);
}

// transformers 5 writes the blocks as layers_block_type; the legacy names (mamba, attention) and
// its own (linear_attention, full_attention) read alike, and a list that disagrees with the
// pattern, or with num_hidden_layers, is refused.
TEST(NemotronH, BlockListAndPatternAgree) {
  json c = nano30_config();
  const std::uint64_t total = total_of(c);
  json listed = c;
  listed.erase("hybrid_override_pattern");
  listed["layers_block_type"] = json::array();
  for (const char k : c["hybrid_override_pattern"].get<std::string>()) {
    listed["layers_block_type"].push_back(k == 'M' ? "mamba" : k == '*' ? "full_attention" : k == 'E' ? "moe" : "mlp");
  }
  EXPECT_EQ(total_of(listed), total);
  json both = listed;
  both["hybrid_override_pattern"] = c["hybrid_override_pattern"];
  EXPECT_EQ(total_of(both), total);
  both["layers_block_type"][0] = "moe";
  expect_error(both.dump(), "layers_block_type");
  json bad = listed;
  bad["layers_block_type"][3] = "conv";
  expect_error(bad.dump(), "layers_block_type[3]");
  bad = c;
  bad["num_hidden_layers"] = 53;
  expect_error(bad.dump(), "num_hidden_layers");
  bad = c;
  bad["hybrid_override_pattern"] = "MEMX";
  expect_error(bad.dump(), "hybrid_override_pattern");
  bad = c;
  bad.erase("hybrid_override_pattern");
  expect_error(bad.dump(), "hybrid_override_pattern");
  // The first Mamba-2 block made an MLP block of intermediate_size 1856 (num_hidden_layers
  // dropped, as transformers derives it): minus the Mamba-2 mixer (38,744,896 less its block
  // norm 2688 = 38,742,208), plus up_proj and down_proj 2 x 1856 x 2688 = 9,977,856.
  json mlp = c;
  mlp.erase("num_hidden_layers");
  mlp["hybrid_override_pattern"] = "-" + c["hybrid_override_pattern"].get<std::string>().substr(1);
  EXPECT_EQ(total_of(mlp), total - 38742208u + 9977856u);
}

// The released configs' optional tensors: use_conv_bias false drops conv1d.bias (6144 per
// Mamba-2 block); the legacy spellings (mamba_n_groups, attention_head_dim) read as the new ones.
TEST(NemotronH, ConvBiasAndLegacyKeys) {
  json c = nano30_config();
  const std::uint64_t total = total_of(c);
  json no_bias = c;
  no_bias["use_conv_bias"] = false;
  EXPECT_EQ(total_of(no_bias), total - 23ull * 6144);
  json legacy = c;
  legacy.erase("n_groups");
  legacy["mamba_n_groups"] = 8;
  legacy.erase("head_dim");
  legacy["attention_head_dim"] = 128;
  EXPECT_EQ(total_of(legacy), total);
  legacy["head_dim"] = 64;  // disagrees with attention_head_dim
  expect_error(legacy.dump(), "attention_head_dim");
  json groups = c;
  groups["n_groups"] = 4;  // B and C of 4 groups: 2 x 4 x 128 = 1024 fewer conv channels, x (in_proj h + conv 4 + bias 1)
  EXPECT_EQ(total_of(groups), total - 23ull * 1024 * (2688 + 4 + 1));
  groups["n_groups"] = 3;  // not a divisor of 64 heads
  expect_error(groups.dump(), "n_groups");
}

// Keys that would add tensors moemem does not build are refused by name, never dropped.
TEST(NemotronH, KeysItCannotHonourAreRefusedByName) {
  for (const char* key : {"attention_bias", "mlp_bias", "use_bias", "mamba_proj_bias"}) {
    json c = nano30_config();
    c[key] = true;
    expect_error(c.dump(), key);
  }
  json c = nano30_config();
  c["moe_latent_size"] = 1024;
  expect_error(c.dump(), "moe_latent_size");
  c = nano30_config();
  c["num_nextn_predict_layers"] = 1;
  expect_error(c.dump(), "num_nextn_predict_layers");
  c = nano30_config();
  c["n_shared_experts"] = 2;
  expect_error(c.dump(), "n_shared_experts");
  c = nano30_config();
  c["num_experts_per_tok"] = 129;
  expect_error(c.dump(), "num_experts_per_tok");
  // Settings that change no tensor are read without a note.
  c = nano9_config();
  c["mamba_hidden_act"] = "gelu";
  c["residual_in_fp32"] = true;
  c["time_step_limit"] = json::array({0.0, 10.0});
  const ModelSpec m = parse_hf_config(c.dump(), "n.json");
  EXPECT_TRUE(m.unrecognised_keys.empty()) << m.unrecognised_keys.front();
  EXPECT_EQ(build_inventory(m).total().value(), 8888227328u);
}

// A ModelSpec from a library caller: Mamba-2 and mixer-less blocks only under Nemotron-H's naming
// (another naming would build attention for them), and no MTP depth there.
TEST(NemotronH, ValidateModelRefusesBlocksOutsideTheirNaming) {
  ModelSpec m = load_model("nemotron-nano-9b-v2");
  EXPECT_NO_THROW(validate_model(m));
  ModelSpec other = m;
  other.naming = NamingStyle::llama;
  EXPECT_THROW(validate_model(other), InputError);
  ModelSpec mtp = m;
  mtp.mtp_layers = 1;
  EXPECT_THROW(validate_model(mtp), InputError);
  ModelSpec no_heads = m;
  no_heads.mamba.num_heads = 0;
  EXPECT_THROW(validate_model(no_heads), InputError);
}

// count and models work; analyze and search refuse the model up front (exit 2), naming it.
// Analysis under the megatron profile (the terms: tests/unit/test_mamba_activations.cpp); a timed
// search is refused by name (the step-time model does not time Mamba-2).
TEST(NemotronH, AnalysisAndCountWork) {
  const auto count = run_cli({"count", "--model", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"});
  EXPECT_EQ(count.code, 0) << count.err;
  EXPECT_NE(count.out.find("31,577,940,288"), std::string::npos) << count.out;
  const auto layers = run_cli({"count", "--model", "nemotron-3-nano-30b-a3b", "--by", "layer"});
  EXPECT_EQ(layers.code, 0) << layers.err;
  EXPECT_NE(layers.out.find("layer 0 (mamba2)"), std::string::npos) << layers.out;
  EXPECT_NE(layers.out.find("layer 1 (moe)"), std::string::npos) << layers.out;
  EXPECT_NE(layers.out.find("layer 5 (attention)"), std::string::npos) << layers.out;
  const auto models = run_cli({"models"});
  EXPECT_EQ(models.code, 0) << models.err;
  EXPECT_NE(models.out.find("8,888,227,328"), std::string::npos) << models.out;
  const auto a = run_cli({"analyze", "--model", "nemotron-nano-9b-v2"});
  EXPECT_EQ(a.code, 0) << a.err;
  const auto titan = run_cli({"analyze", "--model", "nemotron-nano-9b-v2", "--profile", "torchtitan"});
  EXPECT_EQ(titan.code, 2);
  EXPECT_NE(titan.err.find("Mamba-2"), std::string::npos) << titan.err;
  const auto s = run_cli({"search", "--model", "nemotron-3-nano-30b-a3b", "--gpus", "16", "--gpu", "h100-80g", "--global-batch", "64"});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("Mamba-2"), std::string::npos) << s.err;
}

}  // namespace
