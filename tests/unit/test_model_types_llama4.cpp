// Llama-4 (llama4_text, and the multimodal llama4 config with its vision tower) read from the
// config.json files under tests/data/configs (provenance: data/models/SOURCES.md): exact totals
// and per-module totals by hand against the published counts, the keys and setups refused, and
// what its training saves under the megatron profile.
#include <set>
#include <string>
#include <utility>
#include <vector>

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

nlohmann::json config_json(const std::string& name) { return nlohmann::json::parse(text_of(config_path(name))); }

ModelSpec parse(const nlohmann::json& c) { return parse_hf_config(c.dump(), "l4.json"); }

std::size_t distinct_names(const Inventory& inv) {
  std::set<std::string> names;
  for (const auto& t : inv.tensors) names.insert(t.name);
  return names.size();
}

// meta-llama/Llama-4-Scout-17B-16E, text model: h 5120, 40 heads and 8 KV heads of 128, 48
// layers, all MoE (interleave_moe_layer_step 1), 16 experts of 8192, one shared expert of 8192,
// vocab 202048, untied. Per layer: q and o 5120 x 5120 = 26,214,400 each, k and v 1024 x 5120 =
// 5,242,880 each: attention 62,914,560; norms 2 x 5120 = 10,240 (the q/k L2 norm has no weight);
// router 16 x 5120 = 81,920; experts gate_up_proj 16 x 5120 x 16384 = 1,342,177,280 and
// down_proj 16 x 8192 x 5120 = 671,088,640: 2,013,265,920; shared 3 x 8192 x 5120 = 125,829,120.
// Layer 2,202,101,760; 48 layers 105,700,884,480. Embedding and lm_head 202048 x 5120 =
// 1,034,485,760 each, final norm 5120: 107,769,861,120. Active (top 1 of 16): the routed experts
// 48 x 2,013,265,920 = 96,636,764,160 counted as 1/16, 6,039,797,760: 17,172,894,720 (the
// card's "17B active").
TEST(Llama4ModelTypes, ScoutTextIsExact) {
  const ModelSpec m = load_model("llama-4-scout");
  EXPECT_EQ(m.model_type, "llama4_text");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_TRUE(m.qk_l2_norm);
  EXPECT_TRUE(m.moe_probs_on_input);
  EXPECT_EQ(m.attention_chunk_size, 8192);
  EXPECT_EQ(m.nope_layers, 12);  // every 4th layer (no_rope_layer_interval 4)
  EXPECT_EQ(m.num_moe_layers(), 48);
  EXPECT_FALSE(m.has_vision());
  EXPECT_TRUE(m.unrecognised_keys.empty()) << m.unrecognised_keys.front();
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.feed_forward.router.weight").rows, 16);
  EXPECT_EQ(tensor(inv, "layers.0.feed_forward.experts.gate_up_proj").copies, 16);
  EXPECT_EQ(tensor(inv, "layers.0.feed_forward.experts.down_proj").cols, 8192);
  EXPECT_EQ(tensor(inv, "layers.47.feed_forward.shared_expert.down_proj.weight").cols, 8192);
  EXPECT_THROW((void)tensor(inv, "layers.0.self_attn.q_norm.weight"), std::runtime_error);
  EXPECT_THROW((void)tensor(inv, "layers.0.self_attn.q_proj.bias"), std::runtime_error);
  EXPECT_EQ(module_total(inv, Module::embedding), 1034485760u);
  EXPECT_EQ(module_total(inv, Module::attention), 3019898880u);         // 48 x 62,914,560
  EXPECT_EQ(module_total(inv, Module::norms), 491520u);                 // 48 x 10,240
  EXPECT_EQ(module_total(inv, Module::router), 3932160u);               // 48 x 81,920
  EXPECT_EQ(module_total(inv, Module::routed_experts), 96636764160u);   // 48 x 2,013,265,920
  EXPECT_EQ(module_total(inv, Module::shared_experts), 6039797760u);    // 48 x 125,829,120
  EXPECT_EQ(module_total(inv, Module::output_head), 1034490880u);       // lm_head + final norm
  EXPECT_EQ(module_total(inv, Module::dense_mlp), 0u);
  EXPECT_EQ(inv.total().value(), 107769861120u);
  EXPECT_EQ(active_params(inv, m).value(), 17172894720u);
  // 48 x (2 norms + q, k, v, o + router + gate_up_proj + down_proj + 3 shared) + embedding,
  // final norm, lm_head: the text checkpoint's tensor names.
  EXPECT_EQ(distinct_names(inv), 579u);
}

// meta-llama/Llama-4-Maverick-17B-128E, text model: Scout's sizes with 128 experts on the odd
// layers only (interleave_moe_layer_step 2: moe_layers 1, 3, ..., 47) and a Llama4TextMLP of
// intermediate_size_mlp 16384 on the even ones; no q/k norm. Dense layer: 62,914,560 + 10,240 +
// 3 x 16384 x 5120 = 251,658,240: 314,583,040. MoE layer: 62,914,560 + 10,240 + router 655,360 +
// experts 128 x 3 x 8192 x 5120 = 16,106,127,360 + shared 125,829,120: 16,295,536,640. 24 of
// each: 7,549,992,960 + 391,092,879,360 = 398,642,872,320; with embedding, lm_head and final norm
// 400,711,848,960. Active: routed 24 x 16,106,127,360 = 386,547,056,640 counted as 1/128,
// 3,019,898,880: 17,184,691,200.
TEST(Llama4ModelTypes, MaverickTextIsExact) {
  const ModelSpec m = load_model("meta-llama/Llama-4-Maverick-17B-128E");
  EXPECT_FALSE(m.qk_l2_norm);
  EXPECT_EQ(m.num_moe_layers(), 24);
  EXPECT_EQ(m.layer_kinds[0], LayerKind::dense);
  EXPECT_EQ(m.layer_kinds[1], LayerKind::moe);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.feed_forward.gate_proj.weight").rows, 16384);
  EXPECT_EQ(tensor(inv, "layers.1.feed_forward.experts.gate_up_proj").copies, 128);
  EXPECT_THROW((void)tensor(inv, "layers.0.feed_forward.router.weight"), std::runtime_error);
  EXPECT_EQ(module_total(inv, Module::dense_mlp), 6039797760u);         // 24 x 251,658,240
  EXPECT_EQ(module_total(inv, Module::routed_experts), 386547056640u);
  EXPECT_EQ(module_total(inv, Module::shared_experts), 3019898880u);    // 24 x 125,829,120
  EXPECT_EQ(inv.total().value(), 400711848960u);
  EXPECT_EQ(active_params(inv, m).value(), 17184691200u);
}

// The multimodal configs (Llama4ForConditionalGeneration) add the vision tower and projector.
// vision_config: hidden 1408, intermediate 5632, 34 layers, 16 heads, 3 channels, image 336,
// patch 14, projector 4096 -> 4096, vision_output_dim 4096. patch_embedding 1408 x 3 x 14 x 14 =
// 827,904; class_embedding 1408; positional_embedding_vlm ((336 / 14)^2 + 1) x 1408 = 577 x 1408
// = 812,416; layernorm_pre and _post 4 x 1408 = 5,632. Per encoder layer: q, k, v, o 4 x (1408 x
// 1408 + 1408) = 7,935,488; fc1 5632 x 1408 + 5632 = 7,935,488; fc2 1408 x 5632 + 1408 =
// 7,931,264; two LayerNorms 5,632: 23,807,872; x 34 = 809,467,648. Adapter fc1 4096 x 5632 =
// 23,068,672, fc2 4096 x 4096 = 16,777,216. multi_modal_projector 5120 x 4096 = 20,971,520.
// Vision 871,932,416. Scout 107,769,861,120 + 871,932,416 = 108,641,793,536 and Maverick
// 400,711,848,960 + 871,932,416 = 401,583,781,376: the published checkpoints' parameter counts
// (data/models/SOURCES.md).
TEST(Llama4ModelTypes, MultimodalConfigsMatchThePublishedTotals) {
  const ModelSpec scout = load_model(config_path("llama-4-scout-multimodal"));
  EXPECT_EQ(scout.model_type, "llama4_text");
  EXPECT_TRUE(scout.has_vision());
  EXPECT_TRUE(scout.unrecognised_keys.empty()) << scout.unrecognised_keys.front();
  const Inventory inv = build_inventory(scout);
  EXPECT_EQ(module_total(inv, Module::vision), 871932416u);
  EXPECT_EQ(role_total(inv, Role::mm_projector), 20971520u);
  EXPECT_EQ(tensor(inv, "vision_model.positional_embedding_vlm").rows, 577);
  EXPECT_EQ(tensor(inv, "vision_model.patch_embedding.linear.weight").cols, 588);
  EXPECT_EQ(tensor(inv, "vision_model.model.layers.33.mlp.fc2.bias").rows, 1408);
  EXPECT_EQ(tensor(inv, "vision_model.vision_adapter.mlp.fc1.weight").cols, 5632);
  EXPECT_EQ(inv.total().value(), 108641793536u);
  EXPECT_EQ(build_inventory(load_model(config_path("llama-4-maverick-multimodal"))).total().value(), 401583781376u);
}

// Keys read as transformers reads them: head_dim absent is 128 (Llama4TextConfig's default), null
// is hidden / heads; moe_layers overrides interleave_moe_layer_step; an empty no_rope_layers is
// the default every-4th pattern, a given one is counted.
TEST(Llama4ModelTypes, DefaultsFollowLlama4TextConfig) {
  nlohmann::json c = config_json("llama-4-maverick");
  c.erase("head_dim");
  c["hidden_size"] = 2560;
  EXPECT_EQ(parse(c).head_dim, 128);
  c["head_dim"] = nullptr;
  EXPECT_EQ(parse(c).head_dim, 64);  // 2560 / 40
  c = config_json("llama-4-maverick");
  c["moe_layers"] = {0, 5};
  EXPECT_EQ(parse(c).num_moe_layers(), 2);
  c["no_rope_layers"] = nlohmann::json::array();
  EXPECT_EQ(parse(c).nope_layers, 12);
  std::vector<int> rope(48, 1);
  rope[7] = rope[9] = 0;
  c["no_rope_layers"] = rope;
  EXPECT_EQ(parse(c).nope_layers, 2);
  c["attention_chunk_size"] = nullptr;
  EXPECT_EQ(parse(c).attention_chunk_size, 0);
  c["moe_layers"] = nlohmann::json::array();  // no MoE layer: no expert key is needed
  c.erase("num_local_experts");
  EXPECT_FALSE(parse(c).is_moe());
}

TEST(Llama4ModelTypes, RefusedKeys) {
  const auto refused = [](const std::string& preset, const char* key, const nlohmann::json& value, const std::string& word) {
    nlohmann::json c = config_json(preset);
    if (value.is_null()) c.erase(key);
    else c[key] = value;
    expect_error(c.dump(), word);
  };
  refused("llama-4-scout", "num_key_value_heads", nullptr, "num_key_value_heads");  // no silent default (8)
  refused("llama-4-maverick", "intermediate_size_mlp", nullptr, "intermediate_size_mlp");  // dense layers need it
  refused("llama-4-scout", "num_local_experts", nullptr, "num_local_experts");
  refused("llama-4-scout", "mlp_bias", true, "mlp_bias");  // Llama4TextMLP has no bias
  refused("llama-4-scout", "moe_layers", nlohmann::json::array({48}), "moe_layers");
  refused("llama-4-scout", "no_rope_layers", nlohmann::json::array({1, 0}), "no_rope_layers");
  refused("llama-4-scout", "no_rope_layers", std::vector<int>(48, 2), "no_rope_layers");
  refused("llama-4-scout", "layer_types", nlohmann::json::array({"linear_attention"}), "layer_types");
  refused("llama-4-scout", "interleave_moe_layer_step", 0, "interleave_moe_layer_step");
  // A llama4 wrapper needs its text model and its vision tower, whose heads must divide its width.
  expect_error(R"({"model_type": "llama4", "vision_config": {}})", "text_config");
  nlohmann::json mm = config_json("llama-4-scout-multimodal");
  mm["vision_config"]["num_attention_heads"] = 15;
  expect_error(mm.dump(), "num_attention_heads");
  // No silent default tower: vision_config and each of its sizes are required.
  mm["vision_config"].erase("image_size");
  expect_error(mm.dump(), "image_size");
  mm.erase("vision_config");
  expect_error(mm.dump(), "vision_config");
}

TrainingConfig training(std::int64_t seq) {
  TrainingConfig t;
  t.micro_batch = 1;
  t.seq_len = seq;
  return t;
}

Bytes bytes_of_terms(const std::vector<ActivationTerm>& terms) {
  Bytes b;
  for (const auto& t : terms) b += t.bytes();
  return b;
}

// Megatron-Core under Megatron-Bridge's Llama-4 settings, b 1, s 4096, tp 1, bf16, against the
// same layer read as a Llama-style one: the L2Norm keeps q and k, 4096 x (40 + 8) x 128 x 2 =
// 50,331,648 bytes; moe_apply_probs_on_input's multiply keeps the unscaled dispatched tokens, R x
// h = 4096 x 5120 x 2 = 41,943,040 (R = 4096 tokens x top 1), and the fp32 probabilities, 4096 x
// 4 = 16,384; the unfused RoPE keeps cos and sin for q and k, 4 x 4096 x 128 x 2 = 4,194,304.
// Scout's MoE layer: 96,485,376 bytes more. Maverick's dense layers have the RoPE tensors only.
TEST(Llama4ModelTypes, MegatronSavesTheL2NormProbsOnInputAndRopeTensors) {
  const ModelSpec m = load_model("llama-4-scout");
  const auto as_llama = [](ModelSpec s) {
    s.naming = NamingStyle::llama;  // llama4's tensors differ only in names, which save nothing
    s.qk_l2_norm = false;
    s.moe_probs_on_input = false;
    return s;
  };
  const Layout layout = resolve_layout(m, ParallelConfig{});
  const Profile& megatron = get_profile("megatron");
  const auto layer = [&](const ModelSpec& s, LayerKind k, std::int64_t seq) {
    return bytes_of_terms(layer_activation_terms(megatron, s, layout, training(seq), k)).value();
  };
  EXPECT_EQ(layer(m, LayerKind::moe, 4096) - layer(as_llama(m), LayerKind::moe, 4096), 96485376u);
  const ModelSpec mav = load_model("llama-4-maverick");
  EXPECT_EQ(layer(mav, LayerKind::dense, 4096) - layer(as_llama(mav), LayerKind::dense, 4096), 4194304u);
  // Chunked (s 16384 > 8192): the RoPE tensors are the chunk's, 4 x 8192 x 128 x 2 = 8,388,608.
  EXPECT_EQ(layer(mav, LayerKind::dense, 16384) - layer(as_llama(mav), LayerKind::dense, 16384), 8388608u);
  ParallelConfig p;
  p.pp = 4;
  const MemoryReport r = analyze(m, build_inventory(m), megatron, resolve_layout(m, p), training(16384));
  ASSERT_EQ(r.stages.size(), 4u);
  EXPECT_GT(r.stages[0].bytes.total().value(), 0u);
  EXPECT_NO_THROW((void)analyze(m, build_inventory(m), get_profile("paper"), layout, training(4096)));
}

void expect_refused(const ModelSpec& m, const char* profile, const ParallelConfig& p, const TrainingConfig& t,
                    const std::string& field) {
  try {
    (void)analyze(m, build_inventory(m), get_profile(profile), resolve_layout(m, p), t);
    ADD_FAILURE() << "analysed under " << profile << ", expected " << field;
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), field) << e.what();
  }
}

// torchtitan and hf do not model Llama-4 (text or multimodal);
// under megatron, Megatron-Core before 0.13 (no moe_apply_probs_on_input), top-k above 1 (its
// assertion) and chunked attention beyond what is modelled are refused by name.
TEST(Llama4ModelTypes, RefusedSetups) {
  const ModelSpec scout = load_model("llama-4-scout");
  const ParallelConfig one;
  expect_refused(load_model(config_path("llama-4-scout-multimodal")), "torchtitan", one, training(4096), "--profile");
  expect_refused(scout, "hf", one, training(4096), "--model");
  nlohmann::json dense = config_json("llama-4-maverick");
  dense["moe_layers"] = nlohmann::json::array();  // no MoE: torchtitan's own check passes it
  expect_refused(parse(dense), "torchtitan", one, training(4096), "--profile");
  TrainingConfig old = training(4096);
  old.megatron_version = MegatronVersion::v0_12;
  expect_refused(scout, "megatron", one, old, "--megatron-version");
  nlohmann::json top2 = config_json("llama-4-scout");
  top2["num_experts_per_tok"] = 2;
  expect_refused(parse(top2), "megatron", one, training(4096), "--model");
  ParallelConfig cp2;
  cp2.cp = 2;
  expect_refused(scout, "megatron", cp2, training(32768), "--cp");  // 16384 per rank > 8192
  EXPECT_NO_THROW((void)analyze(scout, build_inventory(scout), get_profile("megatron"), resolve_layout(scout, cp2),
                                training(16384)));  // 8192 per rank: no chunking
  TrainingConfig eager = training(16384);
  eager.attention = AttentionKernel::eager;
  expect_refused(scout, "megatron", one, eager, "--attention");
  expect_refused(scout, "megatron", one, training(12288), "--seq-len");
}

}  // namespace
