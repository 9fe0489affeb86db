// GLM-5 (issue 14): model_type glm_moe_dsa, GLM's MLA MoE with DeepSeek sparse attention's
// indexer in every layer, read from tests/data/configs/glm-5.config.json (reconstructed from
// transformers' GlmMoeDsaConfig defaults, which name zai-org/GLM-5, and the GLM-5 technical report;
// data/models/SOURCES.md). The totals are worked by hand below and compared with the Hugging Face
// Hub's safetensors total for zai-org/GLM-5; the refusals cover the keys that add or remove
// tensors moemem does not build (GLM-5.2's shared indexers among them).
#include <algorithm>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"
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

std::string config_text() { return text_of(config_path("glm-5")); }

// One decoder layer of GLM-5, by hand from the config (h 6144, 64 heads, q_lora_rank 2048,
// kv_lora_rank 512, qk_nope 192, qk_rope 64, v_head 256; transformers DeepseekV3Attention):
//   q_a_proj            2048 x 6144                 =  12,582,912
//   q_b_proj            64 x (192 + 64) x 2048      =  33,554,432
//   kv_a_proj_with_mqa  (512 + 64) x 6144           =   3,538,944
//   kv_b_proj           64 x (192 + 256) x 512      =  14,680,064
//   o_proj              6144 x 64 x 256             = 100,663,296
//                                                     165,019,648
constexpr std::uint64_t kMla = 12'582'912u + 33'554'432u + 3'538'944u + 14'680'064u + 100'663'296u;
// The indexer (DeepseekV32Indexer; index_n_heads 32, index_head_dim 128):
//   wq_b          32 x 128 = 4096 rows x 2048   = 8,388,608
//   wk            128 x 6144                    =   786,432
//   k_norm        LayerNorm(128): weight + bias =       256
//   weights_proj  32 x 6144                     =   196,608
//                                                 9,371,904
constexpr std::uint64_t kIndexer = 8'388'608u + 786'432u + 256u + 196'608u;
// Norms: input and post-attention 2 x 6144, q_a_layernorm 2048, kv_a_layernorm 512 = 14,848.
constexpr std::uint64_t kNorms = 2u * 6144u + 2048u + 512u;
// Dense MLP (layers 0-2): 3 x 6144 x 12288 = 226,492,416.
constexpr std::uint64_t kDense = 3u * 6144u * 12288u;
// MoE layer: 256 experts of 3 x 6144 x 2048 = 37,748,736 each (9,663,676,416), one shared MLP of
// the same size, router 256 x 6144 = 1,572,864 and its e_score_correction_bias 256.
constexpr std::uint64_t kExpert = 3u * 6144u * 2048u;
constexpr std::uint64_t kMoe = 256u * kExpert + kExpert + 256u * 6144u + 256u;
// Embedding and the untied head: 154,880 x 6144 = 951,582,720 each; final norm 6144.
constexpr std::uint64_t kVocabMatrix = 154'880u * 6144u;

TEST(Glm5ModelType, EveryLayerHasMlaAndAnIndexer) {
  const ModelSpec m = parse_hf_config(config_text(), "glm-5");
  EXPECT_EQ(m.model_type, "glm_moe_dsa");
  EXPECT_TRUE(m.unrecognised_keys.empty());
  EXPECT_EQ(m.num_moe_layers(), 75);
  EXPECT_EQ(m.mtp_layers, 1);
  EXPECT_TRUE(m.moe.router_bias);
  const Inventory inv = build_inventory(m);
  // q_b_proj and kv_b_proj are listed by part (nope / rope, k_nope / v): their rows add up.
  const auto rows_of = [&](const std::string& name) {
    std::int64_t rows = 0;
    for (const auto& t : inv.tensors) rows += t.name == name ? t.rows : 0;
    return rows;
  };
  EXPECT_EQ(rows_of("layers.0.self_attn.q_b_proj.weight"), 64 * (192 + 64));
  EXPECT_EQ(rows_of("layers.0.self_attn.kv_b_proj.weight"), 64 * (192 + 256));
  EXPECT_EQ(tensor(inv, "layers.77.self_attn.o_proj.weight").cols, 16'384);
  const Tensor& wq_b = tensor(inv, "layers.5.self_attn.indexer.wq_b.weight");
  EXPECT_EQ(wq_b.rows, 4096);
  EXPECT_EQ(wq_b.cols, 2048);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.indexer.wk.weight").cols, 6144);
  EXPECT_EQ(tensor(inv, "layers.40.self_attn.indexer.k_norm.bias").rows, 128);
  EXPECT_EQ(tensor(inv, "layers.77.self_attn.indexer.weights_proj.weight").rows, 32);
  EXPECT_EQ(tensor(inv, "layers.3.mlp.gate.e_score_correction_bias").rows, 256);
  EXPECT_EQ(tensor(inv, "layers.78.self_attn.indexer.wq_b.weight").placement, Placement::mtp);
  EXPECT_EQ(tensor(inv, "layers.78.eh_proj.weight").cols, 12'288);
  // 78 layers and the MTP layer's decoder each hold one indexer.
  EXPECT_EQ(kIndexer, 9'371'904u);
  EXPECT_EQ(role_total(inv, Role::indexer_wq_b), 79u * 8'388'608u);
  EXPECT_EQ(role_total(inv, Role::indexer_weights_proj), 79u * 196'608u);
}

// Totals by hand:
//   main model  2 x 951,582,720 + 6144 + 78 x (165,019,648 + 9,371,904 + 14,848)
//               + 3 x 226,492,416 + 75 x 9,702,998,272            = 743,911,218,432
//   MTP layer   decoder (MoE) 165,019,648 + 9,371,904 + 14,848 + 9,702,998,272 = 9,877,404,672,
//               enorm + hnorm 12,288, eh_proj 6144 x 12288 = 75,497,472, shared_head.norm 6144
//                                                                  =   9,952,920,576
//               main + MTP                                          = 753,864,139,008
// The Hub's safetensors total for zai-org/GLM-5 is 753,864,139,008 (data/models/SOURCES.md): the
// same. The model card's "744B" is the main model (743.9 B), its "40B active" the main model less
// 248 of 256 routed experts in 75 layers: 743,911,218,432 - 75 x 248 x 37,748,736
// = 41,784,728,832. GLM-5's checkpoint stores no MTP copies of the embedding and head (its MTP
// layer shares lm_head); moemem lists DeepSeek-V3's layers.<L>.embed_tokens and shared_head.head
// for the MTP layer (Megatron-Core holds them on an MTP stage without the embedding), so the
// training inventory is the Hub total plus those two 951,582,720 matrices, 755,767,304,448, and
// `count` (the checkpoint's tensors) is the Hub total.
TEST(Glm5ModelType, CountIsTheHubsSafetensorsTotalAndTrainingHoldsTheMtpCopies) {
  ModelSpec m = parse_hf_config(config_text(), "glm-5");
  const Inventory inv = build_inventory(m);
  constexpr std::uint64_t kMain =
      2u * kVocabMatrix + 6144u + 78u * (kMla + kIndexer + kNorms) + 3u * kDense + 75u * kMoe;
  constexpr std::uint64_t kMtp = kMla + kIndexer + kNorms + kMoe + 2u * 6144u + 6144u * 12'288u + 6144u;
  EXPECT_EQ(kMoe, 9'702'998'272u);
  EXPECT_EQ(kMain, 743'911'218'432u);
  EXPECT_EQ(kMtp, 9'952'920'576u);
  EXPECT_EQ(kMain + kMtp, 753'864'139'008u);  // the Hub's safetensors total
  const std::uint64_t copies = role_total(inv, Role::mtp_embedding) + role_total(inv, Role::mtp_output_head);
  EXPECT_EQ(copies, 2u * kVocabMatrix);
  EXPECT_EQ(inv.total().value() - copies, 753'864'139'008u);
  EXPECT_EQ(inv.total().value(), 755'767'304'448u);
  EXPECT_EQ(inv.checkpoint_total().value(), 753'864'139'008u);
  // Per module over the 79 decoders (78 and the MTP layer's): attention = MLA projections and the
  // indexer's three matrices (9,371,648) = 174,391,296 a layer; norms = 14,848 + the indexer's
  // k_norm 256; the output head = head + final norm.
  EXPECT_EQ(module_total(inv, Module::attention), 79ull * (kMla + kIndexer - 256u));
  EXPECT_EQ(module_total(inv, Module::attention), 13'776'912'384u);
  EXPECT_EQ(module_total(inv, Module::norms), 79ull * (kNorms + 256u));
  EXPECT_EQ(module_total(inv, Module::output_head), kVocabMatrix + 6144u);
  set_mtp_layers(m, 0);
  const Inventory main = build_inventory(m);
  EXPECT_EQ(main.total().value(), kMain);
  EXPECT_EQ(active_params(main, m).value(), kMain - 75u * 248u * kExpert);
  EXPECT_EQ(active_params(main, m).value(), 41'784'728'832u);
}

TEST(Glm5ModelType, PresetLoadsByNameAndRepository) {
  EXPECT_EQ(load_model("GLM-5").model_type, "glm_moe_dsa");
  EXPECT_EQ(build_inventory(load_model("zai-org/GLM-5")).checkpoint_total().value(), 753'864'139'008u);
  const auto count = moemem::test::run_cli({"count", "--model", "glm-5", "--format", "json"});
  ASSERT_EQ(count.code, 0) << count.err;
  EXPECT_EQ(nlohmann::json::parse(count.out).at("total_params"), 753'864'139'008u);
  // DeepSeek-V3's checkpoint does store its MTP copies: count and the training inventory agree.
  const Inventory v3 = build_inventory(load_model("deepseek-v3"));
  EXPECT_EQ(v3.checkpoint_total(), v3.total());
}

// transformers 5's explicit spellings of what the config implies are accepted: every layer's
// indexer "full", index_topk_freq 1, every layer deepseek_sparse_attention, the 3 + 75 MLP split.
TEST(Glm5ModelType, ExplicitDefaultsAreAccepted) {
  nlohmann::json c = nlohmann::json::parse(config_text());
  c["indexer_types"] = std::vector<std::string>(78, "full");
  c["index_topk_freq"] = 1;
  c["layer_types"] = std::vector<std::string>(78, "deepseek_sparse_attention");
  std::vector<std::string> mlp(78, "sparse");
  std::fill_n(mlp.begin(), 3, "dense");
  c["mlp_layer_types"] = mlp;
  c["head_dim"] = 64;
  c["rope_parameters"] = {{"rope_theta", 1000000}, {"rope_type", "default"}};
  const ModelSpec m = parse_hf_config(c.dump(), "glm-5");
  EXPECT_TRUE(m.unrecognised_keys.empty());
  EXPECT_EQ(build_inventory(m).total().value(), 755'767'304'448u);
  c.erase("indexer_types");
  c["index_topk_pattern"] = std::string(78, 'F');
  EXPECT_EQ(build_inventory(parse_hf_config(c.dump(), "glm-5")).total().value(), 755'767'304'448u);
}

// Layers without their own indexer (GLM-5.2's IndexCache: indexer_types "shared", or the
// index_topk_freq / index_skip_topk_offset schedule, or an "S" in index_topk_pattern), an MTP
// layer that reuses the main model's top-k, biases and other layer kinds are refused by name.
TEST(Glm5ModelType, KeysThatChangeTensorsAreRefusedByName) {
  const auto with = [](const char* key, const nlohmann::json& value) {
    nlohmann::json c = nlohmann::json::parse(config_text());
    c[key] = value;
    return c.dump();
  };
  std::vector<std::string> shared(78, "full");
  shared[4] = "shared";
  expect_error(with("indexer_types", shared), "indexer_types");
  expect_error(with("indexer_types", std::vector<std::string>(77, "full")), "indexer_types");
  expect_error(with("index_topk_freq", 4), "index_topk_freq");  // GLM-5.2: freq 4, offset 3
  expect_error(with("index_topk_pattern", "FS" + std::string(76, 'F')), "index_topk_pattern");
  expect_error(with("index_share_for_mtp_iteration", true), "index_share_for_mtp_iteration");
  expect_error(with("mlp_bias", true), "mlp_bias");
  expect_error(with("attention_bias", true), "attention_bias");
  expect_error(with("layer_types", std::vector<std::string>(78, "full_attention")), "layer_types");
  expect_error(with("mlp_layer_types", std::vector<std::string>(78, "sparse")), "mlp_layer_types");
  expect_error(with("q_lora_rank", nullptr), "q_lora_rank");
  expect_error(with("index_head_dim", 32), "index_head_dim");
  nlohmann::json c = nlohmann::json::parse(config_text());
  c.erase("index_n_heads");
  expect_error(c.dump(), "index_n_heads");
  // GLM-5's keys under GLM-4.7-Flash's type are refused (the indexer would be dropped).
  expect_error(with("model_type", "glm4_moe_lite"), "index_");
}

// Analysis under megatron (DSA's activations are modelled there, test_dsa_activations.cpp):
// 78 layers and the MTP layer over 8 pipeline stages, ep 64, tp 1, s 4096, b 1.
TEST(Glm5ModelType, AnalysisCompletesUnderMegatron) {
  const ModelSpec m = load_model("glm-5");
  ParallelConfig p;
  p.pp = 8;
  p.dp = 64;
  p.ep = 64;
  TrainingConfig t;
  t.micro_batch = 1;
  t.seq_len = 4096;
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  t.global_batch = 1024;
  const MemoryReport r = analyze(m, build_inventory(m), get_profile("megatron"), resolve_layout(m, p), t);
  ASSERT_EQ(r.stages.size(), 8u);
  for (const auto& st : r.stages) EXPECT_GT(st.bytes.activations.value(), 0u) << st.stage;
}

}  // namespace
