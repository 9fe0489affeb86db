// NVIDIA Nemotron-NAS (model_type nemotron-nas, issue 14): Llama layers pruned per layer by
// block_configs (attention skipped or replaced by a linear, key/value heads and FFN width per
// layer). Read from the published Llama-3.3-Nemotron-Super-49B-v1 config.json (provenance in
// data/models/SOURCES.md); the count is exact against the published total; analysis under megatron
// sizes every block shape by hand; block keys the reader cannot honour are refused by name.
#include <fstream>
#include <string>
#include <utility>
#include <vector>

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

// Analysis under megatron (Megatron-Core's heterogeneous layers, heterogeneous_layer_specs.py):
// each distinct block is a layer class. Super-49B's 80 blocks have 8 shapes (h 8192, 64 heads of
// 128): full attention with 8 key/value heads (n_heads_in_group 8) and FFN 14336 (ffn_mult 2.625:
// int(2 x 2.625 x 8192 / 3) = 14336, a multiple of 256) x 1 and 28672 (5.25) x 48; no_op attention
// with FFN 14336 x 5, 17920 (3.28125) x 1, 7168 (1.3125) x 10, 28672 x 1, 5632 (1.0: 5461 rounded up
// to 256) x 8 and 2816 (0.5: 2730 rounded up) x 6.
// One micro-batch of 4096 tokens, tp 1, no dropout, flash attention, bf16, saved per layer:
//   attention (full blocks): layer input, norm output, q, context 4 x 4096 x 8192 x 2 = 268,435,456;
//     k, v 2 x 4096 x 8 x 128 x 2 = 16,777,216; log-sum-exp 64 x 4096 x 4 = 1,048,576: 286,261,248
//   MLP of width f: its input and norm output 2 x 67,108,864 = 134,217,728; fc1 output 4096 x 2f x 2;
//     SwiGLU output (fc2 input) 4096 x f x 2: 134,217,728 + 24,576 f
//   f = 14336: 486,539,264; 28672: 838,860,800; 17920: 574,619,648; 7168: 310,378,496;
//     5632: 272,629,760; 2816: 203,423,744
// Layers: 1 x (286,261,248 + 486,539,264) + 48 x (286,261,248 + 838,860,800) + 5 x 486,539,264 +
// 574,619,648 + 10 x 310,378,496 + 838,860,800 + 8 x 272,629,760 + 6 x 203,423,744 = 65,130,201,088.
// One stage (pp 1) adds the token ids 4096 x 8 = 32,768, the final norm's input and output
// 134,217,728 and the fp32 logits 4096 x 128256 x 4 = 2,101,346,304 (128256 is a multiple of 128):
// 67,365,797,888 per micro-batch.
TEST(NemotronNas, AnalysedUnderMegatronOneClassPerBlockShape) {
  const ModelSpec m = parse_hf_config(super_config().dump(), "n.json");
  ASSERT_EQ(m.nas_shapes.size(), 8u);
  EXPECT_EQ(m.class_at(0), 0u);
  EXPECT_EQ(m.class_mixer(m.class_at(0)), MixerKind::attention);
  EXPECT_EQ(m.class_mixer(m.class_at(6)), MixerKind::none);  // block 6: no_op attention
  EXPECT_EQ(m.nas_shapes[0].kv_heads, 8);
  EXPECT_EQ(m.nas_shapes[0].ffn_size, 14336);
  const auto r = run_cli({"analyze", "--model", "llama-3.3-nemotron-super-49b", "--dp", "8", "--seq-len", "4096",
                          "--hidden-dropout", "0", "--attention-dropout", "0", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("stages").at(0).at("activations_per_microbatch").get<std::uint64_t>(), 67'365'797'888u);
  EXPECT_EQ(j.at("model").at("total_params").get<std::uint64_t>(), 49'867'145'216u);
  const auto e = run_cli({"explain", "--model", "llama-3.3-nemotron-super-49b", "--tp", "4", "--pp", "2", "--dp", "2",
                          "--seq-len", "4096", "--stage", "1"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("(no attention)"), std::string::npos) << e.out;
}

// Linear replacements and no_op FFNs (heterogeneous_layer_specs.py: TELayerNormColumnParallelLinearGathered
// saves its input and its norm's output, h each per token; a no_op part saves nothing). From the
// Super-49B case above (67,365,797,888 per micro-batch of 4096 tokens, tp 1):
//   block 0 (full attention, FFN 14336) -> FFN replaced by a linear: the MLP's 486,539,264 becomes
//     2 x 4096 x 8192 x 2 = 134,217,728: -352,321,536;
//   block 6 (no_op attention, FFN 14336) -> attention replaced by a linear: +134,217,728 (the MLP
//     keeps its input and norm output, no longer the layer's input);
//   block 8 (full attention, FFN 28672) -> no_op FFN: -838,860,800.
// 67,365,797,888 - 352,321,536 + 134,217,728 - 838,860,800 = 66,308,833,280, in 10 block shapes
// (block 0's old shape gone; three new ones).
TEST(NemotronNas, LinearReplacementsAndNoOpFfnsAnalysed) {
  json c = super_config();
  c["block_configs"][0]["ffn"]["replace_with_linear"] = true;
  c["block_configs"][6]["attention"]["replace_with_linear"] = true;
  c["block_configs"][6]["attention"]["no_op"] = false;
  c["block_configs"][8]["ffn"]["no_op"] = true;
  const ModelSpec m = parse_hf_config(c.dump(), "n.json");
  EXPECT_EQ(m.nas_shapes.size(), 10u);
  const std::string path = ::testing::TempDir() + "/nas-linear.json";
  {
    std::ofstream f(path);
    f << c.dump();
  }
  const auto r = run_cli({"analyze", "--model", path, "--dp", "8", "--seq-len", "4096", "--hidden-dropout", "0",
                          "--attention-dropout", "0", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("stages").at(0).at("activations_per_microbatch").get<std::uint64_t>(), 66'308'833'280u);
  // Full recomputation keeps each layer's input whatever its parts: 80 x 4096 x 8192 x 2, plus the
  // stage's token ids, final norm input and output and logits (2,235,596,800).
  const auto full = run_cli({"analyze", "--model", path, "--dp", "8", "--seq-len", "4096", "--hidden-dropout", "0",
                             "--attention-dropout", "0", "--recompute", "full", "--format", "json"});
  ASSERT_EQ(full.code, 0) << full.err;
  EXPECT_EQ(json::parse(full.out).at("stages").at(0).at("activations_per_microbatch").get<std::uint64_t>(),
            80ull * 67'108'864 + 2'235'596'800ull);
}

// count works under every profile; what analysis cannot honour is refused by name: another
// profile, a tp that does not divide a block's key/value heads (8), context parallelism, adapters,
// an identity block; a timed search (the step-time model does not time these blocks), while a
// search by memory runs.
TEST(NemotronNas, RefusedSetupsAndCountWorks) {
  const auto count = run_cli({"count", "--model", "nvidia/Llama-3_3-Nemotron-Super-49B-v1"});
  EXPECT_EQ(count.code, 0) << count.err;
  EXPECT_NE(count.out.find("49,867,145,216"), std::string::npos) << count.out;
  const std::string model = "llama-3.3-nemotron-super-49b";
  for (const auto& [args, field] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--profile", "torchtitan"}, "--profile"},
           {{"--tp", "16"}, "--tp"},
           {{"--cp", "2"}, "--cp"},
           {{"--finetune", "lora"}, "--finetune"}}) {
    std::vector<std::string> a = {"analyze", "--model", model, "--dp", "1"};
    a.insert(a.end(), args.begin(), args.end());
    const auto out = run_cli(a);
    EXPECT_EQ(out.code, 2) << field;
    EXPECT_NE(out.err.find(field), std::string::npos) << out.err;
  }
  // Counted, not analysed: a block whose attention and FFN are both no_op (an identity layer), and
  // more distinct block shapes than the evaluator's layer classes (10).
  json identity = super_config();
  identity["block_configs"][6]["ffn"] = {{"no_op", true}, {"replace_with_linear", false}};
  json many = super_config();
  for (std::size_t i = 0; i < 11; ++i) many["block_configs"][i]["ffn"]["ffn_mult"] = 0.25 * static_cast<double>(i + 1);
  for (const auto& [config, named] : {std::pair{identity, "both no_op"}, std::pair{many, "distinct block_configs shapes"}}) {
    const std::string path = ::testing::TempDir() + "/nas-refused.json";
    {
      std::ofstream f(path);
      f << config.dump();
    }
    EXPECT_EQ(run_cli({"count", "--model", path}).code, 0) << named;
    const auto a = run_cli({"analyze", "--model", path, "--dp", "8"});
    EXPECT_EQ(a.code, 2) << named;
    EXPECT_NE(a.err.find(named), std::string::npos) << a.err;
  }
  const auto timed = run_cli({"search", "--model", model, "--gpus", "8", "--gpu", "h100-80g", "--global-batch", "64"});
  EXPECT_EQ(timed.code, 2);
  EXPECT_NE(timed.err.find("Nemotron-NAS"), std::string::npos) << timed.err;
  const auto by_memory = run_cli({"search", "--model", model, "--gpus", "32", "--gpu-memory", "80GiB", "--global-batch", "64"});
  EXPECT_EQ(by_memory.code, 0) << by_memory.err;
}

}  // namespace
