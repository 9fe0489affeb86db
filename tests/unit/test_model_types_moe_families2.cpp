// Model types added with issue 14 whose experts are stored fused or under their own names (IBM
// Granite MoE), each read from a config.json under tests/data/configs (provenance:
// data/models/SOURCES.md), with its exact total and per-module totals by hand against the
// published figure, an analyze run under each profile that supports it, and the keys that add
// tensors moemem does not model refused by name.
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

}  // namespace
