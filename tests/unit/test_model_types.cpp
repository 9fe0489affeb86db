// Every supported Hugging Face model_type, read from a real published config.json shipped under
// tests/data/configs (provenance: data/models/SOURCES.md), with the tensors that family has and
// the exact total where a public figure exists (safetensors sizes; tests/golden/counts_models.json).
#include <algorithm>
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

bool has_tensor(const Inventory& inv, const std::string& name) {
  return std::any_of(inv.tensors.begin(), inv.tensors.end(), [&](const Tensor& t) { return t.name == name; });
}

TEST(ModelTypes, Llama) {
  const ModelSpec m = load_model(config_path("llama-3.1-8b"));
  EXPECT_EQ(m.model_type, "llama");
  const Inventory inv = build_inventory(m);
  // 8 KV heads of 128: k_proj is 1024 x 4096; no biases.
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.k_proj.weight").rows, 1024);
  EXPECT_FALSE(has_tensor(inv, "layers.0.self_attn.q_proj.bias"));
  // meta-llama/Llama-3.1-8B: 8,030,261,248 parameters (bf16 safetensors, 16,060,522,496 bytes).
  EXPECT_EQ(inv.total().value(), 8030261248u);
}

TEST(ModelTypes, Mistral) {
  const ModelSpec m = load_model(config_path("mistral-7b"));
  EXPECT_EQ(m.model_type, "mistral");
  // Mistral-7B-v0.1: 7,241,732,096 parameters (bf16 safetensors, 14,483,464,192 bytes).
  EXPECT_EQ(build_inventory(m).total().value(), 7241732096u);
}

TEST(ModelTypes, Mixtral) {
  const ModelSpec m = load_model(config_path("mixtral-8x22b"));
  EXPECT_EQ(m.model_type, "mixtral");
  const Inventory inv = build_inventory(m);
  EXPECT_TRUE(has_tensor(inv, "layers.0.block_sparse_moe.experts.*.w1.weight"));
  EXPECT_EQ(tensor(inv, "layers.0.block_sparse_moe.experts.*.w2.weight").copies, 8);
  // Mixtral-8x22B-v0.1: 140,620,634,112 parameters.
  EXPECT_EQ(inv.total().value(), 140620634112u);
}

TEST(ModelTypes, Qwen2HasQkvBiases) {
  const ModelSpec m = load_model(config_path("qwen2-7b"));
  EXPECT_EQ(m.model_type, "qwen2");
  const Inventory inv = build_inventory(m);
  EXPECT_TRUE(has_tensor(inv, "layers.0.self_attn.q_proj.bias"));
  EXPECT_TRUE(has_tensor(inv, "layers.0.self_attn.v_proj.bias"));
  EXPECT_FALSE(has_tensor(inv, "layers.0.self_attn.o_proj.bias"));
  // By hand from the config (h 3584, 28 heads, 4 KV heads of 128, ffn 18944, 28 layers,
  // vocab 152064, untied): embedding and head 2 x 152064 x 3584; per layer q 3584^2 + 3584,
  // k and v 512 x 3584 + 512 each, o 3584^2, MLP 3 x 3584 x 18944, two norms; final norm.
  const std::uint64_t h = 3584, kv = 512, f = 18944, layers = 28, v = 152064;
  const std::uint64_t layer = (h * h + h) + 2 * (kv * h + kv) + h * h + 3 * h * f + 2 * h;
  EXPECT_EQ(inv.total().value(), 2 * v * h + layers * layer + h);
}

TEST(ModelTypes, Qwen2MoeHasGatedSharedExpert) {
  const ModelSpec m = load_model(config_path("qwen2-57b-a14b"));
  EXPECT_EQ(m.model_type, "qwen2_moe");
  const Inventory inv = build_inventory(m);
  EXPECT_TRUE(has_tensor(inv, "layers.0.mlp.shared_expert.gate_proj.weight"));
  EXPECT_EQ(tensor(inv, "layers.0.mlp.shared_expert_gate.weight").rows, 1);
  // Qwen2-57B-A14B: 57,408,658,944 parameters.
  EXPECT_EQ(inv.total().value(), 57408658944u);
}

TEST(ModelTypes, Qwen3HasQkNorms) {
  const ModelSpec m = load_model(config_path("qwen3-8b"));
  EXPECT_EQ(m.model_type, "qwen3");
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.q_norm.weight").rows, 128);
  EXPECT_FALSE(has_tensor(inv, "layers.0.self_attn.q_proj.bias"));
  // Qwen3-8B: 8,190,735,360 parameters.
  EXPECT_EQ(inv.total().value(), 8190735360u);
}

TEST(ModelTypes, Qwen3Moe) {
  const ModelSpec m = load_model(config_path("qwen3-235b-a22b"));
  EXPECT_EQ(m.model_type, "qwen3_moe");
  EXPECT_EQ(m.num_moe_layers(), m.num_layers);
  // Qwen3-235B-A22B: 235,093,634,560 parameters.
  EXPECT_EQ(build_inventory(m).total().value(), 235093634560u);
}

TEST(ModelTypes, DeepSeekV1) {
  const ModelSpec m = load_model(config_path("deepseek-moe-16b"));
  EXPECT_EQ(m.model_type, "deepseek");
  EXPECT_EQ(m.layer_kinds[0], LayerKind::dense);  // first_k_dense_replace 1
  EXPECT_EQ(m.layer_kinds[1], LayerKind::moe);
  // deepseek-moe-16b: 16,375,728,128 parameters.
  EXPECT_EQ(build_inventory(m).total().value(), 16375728128u);
}

TEST(ModelTypes, DeepSeekV3FamilyMoonlight) {
  const ModelSpec m = load_model(config_path("moonlight-16b"));
  EXPECT_EQ(m.model_type, "deepseek_v3");
  EXPECT_EQ(m.attention, AttentionKind::mla);
  EXPECT_GT(m.num_moe_layers(), 0);
}

TEST(ModelTypes, DeepSeekV2FromSharedModels) {
  const ModelSpec m = load_model(std::string(MOEMEM_SHARED_MODELS_DIR) + "/deepseek-v2-lite.json");
  EXPECT_EQ(m.model_type, "deepseek_v2");
  EXPECT_EQ(build_inventory(m).total().value(), 15706484224u);  // paper-method.md §2
}

TEST(ModelTypes, TextConfigNestingAndKimiAlias) {
  std::ifstream in(config_path("qwen3-8b"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string wrapped = R"({"model_type": "qwen3", "text_config": )" + ss.str() + "}";
  EXPECT_EQ(build_inventory(parse_hf_config(wrapped, "wrapped")).total().value(), 8190735360u);
  std::ifstream v3(std::string(MOEMEM_SHARED_MODELS_DIR) + "/deepseek-v3.json");
  std::stringstream s3;
  s3 << v3.rdbuf();
  std::string kimi = s3.str();
  kimi.replace(kimi.find("\"deepseek_v3\""), 13, "\"kimi_k2\"");
  EXPECT_EQ(build_inventory(parse_hf_config(kimi, "kimi")).total().value(), 684489845504u);
}

// Contradictory fields get named errors.
TEST(ModelTypes, ContradictoryFieldsAreNamed) {
  const std::string base = R"("model_type": "llama", "vocab_size": 1000, "num_hidden_layers": 2, "intermediate_size": 128)";
  expect_error("{" + base + R"(, "hidden_size": 100, "num_attention_heads": 3})", "num_attention_heads");
  expect_error("{" + base + R"(, "hidden_size": -64, "num_attention_heads": 4})", "hidden_size");
  expect_error("{" + base + R"(, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3})",
               "num_key_value_heads");
  expect_error(R"({"model_type": "mixtral", "vocab_size": 1000, "num_hidden_layers": 2, "intermediate_size": 128,
                   "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "num_local_experts": 4,
                   "num_experts_per_tok": 8})",
               "num_experts_per_tok");
}

// Keys the modelling code ignores: Qwen3(-MoE) builds q/k norms whatever use_qk_norm says (true in
// Qwen3-Coder-480B's config), so true is accepted and counted as the norms; Mistral builds no
// biases, so attention_bias true is refused rather than counted.
TEST(ModelTypes, KeysTheModellingCodeIgnores) {
  std::ifstream in(config_path("qwen3-8b"));
  nlohmann::json q = nlohmann::json::parse(in);
  q["use_qk_norm"] = true;
  q["qkv_bias"] = false;
  EXPECT_EQ(build_inventory(parse_hf_config(q.dump(), "qwen3")).total().value(), 8190735360u);
  q["qkv_bias"] = true;
  expect_error(q.dump(), "qkv_bias");
  std::ifstream mi(config_path("mistral-7b"));
  nlohmann::json m = nlohmann::json::parse(mi);
  m["attention_bias"] = true;
  expect_error(m.dump(), "attention_bias");
}

// Keys a config leaves out take the config class's default, not a generic one: transformers'
// MistralConfig/MixtralConfig num_key_value_heads 8, Qwen3MoeConfig 4, Qwen3Config 32 and
// head_dim 128; LlamaConfig's None falls back to num_attention_heads.
TEST(ModelTypes, AbsentKeysTakeTheConfigClassDefaults) {
  const auto spec = [](const std::string& type, const std::string& extra) {
    return parse_hf_config(R"({"model_type": ")" + type + R"(", "vocab_size": 1000, "num_hidden_layers": 2,
                           "intermediate_size": 128, "hidden_size": 2048, "num_attention_heads": 32)" + extra + "}",
                           "absent.json");
  };
  EXPECT_EQ(spec("mistral", "").num_kv_heads, 8);
  EXPECT_EQ(spec("qwen3_moe", R"(, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64)").num_kv_heads, 4);
  const ModelSpec q = spec("qwen3", "");
  EXPECT_EQ(q.num_kv_heads, 32);
  EXPECT_EQ(q.head_dim, 128);
  const ModelSpec l = spec("llama", "");
  EXPECT_EQ(l.num_kv_heads, 32);
  EXPECT_EQ(l.head_dim, 64);  // 2048 / 32
  EXPECT_EQ(spec("mistral", R"(, "num_key_value_heads": 4)").num_kv_heads, 4);  // given: as given
}


// GLM-4.5-Air (zai-org/GLM-4.5-Air config.json, tests/data/configs; data/models/SOURCES.md): by
// hand from the config. h 4096, 96 heads and 8 KV heads of 128, q/k/v biases (no o bias, no
// q/k norm), 46 layers of which layer 0 dense (ffn 10944), 45 MoE (128 experts of 1408, one
// shared of 1408, router 128 x h with a 128-value correction bias), vocab 151552 untied, one
// MTP layer (an MoE decoder layer, enorm, hnorm, eh_proj h x 2h, shared_head.norm, and copies
// of the embedding and head).
std::uint64_t glm_total(std::uint64_t h, std::uint64_t ffn, std::uint64_t eff, std::uint64_t experts, std::uint64_t dense,
                        std::uint64_t layers, bool qk_norm, bool with_mtp) {
  const std::uint64_t q = 96 * 128, kv = 8 * 128, v = 151552;
  const std::uint64_t attn = (q * h + q) + 2 * (kv * h + kv) + h * q + (qk_norm ? 2 * 128 : 0);
  const std::uint64_t norms = 2 * h;
  const std::uint64_t moe = experts * h + experts + experts * 3 * h * eff + 3 * h * eff;
  const std::uint64_t dense_layer = attn + norms + 3 * h * ffn, moe_layer = attn + norms + moe;
  const std::uint64_t main = 2 * v * h + dense * dense_layer + (layers - dense) * moe_layer + h;
  const std::uint64_t mtp = moe_layer + h * 2 * h + 3 * h + 2 * v * h;
  return main + (with_mtp ? mtp : 0);
}

TEST(ModelTypes, Glm45Air) {
  const ModelSpec m = load_model(config_path("glm-4.5-air"));
  EXPECT_EQ(m.model_type, "glm4_moe");
  EXPECT_EQ(m.layer_kinds[0], LayerKind::dense);
  EXPECT_EQ(m.num_moe_layers(), 45);
  EXPECT_EQ(m.mtp_layers, 1);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.q_proj.bias").rows, 12288);
  EXPECT_FALSE(has_tensor(inv, "layers.0.self_attn.o_proj.bias"));
  EXPECT_FALSE(has_tensor(inv, "layers.0.self_attn.q_norm.weight"));
  EXPECT_EQ(tensor(inv, "layers.1.mlp.gate.e_score_correction_bias").rows, 128);
  EXPECT_EQ(tensor(inv, "layers.1.mlp.shared_experts.gate_proj.weight").rows, 1408);
  EXPECT_EQ(tensor(inv, "layers.46.eh_proj.weight").cols, 8192);
  // Per layer: attention 12288 x 4096 + 12288 + 2 (1024 x 4096 + 1024) + 4096 x 12288
  // = 109,066,240; norms 8,192; dense MLP 3 x 4096 x 10944 = 134,479,872; MoE 128 x 4096 + 128
  // + 128 x 3 x 4096 x 1408 + 3 x 4096 x 1408 = 2,232,418,432. Main model: 2 x 151552 x 4096
  // + 243,554,304 + 45 x 2,341,492,864 + 4096 = 106,852,251,264 (the model card's "106B total").
  // MTP: 2,341,492,864 + 4096 x 8192 + 3 x 4096 + 2 x 151552 x 4096 = 3,616,573,568.
  EXPECT_EQ(glm_total(4096, 10944, 1408, 128, 1, 46, false, false), 106852251264u);
  EXPECT_EQ(inv.total().value(), glm_total(4096, 10944, 1408, 128, 1, 46, false, true));
  EXPECT_EQ(inv.total().value(), 110468824832u);
}

TEST(ModelTypes, Glm45HasQkNormsAndThreeDenseLayers) {
  const ModelSpec m = load_model(config_path("glm-4.5"));
  EXPECT_EQ(m.num_moe_layers(), 89);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.k_norm.weight").rows, 128);
  // Hugging Face lists zai-org/GLM-4.5's safetensors at 358.34 B parameters (667.5 GiB of
  // bf16): main model 352,797,829,024 (3 dense layers of 325,083,392, 89 MoE of 3,935,625,632,
  // embedding and head 1,551,892,480, final norm 5,120) + MTP 5,539,962,272.
  EXPECT_EQ(inv.total().value(), glm_total(5120, 12288, 1536, 160, 3, 92, true, true));
  EXPECT_EQ(inv.total().value(), 358337791296u);
}

// gpt-oss (openai/gpt-oss-20b and -120b config.json, tests/data/configs): by hand. h 2880, 64
// heads and 8 KV heads of 64, biases on q, k, v, o, a sink per head; every layer MoE with a
// biased router and experts of 2880 with biases; vocab 201088 untied. Per layer attention
// (4096 x 2880 + 4096) + 2 (512 x 2880 + 512) + (2880 x 4096 + 2880) + 64 = 26,550,144; norms
// 5,760; router E x 2880 + E; experts E x (2880 x 5760 + 5760 + 2880 x 2880 + 2880)
// = E x 24,891,840.
std::uint64_t gpt_oss_total(std::uint64_t layers, std::uint64_t experts) {
  const std::uint64_t h = 2880, q = 4096, kv = 512, v = 201088;
  const std::uint64_t attn = (q * h + q) + 2 * (kv * h + kv) + (h * q + h) + 64;
  const std::uint64_t moe = experts * h + experts + experts * (h * 2 * h + 2 * h + h * h + h);
  return 2 * v * h + layers * (attn + 2 * h + moe) + h;
}

TEST(ModelTypes, GptOss) {
  const ModelSpec m = load_model(config_path("gpt-oss-20b"));
  EXPECT_EQ(m.model_type, "gpt_oss");
  EXPECT_EQ(m.num_moe_layers(), 24);
  const Inventory inv = build_inventory(m);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.sinks").rows, 64);
  EXPECT_EQ(tensor(inv, "layers.0.self_attn.o_proj.bias").rows, 2880);
  EXPECT_EQ(tensor(inv, "layers.0.mlp.router.bias").rows, 32);
  EXPECT_EQ(tensor(inv, "layers.0.mlp.experts.gate_up_proj_bias").rows, 5760);
  EXPECT_EQ(tensor(inv, "layers.0.mlp.experts.down_proj_bias").copies, 32);
  // The gpt-oss model card (arXiv 2508.10925, Table 1): 20.91 B total; by hand 24 x
  // 823,186,976 + 2 x 201088 x 2880 + 2880 = 20,914,757,184.
  EXPECT_EQ(inv.total().value(), gpt_oss_total(24, 32));
  EXPECT_EQ(inv.total().value(), 20914757184u);
  // gpt-oss-120b: 116.83 B in the same table; 36 x 3,213,080,192 + 1,158,269,760.
  EXPECT_EQ(build_inventory(load_model(config_path("gpt-oss-120b"))).total().value(), gpt_oss_total(36, 128));
  EXPECT_EQ(gpt_oss_total(36, 128), 116829156672u);
  // experts_per_token repeats num_experts_per_tok; a contradiction is named.
  nlohmann::json c = nlohmann::json::parse(text_of(config_path("gpt-oss-20b")));
  c["experts_per_token"] = 2;
  expect_error(c.dump(), "experts_per_token");
}

// Issue 14: an unknown model_type is refused with the supported list and the nearest type.
TEST(ModelTypes, AnUnknownTypeNamesTheNearestSupportedOne) {
  const std::string rest = R"(, "vocab_size": 1000, "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4})";
  expect_error(R"({"model_type": "qwen3_mo")" + rest, "nearest by name: qwen3_moe");
  expect_error(R"({"model_type": "deepseekv3")" + rest, "nearest by name: deepseek_v3");
  expect_error(R"({"model_type": "Llama")" + rest, "nearest by name: llama");
  expect_error(R"({"model_type": "mixtral_x")" + rest, "one of: deepseek, deepseek_v2");
  expect_error(R"({"model_type": "glm4_moe_light")" + rest, "nearest by name: glm4_moe_lite");
  // A text decoder of a supported architecture under another family's name: that type, not the
  // nearest name (qwen3_5_moe_text, a hybrid model, counted Qwen3-VL-30B's decoder 2.6% high).
  expect_error(R"({"model_type": "qwen3_vl_moe_text")" + rest, "give model_type qwen3_moe");
}

// Issue 14: keys that add tensors the type's reader does not model are refused by name, never
// noted and dropped. DeepSeek-V3.2's indexer keys (index_n_heads 64, index_head_dim 128,
// index_topk 2048: DeepSeek-V3.2-Exp config.json) on a config labelled deepseek_v3 would lose
// the indexer's ~0.85 B parameters.
TEST(ModelTypes, KeysThatAddTensorsAreRefusedByName) {
  nlohmann::json v32 = nlohmann::json::parse(text_of(std::string(MOEMEM_SHARED_MODELS_DIR) + "/deepseek-v3.json"));
  v32["index_n_heads"] = 64;
  v32["index_head_dim"] = 128;
  v32["index_topk"] = 2048;
  expect_error(v32.dump(), "index_n_heads");
  nlohmann::json qwen = nlohmann::json::parse(text_of(config_path("qwen3-8b")));
  qwen["num_nextn_predict_layers"] = 1;  // MTP layers the qwen3 reader does not build
  expect_error(qwen.dump(), "num_nextn_predict_layers");
  qwen["num_nextn_predict_layers"] = 0;  // off: nothing added, accepted
  EXPECT_EQ(build_inventory(parse_hf_config(qwen.dump(), "q.json")).total().value(), 8190735360u);
  nlohmann::json llama = nlohmann::json::parse(text_of(config_path("llama-3.1-8b")));
  llama["use_qk_norm"] = true;
  expect_error(llama.dump(), "use_qk_norm");
  llama.erase("use_qk_norm");
  llama["layer_types"] = nlohmann::json::array({"full_attention", "linear_attention"});
  expect_error(llama.dump(), "layer_types");
  nlohmann::json mixtral = nlohmann::json::parse(text_of(config_path("mixtral-8x22b")));
  mixtral["topk_method"] = "noaux_tc";  // a per-expert correction bias mixtral's reader does not add
  expect_error(mixtral.dump(), "topk_method");
  mixtral.erase("topk_method");
  mixtral["n_shared_experts"] = 1;
  expect_error(mixtral.dump(), "n_shared_experts");
}

}  // namespace
