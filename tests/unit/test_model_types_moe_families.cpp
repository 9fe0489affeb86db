// Model types added with issue 14 beyond GLM-4.5 and gpt-oss (OLMoE, dots.llm1, ERNIE-4.5), each read from a
// published config.json under tests/data/configs (provenance: data/models/SOURCES.md), with its
// exact total and per-module totals by hand against the published figure.
#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"

#include "unit/inventory_helpers.hpp"

namespace {

using namespace moemem;
using namespace moemem::test;

// OLMoE-1B-7B-0924 (allenai): h 2048, 16 heads = 16 KV heads of 128 (hidden / heads), no
// biases, q_norm over 16 x 128 = 2048 channels and k_norm over 16 x 128 = 2048 (full width, not
// per head), 16 layers all MoE with 64 experts of 1024 and a 64 x 2048 router, vocab 50304
// untied. The checkpoint's three safetensors headers (revision 6d84c485) hold 3219 BF16 tensors
// and 6,919,161,856 parameters (data/models/SOURCES.md).
TEST(MoeFamilies, OlmoeIsExactAgainstTheCheckpoint) {
  const ModelSpec m = load_model(config_path("olmoe-1b-7b"));
  EXPECT_EQ(m.model_type, "olmoe");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.num_moe_layers(), 16);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.q_norm.weight").rows, 2048);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.k_norm.weight").rows, 2048);
  EXPECT_EQ(tensor(inv, "layers.0.mlp.gate.weight").rows, 64);
  EXPECT_EQ(tensor(inv, "layers.0.mlp.experts.*.down_proj.weight").cols, 1024);
  // Per module: embedding 50304 x 2048 = 103,022,592; head the same + final norm 2048;
  // attention 16 x 4 x 2048 x 2048 = 268,435,456; norms 16 x (2 x 2048 + 2048 + 2048) = 131,072;
  // router 16 x 64 x 2048 = 2,097,152; experts 16 x 64 x 3 x 2048 x 1024 = 6,442,450,944.
  EXPECT_EQ(module_total(inv, Module::embedding), 103022592u);
  EXPECT_EQ(module_total(inv, Module::output_head), 103024640u);
  EXPECT_EQ(module_total(inv, Module::attention), 268435456u);
  EXPECT_EQ(module_total(inv, Module::norms), 131072u);
  EXPECT_EQ(module_total(inv, Module::router), 2097152u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 6442450944u);
  EXPECT_EQ(inv.total().value(), 6919161856u);
  // 16 x (8 attention and norm tensors + router + 64 x 3 experts) + embedding, norm, head.
  EXPECT_EQ(tensor_count(inv), 3219u);
  // OlmoeAttention derives head_dim; a contradicting one is named.
  nlohmann::json c = nlohmann::json::parse(text_of(config_path("olmoe-1b-7b")));
  c["head_dim"] = 64;
  expect_error(c.dump(), "head_dim");
  // attention_bias puts biases on q, k, v and o: 16 x (3 x 2048 + 2048) more.
  c.erase("head_dim");
  c["attention_bias"] = true;
  EXPECT_EQ(build_inventory(parse_hf_config(c.dump(), "b.json")).total().value(), 6919161856ull + 16ull * 4 * 2048);
}

// dots.llm1 (rednote-hilab): h 4096, 32 heads = 32 KV heads of 128 with per-head q/k norms,
// layer 0 dense (10944), 61 MoE layers of 128 experts of 1408 with a router bias and a shared
// MLP of 2 x 1408, vocab 152064 untied. No published safetensors total was found; the model card
// gives "14B activated, 142B total" (truncated: by hand 142.77 B and 14.02 B).
TEST(MoeFamilies, Dots1ByHand) {
  const ModelSpec m = load_model(config_path("dots-llm1"));
  EXPECT_EQ(m.model_type, "dots1");
  EXPECT_EQ(m.layer_kinds[0], LayerKind::dense);
  EXPECT_EQ(m.num_moe_layers(), 61);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.q_norm.weight").rows, 128);
  EXPECT_EQ(tensor(inv, "layers.1.mlp.gate.e_score_correction_bias").rows, 128);
  EXPECT_EQ(tensor(inv, "layers.1.mlp.shared_experts.up_proj.weight").rows, 2816);
  // Per module: attention 62 x (4 x 4096 x 4096) = 4,160,749,568; norms 62 x (2 x 4096 + 2 x 128)
  // = 523,776; dense MLP 3 x 4096 x 10944 = 134,479,872; router 61 x (128 x 4096 + 128)
  // = 31,989,376; experts 61 x 128 x 3 x 4096 x 1408 = 135,090,143,232; shared 61 x 3 x 4096 x
  // 2816 = 2,110,783,488; embedding 152064 x 4096 = 622,854,144; head that + 4096.
  EXPECT_EQ(module_total(inv, Module::attention), 4160749568u);
  EXPECT_EQ(module_total(inv, Module::norms), 523776u);
  EXPECT_EQ(module_total(inv, Module::dense_mlp), 134479872u);
  EXPECT_EQ(module_total(inv, Module::router), 31989376u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 135090143232u);
  EXPECT_EQ(module_total(inv, Module::shared_experts), 2110783488u);
  EXPECT_EQ(module_total(inv, Module::embedding), 622854144u);
  EXPECT_EQ(module_total(inv, Module::output_head), 622858240u);
  EXPECT_EQ(inv.total().value(), 142774381696u);
  EXPECT_GE(inv.total().value(), 142000000000u);  // the card's "142B total"
  EXPECT_LT(inv.total().value(), 143000000000u);
  // Active: 6 of 128 experts per MoE layer: 142,774,381,696 - 61 x 122 x 3 x 4096 x 1408.
  EXPECT_EQ(active_params(inv, m).value(), 142774381696ull - 61ull * 122 * 3 * 4096 * 1408);
}

// ERNIE-4.5-21B-A3B (baidu, -PT): h 2560, 20 heads and 4 KV heads of 128, no biases, layer 0
// dense (12288), layers 1-27 MoE (64 experts of 1536, a 64 x 2560 gate with a [1, 64] correction
// bias, a shared MLP of 2 x 1536), vocab 103424 tied, one MTP layer (emb and hidden norms, a
// 2560 x 5120 projection and a dense decoder block; embedding, final norm and head shared). No
// published safetensors total was found: the card says 21B total, 3B activated; by hand 21.95 B
// with the MTP layer (21.83 B without) and 3.35 B active.
TEST(MoeFamilies, Ernie45ByHand) {
  const ModelSpec m = load_model(config_path("ernie-4.5-21b-a3b"));
  EXPECT_EQ(m.model_type, "ernie4_5_moe");
  EXPECT_EQ(m.layer_kinds[0], LayerKind::dense);
  EXPECT_EQ(m.num_moe_layers(), 27);
  EXPECT_EQ(m.mtp_layers, 1);
  EXPECT_EQ(m.mtp_kind(), LayerKind::dense);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.1.mlp.moe_statics.e_score_correction_bias").rows, 64);
  EXPECT_EQ(tensor(inv, "layers.1.mlp.shared_experts.gate_proj.weight").rows, 3072);
  EXPECT_EQ(tensor(inv, "mtp_linear_proj.0.weight").cols, 5120);
  EXPECT_EQ(tensor(inv, "mtp_block.0.mlp.up_proj.weight").rows, 12288);
  EXPECT_THROW((void)tensor(inv, "lm_head.weight"), std::runtime_error);  // tied
  // Per module (28 layers + the MTP block): attention 29 x (2 x 2560 x 2560 + 2 x 512 x 2560)
  // = 456,130,560; norms 29 x 2 x 2560 = 148,480; dense MLP 2 x 3 x 2560 x 12288 = 188,743,680;
  // router 27 x (64 x 2560 + 64) = 4,425,408; experts 27 x 64 x 3 x 2560 x 1536
  // = 20,384,317,440; shared 27 x 3 x 2560 x 3072 = 637,009,920; embedding 103424 x 2560
  // = 264,765,440; head: the final norm, 2560; MTP 2 x 2560 + 2560 x 5120 = 13,112,320.
  EXPECT_EQ(module_total(inv, Module::attention), 456130560u);
  EXPECT_EQ(module_total(inv, Module::norms), 148480u);
  EXPECT_EQ(module_total(inv, Module::dense_mlp), 188743680u);
  EXPECT_EQ(module_total(inv, Module::router), 4425408u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 20384317440u);
  EXPECT_EQ(module_total(inv, Module::shared_experts), 637009920u);
  EXPECT_EQ(module_total(inv, Module::embedding), 264765440u);
  EXPECT_EQ(module_total(inv, Module::output_head), 2560u);
  EXPECT_EQ(module_total(inv, Module::mtp), 13112320u);
  EXPECT_EQ(inv.total().value(), 21948655808u);
  // Without the MTP layer: 15,728,640 + 5,120 + 94,371,840 + 13,112,320 = 123,217,920 fewer.
  nlohmann::json c = nlohmann::json::parse(text_of(config_path("ernie-4.5-21b-a3b")));
  c["num_nextn_predict_layers"] = 0;
  EXPECT_EQ(build_inventory(parse_hf_config(c.dump(), "e.json")).total().value(), 21825437888u);
  // moe_layer_end_index -1 is the last layer; an interval of 2 keeps layers 1, 3, ..., 27.
  c["moe_layer_end_index"] = -1;
  c["moe_layer_interval"] = 2;
  EXPECT_EQ(parse_hf_config(c.dump(), "e.json").num_moe_layers(), 14);
  c["use_bias"] = true;  // biases on every projection, not modelled: refused by name
  expect_error(c.dump(), "use_bias");
}

// GLM-4.7-Flash (glm4_moe_lite): h 2048, 47 layers, MLA with 20 heads (q_lora 768, kv_lora 512,
// nope 192, rope 64, v 256), layer 0 dense (ffn 10240), 46 MoE layers of 64 experts (1536) with
// one shared expert and a router bias, one MTP layer, vocab 154880 untied. A layer's attention:
// q_a 768 x 2048 = 1,572,864, q_b 20 x 256 x 768 = 3,932,160, kv_a 576 x 2048 = 1,179,648,
// kv_b 20 x 448 x 512 = 4,587,520, o 2048 x 5120 = 10,485,760: 21,757,952; norms 768 + 512 +
// 2 x 2048 = 5,376. 48 decoder layers (the MTP layer's is MoE): attention 1,044,381,696, norms
// 258,048; dense MLP 3 x 2048 x 10240 = 62,914,560; 47 MoE layers: router 47 x (64 x 2048 + 64)
// = 6,163,392, experts 47 x 64 x 3 x 2048 x 1536 = 28,387,049,472, shared 47 x 3 x 2048 x 1536
// = 443,547,648; embedding and head 154880 x 2048 = 317,194,240 each (+ final norm 2048); MTP:
// enorm, hnorm, shared_head.norm 3 x 2048, eh_proj 2048 x 4096 = 8,388,608 and the stored
// embedding and head copies 634,388,480: 642,783,232. Total 31,221,488,576. No exact published
// total was found (data/models/SOURCES.md): the decoder layers without the MTP layer,
// 29,309,003,392, are the 29.3B a public re-quantisation lists for its quantised tensors.
TEST(MoeFamilies, Glm47FlashByHand) {
  const ModelSpec m = load_model(config_path("glm-4.7-flash"));
  EXPECT_EQ(m.model_type, "glm4_moe_lite");
  EXPECT_EQ(m.attention, AttentionKind::mla);
  EXPECT_EQ(m.num_moe_layers(), 46);
  EXPECT_EQ(m.mtp_layers, 1);
  EXPECT_TRUE(m.moe.router_bias);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(module_total(inv, Module::attention), 1044381696u);
  EXPECT_EQ(module_total(inv, Module::norms), 258048u);
  EXPECT_EQ(module_total(inv, Module::dense_mlp), 62914560u);
  EXPECT_EQ(module_total(inv, Module::router), 6163392u);
  EXPECT_EQ(module_total(inv, Module::routed_experts), 28387049472u);
  EXPECT_EQ(module_total(inv, Module::shared_experts), 443547648u);
  EXPECT_EQ(module_total(inv, Module::embedding), 317194240u);
  EXPECT_EQ(module_total(inv, Module::output_head), 317196288u);
  EXPECT_EQ(module_total(inv, Module::mtp), 642783232u);
  EXPECT_EQ(inv.total().value(), 31221488576u);
  // The router bias is there whatever topk_method says (Glm4MoeTopkRouter registers it).
  nlohmann::json c = nlohmann::json::parse(text_of(config_path("glm-4.7-flash")));
  c.erase("topk_method");
  EXPECT_TRUE(parse_hf_config(c.dump(), "g.json").moe.router_bias);
  // transformers 5's mlp_layer_types must spell the same split.
  std::vector<std::string> types(47, "sparse");
  types[0] = "dense";
  c["mlp_layer_types"] = types;
  EXPECT_EQ(parse_hf_config(c.dump(), "g.json").num_moe_layers(), 46);
  types[5] = "dense";
  c["mlp_layer_types"] = types;
  expect_error(c.dump(), "mlp_layer_types");
  c.erase("mlp_layer_types");
  c["attention_bias"] = true;
  expect_error(c.dump(), "attention_bias");
}

}  // namespace
