// Gemma-2 (gemma2) and Gemma-3 text-only (gemma3_text) read from published config.json files
// under tests/data/configs (provenance: data/models/SOURCES.md): exact totals and per-module
// totals by hand against the published counts, keys that add tensors refused, and what their
// training saves under the profiles that accept them.
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

std::uint64_t total_of(const nlohmann::json& c) { return build_inventory(parse_hf_config(c.dump(), "g.json")).total().value(); }

// google/gemma-2-9b: h 3584, 16 heads and 8 KV heads of head_dim 256 (16 x 256 = 4096, not h),
// GeGLU MLP of 14336, 42 layers with four RMSNorms each, vocab 256000, embedding tied.
// Per layer: q 4096 x 3584 = 14,680,064; k and v 2048 x 3584 = 7,340,032 each; o 14,680,064:
// attention 44,040,192. MLP 3 x 14336 x 3584 = 154,140,672. Norms 4 x 3584 = 14,336.
// 42 layers: attention 1,849,688,064, MLP 6,473,908,224, norms 602,112. Embedding 256000 x 3584
// = 917,504,000; final norm 3584; no lm_head. Total 9,241,705,984, the published count (Keras Hub
// gemma2_9b_en 9241705984; data/models/SOURCES.md).
TEST(GemmaModelTypes, Gemma2_9bIsExact) {
  const ModelSpec m = load_model(config_path("gemma-2-9b"));
  EXPECT_EQ(m.model_type, "gemma2");
  EXPECT_EQ(m.head_dim, 256);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_TRUE(m.unrecognised_keys.empty()) << m.unrecognised_keys.front();
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.q_proj.weight").rows, 4096);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.o_proj.weight").cols, 4096);
  EXPECT_EQ(tensor(inv, "layers.41.pre_feedforward_layernorm.weight").role, Role::pre_ffn_norm);
  EXPECT_EQ(tensor(inv, "layers.41.post_feedforward_layernorm.weight").rows, 3584);
  EXPECT_EQ(tensor(inv, "layers.41.post_attention_layernorm.weight").module, Module::norms);
  EXPECT_THROW((void)tensor(inv, "lm_head.weight"), std::runtime_error);
  EXPECT_THROW((void)tensor(inv, "layers.0.self_attn.q_norm.weight"), std::runtime_error);
  EXPECT_EQ(module_total(inv, Module::embedding), 917504000u);
  EXPECT_EQ(module_total(inv, Module::attention), 1849688064u);
  EXPECT_EQ(module_total(inv, Module::dense_mlp), 6473908224u);
  EXPECT_EQ(module_total(inv, Module::norms), 602112u);
  EXPECT_EQ(module_total(inv, Module::output_head), 3584u);
  EXPECT_EQ(inv.total().value(), 9241705984u);
  // 42 x (4 attention + 3 MLP + 4 norms) + embedding + final norm.
  EXPECT_EQ(tensor_count(inv), 464u);
}

// google/gemma-2-2b: h 2304, 8 heads and 4 KV heads of 256, MLP 9216, 26 layers. Per layer:
// q and o 2048 x 2304 = 4,718,592 each, k and v 1024 x 2304 = 2,359,296 each (14,155,776); MLP
// 3 x 9216 x 2304 = 63,700,992; norms 4 x 2304 = 9,216: 77,865,984; x 26 = 2,024,515,584.
// Embedding 256000 x 2304 = 589,824,000, final norm 2304: 2,614,341,888 (Keras Hub gemma2_2b_en).
// The 27B preset (46 layers of h 4608, 32 x 128 heads, 16 KV heads, MLP 36864): per layer
// 56,623,104 + 509,607,936 + 18,432 = 566,249,472; x 46 + 1,179,648,000 + 4608 = 27,227,128,320
// (Keras Hub gemma2_27b_en).
TEST(GemmaModelTypes, Gemma2_2bAnd27bAreExact) {
  EXPECT_EQ(build_inventory(load_model(config_path("gemma-2-2b"))).total().value(), 2614341888u);
  EXPECT_EQ(build_inventory(load_model("gemma-2-27b")).total().value(), 27227128320u);
  EXPECT_EQ(build_inventory(load_model("google/gemma-2-9b")).total().value(), 9241705984u);
}

// google/gemma-3-1b-pt: h 1152, 4 heads and 1 KV head of 256, per-head q_norm and k_norm of 256,
// MLP 6912, 26 layers, vocab 262144 tied. Per layer: q and o 1024 x 1152 = 1,179,648 each, k and
// v 256 x 1152 = 294,912 each (2,949,120); MLP 3 x 6912 x 1152 = 23,887,872; norms 4 x 1152 +
// 2 x 256 = 5,120. 26 layers: attention 76,677,120, MLP 621,084,672, norms 133,120. Embedding
// 262144 x 1152 = 301,989,888, final norm 1152. Total 999,885,952 (Keras Hub gemma3_1b).
TEST(GemmaModelTypes, Gemma3_1bIsExact) {
  const ModelSpec m = load_model(config_path("gemma-3-1b"));
  EXPECT_EQ(m.model_type, "gemma3_text");
  EXPECT_TRUE(m.qk_norm);
  EXPECT_EQ(m.attn_logit_softcap, 0.0);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.5.self_attn.q_norm.weight").rows, 256);
  EXPECT_EQ(tensor(inv, "layers.5.self_attn.k_norm.weight").rows, 256);
  EXPECT_EQ(module_total(inv, Module::embedding), 301989888u);
  EXPECT_EQ(module_total(inv, Module::attention), 76677120u);
  EXPECT_EQ(module_total(inv, Module::dense_mlp), 621084672u);
  EXPECT_EQ(module_total(inv, Module::norms), 133120u);
  EXPECT_EQ(module_total(inv, Module::output_head), 1152u);
  EXPECT_EQ(inv.total().value(), 999885952u);
  EXPECT_EQ(build_inventory(load_model("gemma-3-1b")).total().value(), 999885952u);
}

// Keys that change tensors: read where Gemma has them, refused where it does not.
TEST(GemmaModelTypes, KeysThatChangeTensors) {
  nlohmann::json c = config_json("gemma-2-9b");
  // attention_bias: biases on q, k, v and o (Gemma2Attention): 42 x (4096 + 2048 + 2048 + 3584).
  c["attention_bias"] = true;
  EXPECT_EQ(total_of(c), 9241705984ull + 42ull * (4096 + 2048 + 2048 + 3584));
  c["attention_bias"] = false;
  // An untied head: 256000 x 3584 more.
  c["tie_word_embeddings"] = false;
  EXPECT_EQ(total_of(c), 9241705984ull + 917504000ull);
  c.erase("tie_word_embeddings");
  // head_dim absent: Gemma2Config's 256, not hidden / heads (224).
  c.erase("head_dim");
  EXPECT_EQ(total_of(c), 9241705984u);
  // Soft-capping, sliding windows and the score scale change no tensor.
  c["attn_logit_softcapping"] = nullptr;
  c["final_logit_softcapping"] = nullptr;
  c["sliding_window"] = 1024;
  c["query_pre_attn_scalar"] = 224;
  EXPECT_EQ(total_of(c), 9241705984u);
  for (const char* key : {"use_qk_norm", "mlp_bias", "num_local_experts"}) {
    nlohmann::json bad = config_json("gemma-2-9b");
    bad[key] = key == std::string("num_local_experts") ? nlohmann::json(8) : nlohmann::json(true);
    expect_error(bad.dump(), key);
  }
  nlohmann::json no_kv = config_json("gemma-2-9b");
  no_kv.erase("num_key_value_heads");  // Gemma2Config's default (4) differs from Llama's: no silent default
  expect_error(no_kv.dump(), "num_key_value_heads");
  nlohmann::json cap = config_json("gemma-2-9b");
  cap["attn_logit_softcapping"] = -1;
  expect_error(cap.dump(), "attn_logit_softcapping");
  nlohmann::json layers = config_json("gemma-3-1b");
  layers["layer_types"] = nlohmann::json::array({"sliding_attention", "linear_attention"});
  expect_error(layers.dump(), "layer_types");
}

// A gemma3 (multimodal) config is read with its SigLIP tower (test_model_types_gemma3.cpp); one
// that leaves vision_use_head out gets SiglipVisionTransformer's pooling head, which is refused by
// name rather than dropped.
TEST(GemmaModelTypes, MultimodalGemma3WithAPoolingHeadIsRefused) {
  nlohmann::json mm;
  mm["model_type"] = "gemma3";
  mm["architectures"] = {"Gemma3ForConditionalGeneration"};
  mm["text_config"] = config_json("gemma-3-1b");
  mm["vision_config"] = {{"model_type", "siglip_vision_model"}, {"hidden_size", 1152}};
  expect_error(mm.dump(), "vision_use_head");
}

Bytes bytes_of_terms(const std::vector<ActivationTerm>& terms) {
  Bytes b;
  for (const auto& t : terms) b += t.bytes();
  return b;
}

TrainingConfig training(std::int64_t seq) {
  TrainingConfig t;
  t.micro_batch = 1;
  t.seq_len = seq;
  return t;
}

// Megatron-Bridge's Gemma-3 layer: TERowParallelLinearLayerNorm after o_proj and down_proj, each
// norm saving its input (tokens x h, bf16) and 1/rms (tokens, fp32). At b 1, s 4096, tp 1:
// 2 x 4096 x 1152 x 2 = 18,874,368 bytes and 2 x 4096 x 4 = 32,768: 18,907,136 bytes per layer
// beyond the same layer without them.
TEST(GemmaModelTypes, Gemma3UnderMegatronSavesThePostNormInputs) {
  const ModelSpec m = load_model("gemma-3-1b");
  ModelSpec plain = m;
  plain.sandwich_norms = false;
  ParallelConfig p;
  const Layout layout = resolve_layout(m, p);
  const Profile& megatron = get_profile("megatron");
  const auto with = layer_activation_terms(megatron, m, layout, training(4096), LayerKind::dense);
  const auto without = layer_activation_terms(megatron, plain, layout, training(4096), LayerKind::dense);
  EXPECT_EQ(bytes_of_terms(with).value() - bytes_of_terms(without).value(), 18907136u);
  const MemoryReport r = analyze(m, build_inventory(m), megatron, layout, training(4096));
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_GT(r.stages[0].bytes.total().value(), 0u);
  // The paper profile counts the two inputs only: 18,874,368 bytes.
  const Profile& paper = get_profile("paper");
  EXPECT_EQ(bytes_of_terms(layer_activation_terms(paper, m, layout, training(4096), LayerKind::dense)).value() -
                bytes_of_terms(layer_activation_terms(paper, plain, layout, training(4096), LayerKind::dense)).value(),
            18874368u);
}

// torchtitan has no Gemma model (refused by the profile's name); the hf profile follows only the
// modelling code of the types it lists (refused by model_type).
TEST(GemmaModelTypes, ProfilesWithoutGemmaRefuseIt) {
  const ModelSpec m = load_model("gemma-3-1b");
  const Layout layout = resolve_layout(m, ParallelConfig{});
  for (const auto& [name, field] : {std::pair{"torchtitan", "--profile"}, std::pair{"hf", "--model"}}) {
    try {
      (void)analyze(m, build_inventory(m), get_profile(name), layout, training(4096));
      ADD_FAILURE() << "analysed under " << name;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), field) << name;
      EXPECT_NE(std::string(e.what()).find("gemma3_text"), std::string::npos) << e.what();
    }
  }
}

// Gemma-2 under megatron: soft-capped scores need the unfused attention (flash refused, naming
// attn_logit_softcapping); there tanh keeps one more b x heads x s x s tensor, the size of the
// softmax output: 1 x 16 x 1024 x 1024 x 2 bytes = 33,554,432 per layer at s 1024, tp 1. The
// capped logits keep tanh's output, 1024 x 256000 x 2 = 524,288,000 bytes on the last stage.
TEST(GemmaModelTypes, Gemma2SoftcappingUnderMegatron) {
  const ModelSpec m = load_model("gemma-2-9b");
  const Layout layout = resolve_layout(m, ParallelConfig{});
  const Profile& megatron = get_profile("megatron");
  try {
    (void)analyze(m, build_inventory(m), megatron, layout, training(1024));
    ADD_FAILURE() << "flash attention accepted with soft-capping";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "--attention");
    EXPECT_NE(std::string(e.what()).find("attn_logit_softcapping"), std::string::npos) << e.what();
  }
  TrainingConfig eager = training(1024);
  eager.attention = AttentionKernel::eager;
  ParallelConfig cp2;
  cp2.cp = 2;
  try {  // Gemma2DotProductAttention refuses context parallelism
    (void)analyze(m, build_inventory(m), megatron, resolve_layout(m, cp2), eager);
    ADD_FAILURE() << "cp 2 accepted with soft-capping";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "--cp");
  }
  ModelSpec uncapped = m;
  uncapped.attn_logit_softcap = 0;
  EXPECT_EQ(bytes_of_terms(layer_activation_terms(megatron, m, layout, eager, LayerKind::dense)).value() -
                bytes_of_terms(layer_activation_terms(megatron, uncapped, layout, eager, LayerKind::dense)).value(),
            33554432u);
  ModelSpec no_final = m;
  no_final.final_logit_softcap = 0;
  const MemoryReport capped = analyze(m, build_inventory(m), megatron, layout, eager);
  const MemoryReport plain = analyze(no_final, build_inventory(no_final), megatron, layout, eager);
  EXPECT_EQ(capped.stages.back().activations_per_microbatch.value() - plain.stages.back().activations_per_microbatch.value(),
            524288000u);
}

}  // namespace
