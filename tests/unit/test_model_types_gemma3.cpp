// Gemma-3's multimodal checkpoints (model_type gemma3, Gemma3ForConditionalGeneration; issue 14):
// the gemma3_text language model plus a SigLIP vision tower and Gemma3MultiModalProjector, read
// from config.json files under tests/data/configs (provenance: data/models/SOURCES.md). The totals
// are worked by hand below, the text and vision parts apart, and equal the published parameter
// counts; analysis holds the tower on the first stage; keys the reader cannot honour are refused.
#include <fstream>
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

ModelSpec parse(const json& c) { return parse_hf_config(c.dump(), "g3.json"); }

// The vision part is the same in the 4B, 12B and 27B checkpoints (vision_config: hidden 1152,
// intermediate 4304, 27 layers, 16 heads, image 896, patch 14, num_channels absent: 3;
// vision_use_head false), except the projector's width, which is the text model's:
// - embeddings: patch_embedding 1152 x 3 x 14 x 14 = 677,376 + bias 1152 = 678,528;
//   position_embedding (896 / 14)^2 = 64^2 = 4096 rows x 1152 = 4,718,592.
// - encoder layer: q, k, v, out_proj 4 x (1152 x 1152 + 1152) = 4 x 1,328,256 = 5,313,024; fc1
//   4304 x 1152 + 4304 = 4,962,512; fc2 1152 x 4304 + 1152 = 4,959,360; layer_norm1 and 2
//   4 x 1152 = 4,608. Sum 15,239,504; x 27 = 411,466,608.
// - post_layernorm 2 x 1152 = 2,304.
// Tower 678,528 + 4,718,592 + 411,466,608 + 2,304 = 416,866,032.
// - projector: mm_input_projection_weight 1152 x text hidden, mm_soft_emb_norm 1152.
constexpr std::uint64_t kTower = 416'866'032;

void expect_checkpoint_names(const Inventory& inv, std::int64_t text_hidden) {
  EXPECT_EQ(tensor(inv, "vision_tower.vision_model.embeddings.patch_embedding.weight").cols, 588);
  EXPECT_EQ(tensor(inv, "vision_tower.vision_model.embeddings.position_embedding.weight").rows, 4096);
  EXPECT_EQ(tensor(inv, "vision_tower.vision_model.encoder.layers.26.mlp.fc1.bias").rows, 4304);
  EXPECT_EQ(tensor(inv, "vision_tower.vision_model.encoder.layers.0.self_attn.out_proj.weight").cols, 1152);
  EXPECT_EQ(tensor(inv, "vision_tower.vision_model.post_layernorm.bias").rows, 1152);
  EXPECT_EQ(tensor(inv, "multi_modal_projector.mm_input_projection_weight").cols, text_hidden);
  EXPECT_EQ(tensor(inv, "multi_modal_projector.mm_soft_emb_norm.weight").rows, 1152);
}

// google/gemma-3-4b-it: text_config gives hidden 2560, intermediate 10240, 34 layers and nothing
// else that sizes a tensor, so Gemma3TextConfig's defaults fill in vocab 262208, 8 heads, 4 KV
// heads, head_dim 256 (tied embedding).
// - Text layer: q 2560 x 2048 = 5,242,880; k, v 2560 x 1024 = 2,621,440 each; o 5,242,880; gate,
//   up, down 3 x 2560 x 10240 = 78,643,200; four norms 4 x 2560 = 10,240; q_norm, k_norm 2 x 256.
//   Sum 94,382,592; x 34 = 3,209,008,128. Embedding 262208 x 2560 = 671,252,480; final norm 2560.
//   Text 3,880,263,168.
// - Vision: tower 416,866,032 + projector 1152 x 2560 + 1152 = 2,950,272 = 419,816,304.
// Total 4,300,079,472: the parameter count of google/gemma-3-4b-it (SOURCES.md: loaders that
// assert sum(p.numel()) == 4300079472 for Gemma3ForConditionalGeneration; Keras Hub's
// medgemma_4b, the same architecture; Keras Hub's gemma3_instruct_4b, 4,299,915,632, is this less
// the 64 x 2560 embedding rows its 262144-entry vocabulary leaves out).
TEST(Gemma3ModelTypes, FourBCountIsThePublishedTotal) {
  const ModelSpec m = load_model(config_path("gemma-3-4b-it"));
  EXPECT_EQ(m.model_type, "gemma3_text");
  EXPECT_TRUE(m.has_vision());
  EXPECT_EQ(m.vocab, 262208);
  EXPECT_EQ(m.num_heads, 8);
  EXPECT_EQ(m.num_kv_heads, 4);
  EXPECT_EQ(m.head_dim, 256);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_TRUE(m.unrecognised_keys.empty()) << m.unrecognised_keys.front();
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(module_total(inv, Module::vision), kTower + 2'950'272);
  EXPECT_EQ(role_total(inv, Role::mm_projector), 2'950'272u);
  EXPECT_EQ(inv.total().value() - module_total(inv, Module::vision), 3'880'263'168u);
  EXPECT_EQ(inv.total().value(), 4'300'079'472u);
  EXPECT_EQ(inv.checkpoint_total().value(), 4'300'079'472u);
  expect_checkpoint_names(inv, 2560);
}

// google/gemma-3-12b-it: hidden 3840, intermediate 15360, 48 layers, 16 heads, 8 KV heads;
// head_dim 256 and vocab 262208 by default.
// - Text layer: q 3840 x 4096 = 15,728,640; k, v 3840 x 2048 = 7,864,320 each; o 15,728,640;
//   MLP 3 x 3840 x 15360 = 176,947,200; norms 4 x 3840 = 15,360; q_norm, k_norm 512. Sum
//   224,148,992; x 48 = 10,759,151,616. Embedding 262208 x 3840 = 1,006,878,720; final norm 3840.
//   Text 11,766,034,176.
// - Vision: 416,866,032 + projector 1152 x 3840 + 1152 = 4,424,832 = 421,290,864.
// Total 12,187,325,040: google/gemma-3-12b-it's parameter count (SOURCES.md; Keras Hub's
// gemma3_instruct_12b, 12,187,079,280, is this less 64 x 3840 embedding rows).
TEST(Gemma3ModelTypes, TwelveBCountIsThePublishedTotal) {
  const ModelSpec m = load_model(config_path("gemma-3-12b-it"));
  EXPECT_TRUE(m.unrecognised_keys.empty()) << m.unrecognised_keys.front();
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(module_total(inv, Module::vision), kTower + 4'424'832);
  EXPECT_EQ(inv.total().value() - module_total(inv, Module::vision), 11'766'034'176u);
  EXPECT_EQ(inv.total().value(), 12'187'325'040u);
  expect_checkpoint_names(inv, 3840);
}

// google/gemma-3-27b-it: hidden 5376, intermediate 21504, 62 layers, 32 heads and 16 KV heads of
// head_dim 128; vocab_size absent, so 262208.
// - Text layer: q 5376 x 4096 = 22,020,096; k, v 5376 x 2048 = 11,010,048 each; o 22,020,096;
//   MLP 3 x 5376 x 21504 = 346,816,512; norms 4 x 5376 = 21,504; q_norm, k_norm 2 x 128 = 256.
//   Sum 412,898,560; x 62 = 25,599,710,720. Embedding 262208 x 5376 = 1,409,630,208; final norm
//   5376. Text 27,009,346,304.
// - Vision: 416,866,032 + projector 1152 x 5376 + 1152 = 6,194,304 = 423,060,336.
// Total 27,432,406,640: the parameter count of google/gemma-3-27b-it (llama.cpp's n_params for
// gemma-3-27b-it; Keras Hub's medgemma_instruct_27b; a safetensors total_size of 54,864,813,280
// bytes in bfloat16 for google/medgemma-27b-it, the same architecture, = 2 x this; Keras Hub's
// gemma3_instruct_27b, 27,432,062,576, is this less 64 x 5376 embedding rows).
TEST(Gemma3ModelTypes, TwentySevenBCountIsThePublishedTotal) {
  const ModelSpec m = load_model(config_path("gemma-3-27b-it"));
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.vocab, 262208);
  EXPECT_TRUE(m.unrecognised_keys.empty()) << m.unrecognised_keys.front();
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(module_total(inv, Module::vision), kTower + 6'194'304);
  EXPECT_EQ(inv.total().value() - module_total(inv, Module::vision), 27'009'346'304u);
  EXPECT_EQ(inv.total().value(), 27'432'406'640u);
  expect_checkpoint_names(inv, 5376);
  EXPECT_EQ(build_inventory(load_model("gemma-3-27b-it")).total().value(), 27'432'406'640u);  // the preset
}

// Absent keys take the defaults of transformers' configs. vision_config with only
// vision_use_head false is SiglipVisionConfig(): hidden 768, intermediate 3072, 12 layers, 12
// heads, 3 channels, image 224, patch 16:
// patch_embedding 768 x 3 x 16 x 16 + 768 = 590,592; positions (224 / 16)^2 = 196 x 768 = 150,528;
// layer 4 x (768 x 768 + 768) + (3072 x 768 + 3072) + (768 x 3072 + 768) + 4 x 768 = 2,362,368 +
// 2,362,368 + 2,360,064 + 3,072 = 7,087,872, x 12 = 85,054,464; post_layernorm 1,536. Tower
// 85,797,120; projector on the 4B's 2560: 768 x 2560 + 768 = 1,966,848. Vision 87,763,968.
// (mm_tokens_per_image must pool the 14 x 14 grid: 49, 7 a side; the default 256 is refused.)
// No text_config at all is Gemma3TextConfig(): hidden 2304, intermediate 9216, 26 layers.
TEST(Gemma3ModelTypes, AbsentKeysTakeTransformersDefaults) {
  json c = config_json("gemma-3-4b-it");
  c["vision_config"] = {{"vision_use_head", false}};
  c["mm_tokens_per_image"] = 49;
  const Inventory inv = build_inventory(parse(c));
  EXPECT_EQ(module_total(inv, Module::vision), 87'763'968u);
  EXPECT_EQ(inv.total().value() - module_total(inv, Module::vision), 3'880'263'168u);
  json bare = c;
  bare.erase("text_config");
  const ModelSpec d = parse(bare);
  EXPECT_EQ(d.model_type, "gemma3_text");
  EXPECT_EQ(d.hidden, 2304);
  EXPECT_EQ(d.dense_ffn, 9216);
  EXPECT_EQ(d.num_layers, 26);
  EXPECT_EQ(d.vocab, 262208);
}

// A pooling head (vision_use_head true, or absent: SiglipVisionTransformer then builds one) adds
// tensors moemem does not model: refused by name. So are a tower whose heads do not divide its
// width, a projector that cannot pool the grid, a wrapper tie_word_embeddings at odds with the
// text's, and a text_config that is not an object; an unknown tower key is reported.
TEST(Gemma3ModelTypes, KeysThatCannotBeHonouredAreRefused) {
  const json base = config_json("gemma-3-27b-it");
  json c = base;
  c["vision_config"]["vision_use_head"] = true;
  expect_error(c.dump(), "vision_use_head");
  c["vision_config"].erase("vision_use_head");
  expect_error(c.dump(), "vision_use_head");
  c = base;
  c.erase("vision_config");
  expect_error(c.dump(), "vision_use_head");
  c = base;
  c["vision_config"]["num_attention_heads"] = 10;
  expect_error(c.dump(), "num_attention_heads");
  c = base;
  c["mm_tokens_per_image"] = 65 * 65;
  expect_error(c.dump(), "mm_tokens_per_image");
  c = base;
  c["tie_word_embeddings"] = false;
  expect_error(c.dump(), "tie_word_embeddings");
  c = base;
  c["text_config"] = 7;
  expect_error(c.dump(), "text_config");
  c = base;
  c["vision_config"]["window_size"] = 16;
  const ModelSpec m = parse(c);
  ASSERT_EQ(m.unrecognised_keys.size(), 1u);
  EXPECT_EQ(m.unrecognised_keys.front(), "vision_config.window_size");
}

// count works (a preset, its repository id, a config file). analyze holds the vision tower and
// projector with the embedding on the first stage, replicated over tp (Megatron-LM builds the
// encoder on the first pipeline stage): the 4B's stage 0 holds exactly the 419,816,304 vision
// parameters worked above more than the same text model saved on its own (text_config as a
// gemma3_text config), with their bf16 weights and fp32 gradients, and the last stage is unchanged.
TEST(Gemma3ModelTypes, AnalysisHoldsTheTowerOnTheFirstStageAndCountWorks) {
  const auto count = run_cli({"count", "--model", "google/gemma-3-27b-it"});
  EXPECT_EQ(count.code, 0) << count.err;
  EXPECT_NE(count.out.find("27,432,406,640"), std::string::npos) << count.out;
  const auto file = run_cli({"count", "--model", config_path("gemma-3-4b-it")});
  EXPECT_EQ(file.code, 0) << file.err;
  EXPECT_NE(file.out.find("4,300,079,472"), std::string::npos) << file.out;
  json text = config_json("gemma-3-4b-it").at("text_config");
  // A gemma3_text config names what the wrapper's text_config leaves to Gemma3TextConfig's defaults.
  text.update({{"model_type", "gemma3_text"}, {"vocab_size", 262208}, {"num_attention_heads", 8},
               {"num_key_value_heads", 4}, {"head_dim", 256}});
  const std::string text_path = ::testing::TempDir() + "/gemma-3-4b-text.json";
  {
    std::ofstream f(text_path);
    f << text.dump();
  }
  const auto run = [](const std::string& model) {
    const auto r = run_cli({"analyze", "--model", model, "--tp", "2", "--pp", "2", "--dp", "2", "--seq-len", "4096",
                            "--format", "json"});
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? json::parse(r.out) : json::object();
  };
  const json mm = run(config_path("gemma-3-4b-it")), t = run(text_path);
  ASSERT_FALSE(mm.empty());
  ASSERT_FALSE(t.empty());
  const auto stage = [](const json& r, std::size_t i) { return r.at("stages").at(i); };
  constexpr std::int64_t kVision = 419'816'304;
  EXPECT_EQ(stage(mm, 0).at("params").at("total").get<std::int64_t>() - stage(t, 0).at("params").at("total").get<std::int64_t>(),
            kVision);
  EXPECT_EQ(stage(mm, 0).at("bytes").at("weights").get<std::int64_t>() - stage(t, 0).at("bytes").at("weights").get<std::int64_t>(),
            2 * kVision);
  EXPECT_EQ(stage(mm, 1).at("bytes").at("total"), stage(t, 1).at("bytes").at("total"));
  bool said = false;
  for (const auto& s : mm.at("assumptions")) said = said || s.get<std::string>().starts_with("vision tower (vision_config)");
  EXPECT_TRUE(said) << mm.at("assumptions").dump();
}

}  // namespace
