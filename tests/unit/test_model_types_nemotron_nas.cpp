// NVIDIA Nemotron-NAS (model_type nemotron-nas, issue 14): Llama layers pruned per layer by
// block_configs (attention skipped or replaced by a linear, key/value heads and FFN width per
// layer). Read from the published Llama-3.3-Nemotron-Super-49B-v1 config.json (provenance in
// data/models/SOURCES.md); the count is exact against the published total; analysis is refused by
// name; block keys the reader cannot honour are refused by name.
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

json super_config() { return json::parse(text_of(config_path("llama-3.3-nemotron-super-49b"))); }

std::uint64_t total_of(const json& c) { return build_inventory(parse_hf_config(c.dump(), "n.json")).total().value(); }

// Llama-3.3-Nemotron-Super-49B-v1: h 8192, 64 heads of 128, vocab 128256 untied, 80 layers.
// FFN widths from ffn_mult (int(2 x mult x 8192 / 3), rounded up to a multiple of 256):
// 5.25 -> 28672, 3.28125 -> 17920, 2.625 -> 14336, 1.3125 -> 7168, 1.0 -> 5461 -> 5632,
// 0.5 -> 2730 -> 2816. The 80 blocks: 48 attention + 5.25, 1 attention + 2.625 (layer 0), and
// 31 without attention: 1 x 5.25, 1 x 3.28125, 5 x 2.625, 10 x 1.3125, 8 x 1.0, 6 x 0.5.
// - Attention (n_heads_in_group 8: 8 KV heads): q 8192 x 8192 = 67,108,864; k, v 1024 x 8192 =
//   8,388,608 each; o 67,108,864; input_layernorm 8,192. 151,003,136 x 49 = 7,399,153,664.
// - MLP 3 x 8192 x f: 49 x 704,643,072 + 1 x 440,401,920 + 6 x 352,321,536 + 10 x 176,160,768 +
//   8 x 138,412,032 + 6 x 69,206,016 = 40,365,981,696; post_attention_layernorm 80 x 8,192.
// - Embedding and lm_head 2 x 128256 x 8192 = 2,101,346,304; final norm 8,192.
// Total 49,867,145,216: the published parameter count of nvidia/Llama-3_3-Nemotron-Super-49B-v1
// (SOURCES.md). Dense, so every parameter is active.
TEST(NemotronNas, CountIsExactAgainstThePublishedTotal) {
  const ModelSpec m = load_model("llama-3.3-nemotron-super-49b");
  EXPECT_EQ(m.model_type, "nemotron-nas");
  ASSERT_EQ(m.nas_blocks.size(), 80u);
  EXPECT_EQ(m.nas_blocks[0].kv_heads, 8);
  EXPECT_EQ(m.nas_blocks[0].ffn_size, 14336);
  EXPECT_EQ(m.nas_blocks[6].attention, NasPart::none);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.k_proj.weight").rows, 1024);
  EXPECT_EQ(tensor(inv, "layers.0.mlp.gate_proj.weight").rows, 14336);
  EXPECT_EQ(tensor(inv, "layers.1.mlp.down_proj.weight").cols, 28672);
  EXPECT_THROW((void)tensor(inv, "layers.6.input_layernorm.weight"), std::runtime_error);
  EXPECT_THROW((void)tensor(inv, "layers.6.self_attn.q_proj.weight"), std::runtime_error);
  EXPECT_EQ(tensor(inv, "layers.6.post_attention_layernorm.weight").rows, 8192);
  EXPECT_EQ(module_total(inv, Module::attention), 49ull * 150994944);
  EXPECT_EQ(module_total(inv, Module::dense_mlp), 40365981696u);
  EXPECT_EQ(module_total(inv, Module::norms), (49ull + 80) * 8192);
  EXPECT_EQ(inv.total().value(), 49867145216u);
  EXPECT_EQ(active_params(inv, m).value(), 49867145216u);
  // Tensors: embedding, final norm, head; 5 per attention (norm, q, k, v, o); 4 per FFN.
  EXPECT_EQ(tensor_count(inv), 3u + 49u * 5u + 80u * 4u);
}

// replace_with_linear puts one h x h matrix (and the part's norm) where the sublayer was; no_op
// removes the part and its norm; intermediate_size may stand for ffn_mult (vLLM).
TEST(NemotronNas, LinearAndNoOpPartsAreCounted) {
  const std::uint64_t base = total_of(super_config());
  const std::uint64_t hh = 8192ull * 8192;
  json c = super_config();
  c["block_configs"][6]["attention"]["replace_with_linear"] = true;  // a no_op attention becomes a linear
  c["block_configs"][6]["attention"]["no_op"] = false;
  const ModelSpec lin = parse_hf_config(c.dump(), "n.json");
  EXPECT_EQ(build_inventory(lin).total().value(), base + hh + 8192);
  EXPECT_EQ(tensor(build_inventory(lin), "layers.6.self_attn.linear_attn.weight").cols, 8192);
  c = super_config();
  c["block_configs"][0]["ffn"]["replace_with_linear"] = true;  // 3 x 8192 x 14336 becomes 8192 x 8192
  EXPECT_EQ(total_of(c), base - 3ull * 8192 * 14336 + hh);
  c = super_config();
  c["block_configs"][0]["ffn"]["no_op"] = true;
  EXPECT_EQ(total_of(c), base - 3ull * 8192 * 14336 - 8192);
  c = super_config();
  c["block_configs"][0]["ffn"].erase("ffn_mult");
  c["block_configs"][0]["ffn"]["intermediate_size"] = 14336;
  EXPECT_EQ(total_of(c), base);
  c = super_config();
  c["block_configs"][1]["attention"]["n_heads_in_group"] = 64;  // one KV head: k, v 128 x 8192 each
  EXPECT_EQ(total_of(c), base - 2ull * (1024 - 128) * 8192);
}

TEST(NemotronNas, KeysItCannotHonourAreRefusedByName) {
  json c = super_config();
  c["block_configs"].erase(0);
  expect_error(c.dump(), "block_configs");
  c = super_config();
  c["block_configs"][3]["attention"]["n_heads_in_group"] = 7;
  expect_error(c.dump(), "block_configs[3].attention.n_heads_in_group");
  c = super_config();
  c["block_configs"][2]["attention"]["replace_with_linear"] = true;
  c["block_configs"][2]["attention"]["no_op"] = true;
  expect_error(c.dump(), "replace_with_linear");
  c = super_config();
  c["block_configs"][4]["ffn"]["ffn_mult"] = -1.0;
  expect_error(c.dump(), "ffn_mult");
  c = super_config();
  c["block_configs"][4]["ffn"]["sparsify"] = json::array({"x"});
  expect_error(c.dump(), "sparsify");
  c = super_config();
  c["block_configs"][4]["attention"]["num_sink_tokens"] = 4;
  expect_error(c.dump(), "num_sink_tokens");
  c = super_config();
  c["block_configs"][5]["ffn"].erase("ffn_mult");
  expect_error(c.dump(), "intermediate_size");
  // Other families do not read block_configs: refused (config_keys.cpp).
  json llama = json::parse(text_of(config_path("llama-3.1-8b")));
  llama["block_configs"] = super_config()["block_configs"];
  expect_error(llama.dump(), "block_configs");
}

TEST(NemotronNas, AnalysisIsRefusedByNameAndCountWorks) {
  const auto count = run_cli({"count", "--model", "nvidia/Llama-3_3-Nemotron-Super-49B-v1"});
  EXPECT_EQ(count.code, 0) << count.err;
  EXPECT_NE(count.out.find("49,867,145,216"), std::string::npos) << count.out;
  const auto a = run_cli({"analyze", "--model", "llama-3.3-nemotron-super-49b", "--tp", "8"});
  EXPECT_EQ(a.code, 2);
  EXPECT_NE(a.err.find("block_configs"), std::string::npos) << a.err;
  const auto s = run_cli({"search", "--model", "llama-3.3-nemotron-super-49b", "--gpus", "8", "--gpu", "h100-80g",
                          "--global-batch", "64"});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("block_configs"), std::string::npos) << s.err;
}

}  // namespace
