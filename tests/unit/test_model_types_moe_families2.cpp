// Model types added with issue 14 whose experts are stored fused or under their own names (IBM
// Granite MoE, DBRX, MiniMax-M2, Hunyuan-A13B), each read from a config.json under tests/data/configs (provenance:
// data/models/SOURCES.md), with its exact total and per-module totals by hand against the
// published figure, an analyze run under each profile that supports it, and the keys that add
// tensors moemem does not model refused by name.
#include <algorithm>
#include <set>
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

// Checkpoint tensors: one per distinct name (fused tensors appear once per part in the inventory).
std::size_t distinct_names(const Inventory& inv) {
  std::set<std::string> names;
  for (const auto& t : inv.tensors) names.insert(t.name);
  return names.size();
}

json granite_config() { return json::parse(text_of(config_path("granite-3.1-1b-a400m"))); }

// Granite-3.1-1B-A400M (ibm-granite, -instruct): h 1024, 16 heads of 64 and 8 KV heads, no
// biases, 24 layers all MoE with 32 experts of 512 (top 8), vocab 49155 tied. Published: the
// pinned checkpoint (revision 0da7a48b) loads with sum(p.numel()) = 1,334,628,352 and its
// model.safetensors is 2,669,283,096 bytes (2 x 1,334,628,352 + a 26,392-byte header); see
// data/models/SOURCES.md.
TEST(MoeFamilies2, GraniteMoeIsExactAgainstTheCheckpoint) {
  const ModelSpec m = load_model("granite-3.1-1b-a400m");
  EXPECT_EQ(m.model_type, "granitemoe");
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.num_moe_layers(), 24);
  EXPECT_TRUE(m.tie_embeddings);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.block_sparse_moe.router.layer.weight").rows, 32);
  EXPECT_EQ(tensor(inv, "layers.0.block_sparse_moe.output_linear.weight").cols, 512);
  EXPECT_EQ(tensor(inv, "layers.0.block_sparse_moe.output_linear.weight").copies, 32);
  EXPECT_THROW((void)tensor(inv, "lm_head.weight"), std::runtime_error);  // tied
  // input_linear [32, 2 x 512, 1024]: gate and up halves, 32 x 1024 x 1024 in all.
  EXPECT_EQ(role_total(inv, Role::expert_gate) + role_total(inv, Role::expert_up), 24ull * 32 * 1024 * 1024);
  // Per module: embedding 49155 x 1024 = 50,334,720; head: the final norm, 1024; attention
  // 24 x (2 x 1024 x 1024 + 2 x 512 x 1024) = 75,497,472; norms 24 x 2 x 1024 = 49,152; router
  // 24 x 32 x 1024 = 786,432; experts 24 x 32 x 3 x 1024 x 512 = 1,207,959,552.
  EXPECT_EQ(module_total(inv, Module::embedding), 50334720u);
  EXPECT_EQ(module_total(inv, Module::output_head), 1024u);
  EXPECT_EQ(module_total(inv, Module::attention), 75497472u);
  EXPECT_EQ(module_total(inv, Module::norms), 49152u);
  EXPECT_EQ(module_total(inv, Module::router), 786432u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 1207959552u);
  EXPECT_EQ(module_total(inv, Module::shared_experts), 0u);
  EXPECT_EQ(inv.total().value(), 1334628352u);
  // 24 x (q, k, v, o, 2 norms, router, input_linear, output_linear) + embedding + final norm.
  EXPECT_EQ(distinct_names(inv), 24u * 9 + 2);
  // Active: 8 of 32 experts: 1,334,628,352 - 24 x 24 x 3 x 1024 x 512 = 428,658,688 ("A400M").
  EXPECT_EQ(active_params(inv, m).value(), 428658688u);
}

// Granite-3.x-3B-A800M: the same config with h 1536, 32 layers, 24 heads of 64, 8 KV heads and
// 40 experts. Published: granite-guardian-3.2-3b-a800m (this architecture) has 3,298,793,472
// parameters (SOURCES.md). By hand: 32 x (2 x 1536^2 + 2 x 512 x 1536 + 2 x 1536 + 40 x 1536 +
// 40 x 3 x 1536 x 512) = 32 x 100,727,808 = 3,223,289,856; + 49155 x 1536 = 75,502,080; + 1536.
TEST(MoeFamilies2, Granite3bA800mMatchesItsPublishedCount) {
  json c = granite_config();
  c["hidden_size"] = 1536;
  c["num_hidden_layers"] = 32;
  c["num_attention_heads"] = 24;
  c["num_local_experts"] = 40;
  EXPECT_EQ(build_inventory(parse_hf_config(c.dump(), "g3b.json")).total().value(), 3298793472u);
}

// granitemoeshared (GraniteMoeSharedMLP beside the experts): no published config was found, so
// this is the 1B-A400M config with a shared MLP of 1024: shared_mlp.input_linear [2048, 1024]
// and output_linear [1024, 1024], 24 x 3 x 1024 x 1024 = 75,497,472 more.
TEST(MoeFamilies2, GraniteMoeSharedAddsTheSharedMlp) {
  json c = granite_config();
  c["model_type"] = "granitemoeshared";
  c["shared_intermediate_size"] = 1024;
  const ModelSpec m = parse_hf_config(c.dump(), "gs.json");
  EXPECT_EQ(m.moe.num_shared_experts, 1);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.3.shared_mlp.output_linear.weight").cols, 1024);
  EXPECT_EQ(module_total(inv, Module::shared_experts), 75497472u);
  EXPECT_EQ(inv.total().value(), 1334628352ull + 75497472ull);
  c["shared_intermediate_size"] = 0;  // GraniteMoeSharedDecoderLayer: shared_mlp None
  EXPECT_EQ(build_inventory(parse_hf_config(c.dump(), "gs.json")).total().value(), 1334628352u);
}

TEST(MoeFamilies2, GraniteRefusesWhatItDoesNotModel) {
  json c = granite_config();
  c["shared_intermediate_size"] = 1024;  // a shared MLP under model_type granitemoe
  expect_error(c.dump(), "shared_intermediate_size");
  c = granite_config();
  c["mlp_bias"] = true;  // no such bias in GraniteMoeMoE
  expect_error(c.dump(), "mlp_bias");
  c = granite_config();
  c["head_dim"] = 128;  // GraniteMoeAttention derives 1024 / 16 = 64
  expect_error(c.dump(), "head_dim");
  c = granite_config();
  c["attention_bias"] = true;  // biases on q, k, v, o: 24 x (1024 + 512 + 512 + 1024) = 73,728 more
  EXPECT_EQ(build_inventory(parse_hf_config(c.dump(), "g.json")).total().value(), 1334628352ull + 73728ull);
}

// Neither Megatron-Bridge nor torchtitan has a Granite MoE model (their trees at the mirrored
// commits name none); its structure is what Megatron-Core's GPTModel builds from flags (grouped-
// query attention, MoE layers, a shared expert for the shared variant; the multipliers are
// scalars), which the megatron profile analyses. torchtitan and the hf profile refuse it by name.
TEST(MoeFamilies2, GraniteAnalysesUnderMegatron) {
  const auto r = run_cli({"analyze", "--model", "ibm-granite/granite-3.1-1b-a400m-instruct", "--profile", "megatron",
                          "--ep", "8", "--dp", "8", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(json::parse(r.out).contains("stages"));
  const auto count = run_cli({"count", "--model", "granite-3.1-1b-a400m", "--format", "json"});
  ASSERT_EQ(count.code, 0) << count.err;
  EXPECT_EQ(json::parse(count.out).at("total_params").get<std::uint64_t>(), 1334628352u);
  const auto titan = run_cli({"analyze", "--model", "granite-3.1-1b-a400m", "--profile", "torchtitan"});
  EXPECT_EQ(titan.code, 2);
  EXPECT_NE(titan.err.find("torchtitan"), std::string::npos) << titan.err;
  const auto hf = run_cli({"analyze", "--model", "granite-3.1-1b-a400m", "--profile", "hf"});
  EXPECT_EQ(hf.code, 2);
  EXPECT_NE(hf.err.find("granitemoe"), std::string::npos) << hf.err;
}

// DBRX (databricks/dbrx-base): d_model 6144, 48 heads of 128 and 8 KV heads in one fused Wqkv,
// 40 blocks of 16 experts of 10752 (top 4), LayerNorms without a bias, vocab 100352 untied. No
// published safetensors total was found; the model card gives 132B total, 36B active (by hand
// 131.60 B and 36.47 B).
TEST(MoeFamilies2, DbrxByHand) {
  const ModelSpec m = load_model("dbrx-base");
  EXPECT_EQ(m.model_type, "dbrx");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.num_moe_layers(), 40);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "wte.weight").rows, 100352);
  EXPECT_EQ(tensor(inv, "blocks.39.norm_attn_norm.norm_2.weight").rows, 6144);
  EXPECT_EQ(tensor(inv, "blocks.0.ffn.router.layer.weight").rows, 16);
  EXPECT_EQ(tensor(inv, "blocks.0.ffn.experts.mlp.v1").copies, 16);
  EXPECT_EQ(tensor(inv, "norm_f.weight").rows, 6144);
  // Wqkv: (6144 + 2 x 8 x 128) x 6144 = 50,331,648 over its q, k and v parts.
  EXPECT_EQ(role_total(inv, Role::q_proj) + role_total(inv, Role::k_proj) + role_total(inv, Role::v_proj), 40ull * 50331648);
  // Per module: attention 40 x (50,331,648 + 6144^2) = 40 x 88,080,384 = 3,523,215,360; norms
  // 40 x 2 x 6144 = 491,520; router 40 x 16 x 6144 = 3,932,160; experts 40 x 3 x 16 x 10752 x
  // 6144 = 126,835,752,960; embedding 100352 x 6144 = 616,562,688; head that + norm_f 6144.
  EXPECT_EQ(module_total(inv, Module::attention), 3523215360u);
  EXPECT_EQ(module_total(inv, Module::norms), 491520u);
  EXPECT_EQ(module_total(inv, Module::router), 3932160u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 126835752960u);
  EXPECT_EQ(module_total(inv, Module::embedding), 616562688u);
  EXPECT_EQ(module_total(inv, Module::output_head), 616568832u);
  EXPECT_EQ(inv.total().value(), 131596523520u);
  EXPECT_GE(inv.total().value(), 131500000000u);  // the card's "132B total"
  // Active: 4 of 16 experts: 131,596,523,520 - 40 x 12 x 3 x 10752 x 6144 = 36,469,708,800 ("36B").
  EXPECT_EQ(active_params(inv, m).value(), 36469708800u);
  // 40 x (norm_1, Wqkv, out_proj, norm_2, router, w1, v1, w2) + wte, norm_f, lm_head.
  EXPECT_EQ(distinct_names(inv), 40u * 8 + 3);
}

TEST(MoeFamilies2, DbrxRefusesWhatItDoesNotModel) {
  const json base = json::parse(text_of(config_path("dbrx-base")));
  json c = base;
  c["tie_word_embeddings"] = true;  // DbrxConfig raises on it
  expect_error(c.dump(), "tie_word_embeddings");
  c = base;
  c["attn_config"]["qk_ln"] = true;  // llm-foundry's q/k LayerNorms: tensors DbrxAttention lacks
  expect_error(c.dump(), "attn_config.qk_ln");
  c = base;
  c["ffn_config"]["ffn_type"] = "mptglu";  // a dense FFN, not DBRX's experts
  expect_error(c.dump(), "ffn_config.ffn_type");
  c = base;
  c["n_heads"] = 47;  // head_dim is d_model / n_heads
  expect_error(c.dump(), "n_heads");
  c = base;
  c["attn_config"]["kv_n_heads"] = 5;
  expect_error(c.dump(), "kv_n_heads");
  c = base;
  c["attn_config"] = 8;
  expect_error(c.dump(), "attn_config");
  // Absent nested configs take DbrxFFNConfig's defaults (3584, 4 experts, top 1) and
  // DbrxAttentionConfig's (1 KV head); an unknown nested key is reported, not dropped.
  c = base;
  c.erase("ffn_config");
  c["attn_config"].erase("kv_n_heads");
  c["attn_config"]["rope_impl"] = "dail";
  const ModelSpec d = parse_hf_config(c.dump(), "d.json");
  EXPECT_EQ(d.moe.num_routed_experts, 4);
  EXPECT_EQ(d.moe.expert_ffn, 3584);
  EXPECT_EQ(d.num_kv_heads, 1);
  EXPECT_NE(std::find(d.unrecognised_keys.begin(), d.unrecognised_keys.end(), "attn_config.rope_impl"),
            d.unrecognised_keys.end());
}

// DBRX: GQA and MoE without a shared expert, as Megatron-Core's GPTModel builds it (no DBRX
// bridge in Megatron-Bridge, no DBRX model in torchtitan); torchtitan refuses it by name.
TEST(MoeFamilies2, DbrxAnalysesUnderMegatron) {
  const auto r = run_cli({"analyze", "--model", "databricks/dbrx-base", "--profile", "megatron", "--tp", "8", "--ep", "8",
                          "--pp", "4", "--dp", "8", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(json::parse(r.out).contains("stages"));
  EXPECT_EQ(run_cli({"analyze", "--model", "dbrx-base", "--profile", "torchtitan"}).code, 2);
}

// MiniMax-M2 (MiniMaxAI): h 3072, 48 heads and 8 KV heads of 128 with q/k norms over the whole
// projection (6144 and 1024 weights), 62 layers of 256 experts of 1536 (top 8) with a router and
// a 256-value correction bias, vocab 200064 untied; the config's 3 MTP modules are not in the
// checkpoint. Published: 228,689,764,864 parameters (the Hub's count for MiniMax-M2 and M2.1 in a
// public model table, and llama.cpp's n_params for M2.7; SOURCES.md).
TEST(MoeFamilies2, MiniMaxM2IsExactAgainstThePublishedCount) {
  const ModelSpec m = load_model("minimax-m2");
  EXPECT_EQ(m.model_type, "minimax_m2");
  EXPECT_EQ(m.mtp_layers, 0);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.q_norm.weight").rows, 6144);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.k_norm.weight").rows, 1024);
  EXPECT_EQ(tensor(inv, "layers.0.block_sparse_moe.e_score_correction_bias").rows, 256);
  EXPECT_EQ(tensor(inv, "layers.61.block_sparse_moe.experts.*.w3.weight").copies, 256);
  // Per module: attention 62 x (2 x 6144 x 3072 + 2 x 1024 x 3072) = 2,730,491,904; norms 62 x
  // (2 x 3072 + 6144 + 1024) = 825,344; router 62 x (256 x 3072 + 256) = 48,774,656; experts
  // 62 x 256 x 3 x 3072 x 1536 = 224,680,476,672; embedding 200064 x 3072 = 614,596,608; head
  // that + 3072.
  EXPECT_EQ(module_total(inv, Module::attention), 2730491904u);
  EXPECT_EQ(module_total(inv, Module::norms), 825344u);
  EXPECT_EQ(module_total(inv, Module::router), 48774656u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 224680476672u);
  EXPECT_EQ(module_total(inv, Module::embedding), 614596608u);
  EXPECT_EQ(module_total(inv, Module::output_head), 614599680u);
  EXPECT_EQ(inv.total().value(), 228689764864u);
  // Active: 8 of 256 experts: 228,689,764,864 - 62 x 248 x 3 x 3072 x 1536 = 11,030,553,088.
  EXPECT_EQ(active_params(inv, m).value(), 11030553088u);
}

TEST(MoeFamilies2, MiniMaxM2RefusesWhatItDoesNotModel) {
  const json base = json::parse(text_of(config_path("minimax-m2")));
  json c = base;
  c["shared_intermediate_size"] = 512;
  expect_error(c.dump(), "shared_intermediate_size");
  c = base;
  c["qk_norm_type"] = "per_head";
  expect_error(c.dump(), "qk_norm_type");
  c = base;
  c["attn_type_list"][3] = 0;  // MiniMax-01's lightning attention
  expect_error(c.dump(), "attn_type_list");
  c = base;
  c["attention_bias"] = true;
  expect_error(c.dump(), "attention_bias");
  // Without the correction bias (use_routing_bias false): 62 x 256 fewer.
  c = base;
  c["use_routing_bias"] = false;
  EXPECT_EQ(build_inventory(parse_hf_config(c.dump(), "m.json")).total().value(), 228689764864ull - 62ull * 256);
}

// MiniMax-M2: Megatron-Bridge's MiniMaxM2Bridge builds it as Megatron-Core's GPTModel (GQA,
// full-dimension q/k norms, sigmoid routing with expert bias, no MTP mapped); torchtitan has no
// MiniMax model and refuses it by name, as does --mtp.
TEST(MoeFamilies2, MiniMaxM2AnalysesUnderMegatron) {
  const auto r = run_cli({"analyze", "--model", "MiniMaxAI/MiniMax-M2", "--profile", "megatron", "--tp", "4", "--ep", "16",
                          "--pp", "2", "--dp", "16", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(json::parse(r.out).contains("stages"));
  EXPECT_EQ(run_cli({"analyze", "--model", "minimax-m2", "--profile", "torchtitan"}).code, 2);
  const auto mtp = run_cli({"analyze", "--model", "minimax-m2", "--profile", "megatron", "--mtp", "1", "--ep", "16", "--dp", "16"});
  EXPECT_EQ(mtp.code, 2);
  EXPECT_NE(mtp.err.find("--mtp"), std::string::npos) << mtp.err;
}

// Hunyuan-A13B (tencent, -Instruct): h 4096, 32 heads and 8 KV heads of 128 with per-head
// query/key_layernorm, 32 layers of 64 experts of 3072 (top 8) and one shared MLP of 3072, vocab
// 128167 tied. No published exact total was found; the Hub's safetensors API rounds it to 80.4B
// (SOURCES.md), which by hand is 80.39 B (untied would be 80.92 B).
TEST(MoeFamilies2, HunyuanByHand) {
  const ModelSpec m = load_model("hunyuan-a13b");
  EXPECT_EQ(m.model_type, "hunyuan_v1_moe");
  EXPECT_EQ(m.moe.top_k, 8);
  EXPECT_EQ(m.moe.shared_ffn, 3072);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.query_layernorm.weight").rows, 128);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.key_layernorm.weight").rows, 128);
  EXPECT_EQ(tensor(inv, "layers.0.mlp.gate.wg.weight").rows, 64);
  EXPECT_EQ(tensor(inv, "layers.31.mlp.shared_mlp.down_proj.weight").cols, 3072);
  // Per module: attention 32 x (2 x 4096^2 + 2 x 1024 x 4096) = 1,342,177,280; norms 32 x
  // (2 x 4096 + 2 x 128) = 270,336; router 32 x 64 x 4096 = 8,388,608; experts 32 x 64 x 3 x
  // 4096 x 3072 = 77,309,411,328; shared 32 x 3 x 4096 x 3072 = 1,207,959,552; embedding
  // 128167 x 4096 = 524,972,032; head: the final norm, 4096.
  EXPECT_EQ(module_total(inv, Module::attention), 1342177280u);
  EXPECT_EQ(module_total(inv, Module::norms), 270336u);
  EXPECT_EQ(module_total(inv, Module::router), 8388608u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 77309411328u);
  EXPECT_EQ(module_total(inv, Module::shared_experts), 1207959552u);
  EXPECT_EQ(module_total(inv, Module::embedding), 524972032u);
  EXPECT_EQ(module_total(inv, Module::output_head), 4096u);
  EXPECT_EQ(inv.total().value(), 80393183232u);
  // Active: 8 of 64 experts: 80,393,183,232 - 32 x 56 x 3 x 4096 x 3072 = 12,747,448,320 ("A13B").
  EXPECT_EQ(active_params(inv, m).value(), 12747448320u);
}

TEST(MoeFamilies2, HunyuanRefusesWhatItDoesNotModel) {
  const json base = json::parse(text_of(config_path("hunyuan-a13b")));
  json c = base;
  c["use_cla"] = true;  // k/v shared between layers: fewer projections than counted
  expect_error(c.dump(), "use_cla");
  c = base;
  c["moe_topk"][5] = 2;  // per-layer top-k
  expect_error(c.dump(), "moe_topk");
  c = base;
  c["num_shared_expert"] = json::array({1, 1});  // not one entry per layer
  expect_error(c.dump(), "num_shared_expert");
  c = base;
  c["moe_layer_num_skipped"] = 2;
  expect_error(c.dump(), "moe_layer_num_skipped");
  c = base;
  c["attention_head_dim"] = 64;
  expect_error(c.dump(), "attention_head_dim");
  // Plain integers read as the lists do; without the mixed MLP there is no shared MLP.
  c = base;
  c["moe_topk"] = 8;
  c["moe_intermediate_size"] = 3072;
  c["use_mixed_mlp_moe"] = false;
  EXPECT_EQ(build_inventory(parse_hf_config(c.dump(), "h.json")).total().value(), 80393183232ull - 1207959552ull);
}

// Hunyuan-A13B: GQA with per-head q/k norms, MoE with a shared expert; neither Megatron-Bridge
// nor torchtitan has a Hunyuan model, so the megatron profile analyses what Megatron-Core's
// GPTModel builds from flags; torchtitan refuses it by name.
TEST(MoeFamilies2, HunyuanAnalysesUnderMegatron) {
  const auto r = run_cli({"analyze", "--model", "tencent/Hunyuan-A13B-Instruct", "--profile", "megatron", "--tp", "2", "--ep", "8",
                          "--pp", "2", "--dp", "8", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(json::parse(r.out).contains("stages"));
  EXPECT_EQ(run_cli({"analyze", "--model", "hunyuan-a13b", "--profile", "torchtitan"}).code, 2);
}

}  // namespace
