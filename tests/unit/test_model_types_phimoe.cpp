// Phi-3.5-MoE (phimoe) read from its config.json under tests/data/configs (provenance:
// data/models/SOURCES.md): the exact total and per-module totals by hand, keys that change
// tensors, and the profiles that train it.
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "moemem/analyze.hpp"
#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"
#include "moemem/training.hpp"

#include "unit/inventory_helpers.hpp"

namespace {

using namespace moemem;
using namespace moemem::test;

std::uint64_t total_of(const nlohmann::json& c) { return build_inventory(parse_hf_config(c.dump(), "p.json")).total().value(); }

// microsoft/Phi-3.5-MoE-instruct: h 4096, 32 heads and 8 KV heads of 128 with biases on q, k, v
// and o, LayerNorms with weight and bias, 32 layers each a block_sparse_moe of 16 experts of 6400
// (top 2) with a 16 x 4096 gate, vocab 32064 untied, lm_head with a bias.
// Per layer: q and o 4096 x 4096 = 16,777,216 each, k and v 1024 x 4096 = 4,194,304 each,
// biases 4096 + 1024 + 1024 + 4096 = 10,240 (41,953,280); norms 2 x (4096 + 4096) = 16,384;
// gate 65,536; experts 16 x 3 x 6400 x 4096 = 1,258,291,200. 32 layers: attention
// 1,342,504,960; norms 524,288 (+ the final norm's bias 4096: 528,384); router 2,097,152; experts
// 40,265,318,400. Embedding 32064 x 4096 = 131,334,144; head: final norm weight 4096 + lm_head
// 131,334,144 + its bias 32,064 = 131,370,304. Total 41,873,153,344. No published exact total
// was found; the model card says 42B total, 6.6B active (by hand 41.87 B and 6.64 B).
TEST(PhimoeModelTypes, Phi35MoeByHand) {
  const ModelSpec m = load_model(config_path("phi-3.5-moe"));
  EXPECT_EQ(m.model_type, "phimoe");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.num_moe_layers(), 32);
  EXPECT_TRUE(m.unrecognised_keys.empty()) << m.unrecognised_keys.front();
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.block_sparse_moe.gate.weight").rows, 16);
  EXPECT_EQ(tensor(inv, "layers.0.block_sparse_moe.experts.*.w2.weight").cols, 6400);
  EXPECT_EQ(tensor(inv, "layers.0.input_layernorm.bias").rows, 4096);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.o_proj.bias").rows, 4096);
  EXPECT_EQ(tensor(inv, "lm_head.bias").rows, 32064);
  EXPECT_EQ(tensor(inv, "norm.bias").rows, 4096);
  EXPECT_EQ(module_total(inv, Module::embedding), 131334144u);
  EXPECT_EQ(module_total(inv, Module::attention), 1342504960u);
  EXPECT_EQ(module_total(inv, Module::norms), 528384u);
  EXPECT_EQ(module_total(inv, Module::router), 2097152u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 40265318400u);
  EXPECT_EQ(module_total(inv, Module::output_head), 131370304u);
  EXPECT_EQ(inv.total().value(), 41873153344u);
  EXPECT_GE(inv.total().value(), 41500000000u);  // the card's "42B"
  EXPECT_LT(inv.total().value(), 42500000000u);
  // Active: 2 of 16 experts: 41,873,153,344 - 32 x 14 x 3 x 6400 x 4096 = 6,640,999,744 (card: 6.6B).
  EXPECT_EQ(active_params(inv, m).value(), 6640999744u);
  EXPECT_EQ(build_inventory(load_model("microsoft/Phi-3.5-MoE-instruct")).total().value(), 41873153344u);
}

TEST(PhimoeModelTypes, KeysThatChangeTensors) {
  nlohmann::json c = nlohmann::json::parse(text_of(config_path("phi-3.5-moe")));
  c["lm_head_bias"] = false;  // no head bias: 32064 fewer
  EXPECT_EQ(total_of(c), 41873153344ull - 32064);
  c["attention_bias"] = false;  // and no q/k/v/o biases: 32 x 10,240 fewer
  EXPECT_EQ(total_of(c), 41873153344ull - 32064 - 32ull * 10240);
  nlohmann::json head = nlohmann::json::parse(text_of(config_path("phi-3.5-moe")));
  head["head_dim"] = 64;  // PhimoeAttention derives it from hidden / heads
  expect_error(head.dump(), "head_dim");
  for (const char* key : {"qk_layernorm", "n_shared_experts", "mlp_bias"}) {
    nlohmann::json bad = nlohmann::json::parse(text_of(config_path("phi-3.5-moe")));
    bad[key] = key == std::string("n_shared_experts") ? nlohmann::json(1) : nlohmann::json(true);
    expect_error(bad.dump(), key);
  }
}

// Neither Megatron-Bridge nor torchtitan trains Phi-3.5-MoE: refused by the profile's name; the
// paper profile's idealised accounting runs.
TEST(PhimoeModelTypes, OnlyThePaperProfileAnalysesIt) {
  const ModelSpec m = load_model("phi-3.5-moe");
  const Inventory inv = build_inventory(m);
  ParallelConfig p;
  p.dp = 8;
  p.ep = 8;
  const Layout layout = resolve_layout(m, p);
  TrainingConfig t;
  t.micro_batch = 1;
  t.seq_len = 4096;
  for (const auto& [name, field] : {std::pair{"megatron", "--profile"}, std::pair{"torchtitan", "--profile"},
                                    std::pair{"hf", "--model"}}) {
    try {
      (void)analyze(m, inv, get_profile(name), layout, t);
      ADD_FAILURE() << "analysed under " << name;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), field) << name;
      EXPECT_NE(std::string(e.what()).find("phimoe"), std::string::npos) << e.what();
    }
  }
  const MemoryReport r = analyze(m, inv, get_profile("paper"), layout, t);
  EXPECT_GT(r.stages.at(0).bytes.total().value(), 0u);
}

}  // namespace
