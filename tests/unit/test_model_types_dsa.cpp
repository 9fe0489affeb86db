// DeepSeek sparse attention (issue 14): deepseek_v32 (DeepSeek-V3.2, V3.2-Exp) read from its
// published config.json (tests/data/configs/deepseek-v3.2.config.json; provenance in
// data/models/SOURCES.md), every indexer tensor with its Hugging Face name and shape, the exact
// total against the Hub's safetensors totals, and the refusals: indexer keys on another type, a
// malformed indexer, and analysis under the profiles that do not model DSA's activations.
#include <algorithm>
#include <fstream>
#include <sstream>

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

std::string config_text() { return text_of(config_path("deepseek-v3.2")); }

// The indexer of one layer, by hand from DeepSeek-V3.2-Exp inference/model.py Indexer.__init__
// (q_lora_rank 1536, hidden 7168, index_n_heads 64, index_head_dim 128):
//   wq_b          64 x 128 = 8192 rows x 1536   = 12,582,912
//   wk            128 x 7168                    =    917,504
//   k_norm        LayerNorm(128): weight + bias =        256
//   weights_proj  64 x 7168                     =    458,752
//                                                 13,959,424 per layer.
constexpr std::uint64_t kIndexerPerLayer = 12'582'912u + 917'504u + 256u + 458'752u;

TEST(DsaModelTypes, DeepseekV32IndexerTensorsHaveTheirNamesAndShapes) {
  const ModelSpec m = parse_hf_config(config_text(), "deepseek-v3.2");
  EXPECT_EQ(m.model_type, "deepseek_v32");
  EXPECT_EQ(m.dsa.index_n_heads, 64);
  EXPECT_EQ(m.dsa.index_head_dim, 128);
  EXPECT_EQ(m.dsa.index_topk, 2048);
  EXPECT_TRUE(m.unrecognised_keys.empty());
  const Inventory inv = build_inventory(m);
  const Tensor& wq_b = tensor(inv, "layers.0.self_attn.indexer.wq_b.weight");
  EXPECT_EQ(wq_b.rows, 8192);
  EXPECT_EQ(wq_b.cols, 1536);
  EXPECT_EQ(wq_b.module, Module::attention);
  const Tensor& wk = tensor(inv, "layers.60.self_attn.indexer.wk.weight");
  EXPECT_EQ(wk.rows, 128);
  EXPECT_EQ(wk.cols, 7168);
  EXPECT_EQ(tensor(inv, "layers.3.self_attn.indexer.k_norm.weight").rows, 128);
  EXPECT_EQ(tensor(inv, "layers.3.self_attn.indexer.k_norm.bias").module, Module::norms);
  const Tensor& w = tensor(inv, "layers.30.self_attn.indexer.weights_proj.weight");
  EXPECT_EQ(w.rows, 64);
  EXPECT_EQ(w.cols, 7168);
  // The MTP layer's decoder (layers.61) carries an indexer too, as the checkpoint stores it.
  EXPECT_EQ(tensor(inv, "layers.61.self_attn.indexer.wq_b.weight").placement, Placement::mtp);
  EXPECT_EQ(kIndexerPerLayer, 13'959'424u);
  EXPECT_EQ(role_total(inv, Role::indexer_wq_b), 62u * 12'582'912u);
  EXPECT_EQ(role_total(inv, Role::indexer_wk), 62u * 917'504u);
  EXPECT_EQ(role_total(inv, Role::indexer_k_norm) + role_total(inv, Role::indexer_k_norm_bias), 62u * 256u);
  EXPECT_EQ(role_total(inv, Role::indexer_weights_proj), 62u * 458'752u);
}

// Totals. DeepSeek-V3 without its MTP layer is 671,026,419,200 (test_library.cpp,
// paper-method.md §2) and its MTP module 13,463,426,304; V3.2 adds one indexer to each of the
// 61 layers and to the MTP layer's decoder:
//   main model  671,026,419,200 + 61 x 13,959,424 = 671,877,944,064
//   MTP module   13,463,426,304 +      13,959,424 =  13,477,385,728
//   total                                          = 685,355,329,792
// The Hugging Face Hub's safetensors total for deepseek-ai/DeepSeek-V3.2 is 685,355,329,792
// (data/models/SOURCES.md). DeepSeek-V3.2-Exp's is 685,396,921,376: the same parameters plus
// the FP8 checkpoint's F32 scale_inv tensors, one per 128 x 128 block of each FP8 linear, by hand
// 41,591,584 (DeepSeek-V3's 41,540,496, its F32 count 41,555,600 less the 59 x 256 router
// biases, plus 62 indexers x (64 x 12 blocks of wq_b + 56 of wk)).
TEST(DsaModelTypes, DeepseekV32TotalIsTheHubsSafetensorsTotal) {
  ModelSpec m = parse_hf_config(config_text(), "deepseek-v3.2");
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(inv.total().value(), 685'355'329'792u);
  EXPECT_EQ(671'026'419'200u + 61u * kIndexerPerLayer + 13'463'426'304u + kIndexerPerLayer, 685'355'329'792u);
  EXPECT_EQ(685'355'329'792u + (41'555'600u - 59u * 256u) + 62u * (64u * 12u + 56u), 685'396'921'376u);
  // Per module, 62 decoder layers (61 and the MTP layer's): attention = DeepSeek-V3's MLA
  // projections 187,105,280 (test_properties.cpp DeepSeekV3SixteenStagesByHand) + the indexer's
  // wq_b, wk and weights_proj 13,959,168 = 201,064,448 a layer; norms = 2h + d_cq + d_c = 16,384
  // + the indexer's k_norm 256 a layer (the final norm is in output_head, MTP's own norms in mtp).
  EXPECT_EQ(module_total(inv, Module::attention), 62ull * (187'105'280u + 13'959'168u));
  EXPECT_EQ(module_total(inv, Module::attention), 12'465'995'776u);
  EXPECT_EQ(module_total(inv, Module::norms), 62ull * (16'384u + 256u));
  EXPECT_EQ(module_total(inv, Module::output_head), 129'280ull * 7'168u + 7'168u);
  set_mtp_layers(m, 0);
  EXPECT_EQ(build_inventory(m).total().value(), 671'877'944'064u);
  // Active per token without MTP: all but 248 of 256 routed experts (3 x 2048 x 7168 each) in
  // the 58 MoE layers, 671,026,419,200 - 58 x 248 x 44,040,192 = 37,552,297,472 for DeepSeek-V3,
  // plus the 61 indexers, which run for every token.
  EXPECT_EQ(active_params(build_inventory(m), m).value(), 37'552'297'472u + 61u * kIndexerPerLayer);
}

// The preset by name in any case and by its repository id.
TEST(DsaModelTypes, PresetLoadsByNameAndRepository) {
  EXPECT_EQ(load_model("DeepSeek-V3.2").model_type, "deepseek_v32");
  EXPECT_EQ(build_inventory(load_model("deepseek-ai/DeepSeek-V3.2")).total().value(), 685'355'329'792u);
}

// An indexer needs MLA's compressed query, and heads that hold the rotated channels; its three
// keys are read only by deepseek_v32 (a V3.2 config relabelled deepseek_v3 is refused by name:
// test_model_types.cpp KeysThatAddTensorsAreRefusedByName).
TEST(DsaModelTypes, MalformedIndexersAreRefusedByName) {
  nlohmann::json c = nlohmann::json::parse(config_text());
  c["q_lora_rank"] = nullptr;
  expect_error(c.dump(), "q_lora_rank");
  c = nlohmann::json::parse(config_text());
  c["index_head_dim"] = 32;  // below qk_rope_head_dim 64
  expect_error(c.dump(), "index_head_dim");
  c = nlohmann::json::parse(config_text());
  c.erase("index_n_heads");
  expect_error(c.dump(), "index_n_heads");
  c = nlohmann::json::parse(config_text());
  c["index_topk"] = -1;
  expect_error(c.dump(), "index_topk");
  nlohmann::json relabelled = nlohmann::json::parse(config_text());
  relabelled["model_type"] = "deepseek_v3";
  expect_error(relabelled.dump(), "index_");
  nlohmann::json glm5 = nlohmann::json::parse(config_text());
  glm5["indexer_types"] = {"full", "shared"};  // GLM-5's shared indexers: not modelled
  expect_error(glm5.dump(), "indexer_types");
}

// Only the megatron profile models DSA's activations (tests/unit/test_dsa_activations.cpp): the
// others refuse analysis by name, never run without them.
TEST(DsaModelTypes, AnalysisIsRefusedUnderOtherProfiles) {
  const ModelSpec m = load_model("deepseek-v3.2");
  const Inventory inv = build_inventory(m);
  ParallelConfig p;
  p.dp = 8;
  p.ep = 8;
  const Layout layout = resolve_layout(m, p);
  for (const auto& name : profile_names()) {
    if (name == "megatron") continue;
    try {
      (void)analyze(m, inv, get_profile(name), layout, TrainingConfig{});
      ADD_FAILURE() << "analysed under " << name;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "--model") << name;
      EXPECT_NE(std::string(e.what()).find("deepseek_v32"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
