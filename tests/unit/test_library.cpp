// Direct unit tests of the library's building blocks: checked arithmetic and strong units,
// dtypes, config parsing and the tensor inventory. Expected values are worked out by hand from
// the config numbers (data/models/*.json) and paper-method.md.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "moemem/config.hpp"
#include "moemem/dtype.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/units.hpp"

namespace {

using namespace moemem;

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t kTwoTo(unsigned n) { return std::uint64_t{1} << n; }

// ---------------------------------------------------------------------------------------------
// units.hpp

TEST(Units, CheckedAddAtTheEdge) {
  EXPECT_EQ(checked_add(kMax - 1, 1, "x"), kMax);
  EXPECT_EQ(checked_add(0, 0, "x"), 0u);
  EXPECT_THROW((void)checked_add(kMax, 1, "x"), OverflowError);
  EXPECT_THROW((void)checked_add(kTwoTo(63), kTwoTo(63), "x"), OverflowError);
}

TEST(Units, CheckedMulAtTheEdge) {
  EXPECT_EQ(checked_mul(kTwoTo(32), kTwoTo(31), "x"), kTwoTo(63));
  EXPECT_EQ(checked_mul(0, kMax, "x"), 0u);
  // 2^64 - 1 = 3 * 6148914691236517205 exactly.
  EXPECT_EQ(checked_mul(3, 6148914691236517205u, "x"), kMax);
  EXPECT_THROW((void)checked_mul(3, 6148914691236517206u, "x"), OverflowError);
  EXPECT_THROW((void)checked_mul(kTwoTo(32), kTwoTo(32), "x"), OverflowError);
}

TEST(Units, CheckedSub) {
  EXPECT_EQ(checked_sub(5, 3, "x"), 2u);
  EXPECT_EQ(checked_sub(3, 3, "x"), 0u);
  EXPECT_THROW((void)checked_sub(3, 5, "x"), OverflowError);
}

TEST(Units, OverflowErrorIsAnInputErrorNamingWhatWasComputed) {
  try {
    (void)checked_mul(kMax, 2, "expert weights of layer 3");
    FAIL() << "no overflow reported";
  } catch (const InputError& e) {  // the CLI maps every InputError to exit code 2
    EXPECT_EQ(e.field(), "expert weights of layer 3");
    EXPECT_NE(std::string(e.what()).find("expert weights of layer 3"), std::string::npos) << e.what();
  }
}

TEST(Units, CeilDiv) {
  EXPECT_EQ(ceil_div(0, 7), 0u);
  EXPECT_EQ(ceil_div(1, 7), 1u);
  EXPECT_EQ(ceil_div(7, 7), 1u);
  EXPECT_EQ(ceil_div(8, 7), 2u);
  EXPECT_EQ(ceil_div(429'719'552, 32), 13'428'736u);  // exact (paper-method.md §5)
  EXPECT_EQ(ceil_div(429'719'553, 32), 13'428'737u);
  // No overflow of a + b - 1 at the top of the range.
  EXPECT_EQ(ceil_div(kMax, 1), kMax);
  EXPECT_EQ(ceil_div(kMax, 2), kTwoTo(63));
  EXPECT_EQ(ceil_div(kMax, kMax), 1u);
}

TEST(Units, CountAndBytesAddWithOverflowCheck) {
  Count c(kMax - 5);
  c += Count(5);
  EXPECT_EQ(c.value(), kMax);
  EXPECT_THROW(c += Count(1), OverflowError);
  EXPECT_THROW((void)(Bytes(kMax) + Bytes(1)), OverflowError);
  EXPECT_EQ((Bytes(3) + Bytes(4)).value(), 7u);
  EXPECT_LT(Count(3), Count(4));
  EXPECT_LT(Bytes(3), Bytes(4));
}

TEST(Units, GibAndGbAreDifferentUnits) {
  EXPECT_EQ(Bytes::from_gib(1.0).value(), kTwoTo(30));
  EXPECT_EQ(Bytes::from_gb(1.0).value(), 1'000'000'000u);
  // 0.8 * 2^30 = 858,993,459.2: rounded up to a whole byte.
  EXPECT_EQ(Bytes::from_gib(0.8).value(), 858'993'460u);
  EXPECT_EQ(Bytes::from_gib(0.0).value(), 0u);
  EXPECT_DOUBLE_EQ(Bytes(3 * kTwoTo(29)).gib(), 1.5);
  EXPECT_DOUBLE_EQ(Bytes(3 * kTwoTo(19)).mib(), 1.5);
  EXPECT_DOUBLE_EQ(Bytes(1'500'000'000).gb(), 1.5);
  EXPECT_EQ(format_gib(Bytes(3 * kTwoTo(29))), "1.50 GiB");
  EXPECT_EQ(format_gib(Bytes(0)), "0.00 GiB");
  // paper-method.md §4: 12,500,729,856 bytes are 11.64 GiB.
  EXPECT_EQ(format_gib(Bytes(12'500'729'856)), "11.64 GiB");
}

TEST(Units, NonsenseSizesAreRefused) {
  EXPECT_THROW((void)Bytes::from_gib(-0.5), InputError);
  EXPECT_THROW((void)Bytes::from_gib(std::nan("")), InputError);
  EXPECT_THROW((void)Bytes::from_gib(std::numeric_limits<double>::infinity()), InputError);
  EXPECT_THROW((void)Bytes::from_gb(2e10), InputError);  // 2e19 bytes > 2^64
}

// ---------------------------------------------------------------------------------------------
// dtype.hpp

TEST(DTypes, Bits) {
  EXPECT_EQ(bits_of(DType::fp32), 32u);
  EXPECT_EQ(bits_of(DType::bf16), 16u);
  EXPECT_EQ(bits_of(DType::fp16), 16u);
  EXPECT_EQ(bits_of(DType::fp8), 8u);
  EXPECT_EQ(bits_of(DType::int8), 8u);
}

TEST(DTypes, NamesRoundTripAndAliases) {
  for (const DType t : {DType::fp32, DType::bf16, DType::fp16, DType::fp8, DType::int8}) {
    EXPECT_EQ(parse_dtype(name_of(t), "--x"), t) << name_of(t);
  }
  EXPECT_EQ(name_of(DType::bf16), "bf16");
  EXPECT_EQ(parse_dtype("float32", "--x"), DType::fp32);
  EXPECT_EQ(parse_dtype("bfloat16", "--x"), DType::bf16);
  EXPECT_EQ(parse_dtype("float16", "--x"), DType::fp16);
}

TEST(DTypes, ParseErrorNamesFieldValueAndChoices) {
  for (const char* bad : {"fp7", "", "bf16 ", "float64", "fp8e4m3x"}) {
    try {
      (void)parse_dtype(bad, "--main-grads-dtype");
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "--main-grads-dtype");
      EXPECT_EQ(e.value(), bad);
      EXPECT_NE(e.accepted().find("fp32"), std::string::npos) << e.accepted();
      EXPECT_NE(e.accepted().find("bf16"), std::string::npos) << e.accepted();
    }
  }
}

TEST(DTypes, BytesOfOddCounts) {
  EXPECT_EQ(bytes_of(Count(0), DType::fp32).value(), 0u);
  EXPECT_EQ(bytes_of(Count(1), DType::fp8).value(), 1u);
  EXPECT_EQ(bytes_of(Count(3), DType::fp8).value(), 3u);
  EXPECT_EQ(bytes_of(Count(5), DType::int8).value(), 5u);
  EXPECT_EQ(bytes_of(Count(7), DType::bf16).value(), 14u);
  EXPECT_EQ(bytes_of(Count(7), DType::fp16).value(), 14u);
  EXPECT_EQ(bytes_of(Count(7), DType::fp32).value(), 28u);
  // paper-method.md §4: 6,250,364,928 parameters are 12,500,729,856 BF16 bytes.
  EXPECT_EQ(bytes_of(Count(6'250'364'928), DType::bf16).value(), 12'500'729'856u);
}

TEST(DTypes, BytesOfOverflowIsAnError) {
  // 2^62 fp32 elements are 2^64 bytes: do not fit.
  EXPECT_THROW((void)bytes_of(Count(kTwoTo(62)), DType::fp32), OverflowError);
  EXPECT_THROW((void)bytes_of(Count(kMax), DType::bf16), OverflowError);
}

TEST(DTypes, BytesOfLargeCountsThatFit) {
  EXPECT_EQ(bytes_of(Count(kTwoTo(62)), DType::fp8).value(), kTwoTo(62));
  EXPECT_EQ(bytes_of(Count(kTwoTo(61)), DType::bf16).value(), kTwoTo(62));
  EXPECT_EQ(bytes_of(Count(kTwoTo(60)), DType::fp32).value(), kTwoTo(62));
}

// ---------------------------------------------------------------------------------------------
// errors.hpp

TEST(Errors, InputErrorCarriesFieldValueAndAccepted) {
  const InputError e("--tp", "3", "a divisor of num_attention_heads (128)");
  EXPECT_EQ(e.field(), "--tp");
  EXPECT_EQ(e.value(), "3");
  EXPECT_EQ(e.accepted(), "a divisor of num_attention_heads (128)");
  const std::string what = e.what();
  for (const char* w : {"--tp", "3", "a divisor of num_attention_heads (128)"}) {
    EXPECT_NE(what.find(w), std::string::npos) << what;
  }
}

// ---------------------------------------------------------------------------------------------
// config.hpp

std::string preset_json(const std::string& name) {
  for (const auto& p : preset_texts()) {
    if (name == p.name) return p.json;
  }
  ADD_FAILURE() << "no preset " << name;
  return "{}";
}

const Tensor* find_tensor(const Inventory& inv, const std::string& name, std::string_view part = "") {
  for (const auto& t : inv.tensors) {
    if (t.name == name && t.part == part) return &t;
  }
  return nullptr;
}

bool has_tensor_containing(const Inventory& inv, const std::string& fragment) {
  for (const auto& t : inv.tensors) {
    if (t.name.find(fragment) != std::string::npos) return true;
  }
  return false;
}

TEST(Config, PresetsIncludeTheDeepSeekFamily) {
  const auto names = preset_names();
  for (const char* n : {"deepseek-v3", "deepseek-v2", "deepseek-v2-lite"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
}

TEST(Config, DeepSeekV3Dimensions) {
  const ModelSpec m = load_model("deepseek-v3");
  EXPECT_EQ(m.name, "deepseek-v3");
  EXPECT_EQ(m.attention, AttentionKind::mla);
  EXPECT_EQ(m.hidden, 7168);
  EXPECT_EQ(m.num_layers, 61);
  EXPECT_EQ(m.mla.q_lora_rank, 1536);
  EXPECT_EQ(m.mla.kv_lora_rank, 512);
  EXPECT_EQ(m.moe.num_routed_experts, 256);
  EXPECT_EQ(m.moe.top_k, 8);
  EXPECT_EQ(m.mtp_layers, 1);      // num_nextn_predict_layers
  EXPECT_TRUE(m.moe.router_bias);  // topk_method noaux_tc
  EXPECT_EQ(m.moe.n_group, 8);     // group-limited routing: 4 of 8 groups per token
  EXPECT_EQ(m.moe.topk_group, 4);
  // first_k_dense_replace = 3: layers 0-2 dense, 3-60 MoE.
  ASSERT_EQ(m.layer_kinds.size(), 61u);
  EXPECT_EQ(m.layer_kinds[2], LayerKind::dense);
  EXPECT_EQ(m.layer_kinds[3], LayerKind::moe);
  EXPECT_EQ(m.num_moe_layers(), 58);
  EXPECT_TRUE(m.unrecognised_keys.empty());
}

TEST(Config, DeepSeekV2HasNoRouterBias) {
  const ModelSpec m = load_model("deepseek-v2");
  EXPECT_FALSE(m.moe.router_bias);  // topk_method group_limited_greedy
  EXPECT_EQ(m.moe.n_group, 8);       // 3 of 8 groups per token
  EXPECT_EQ(m.moe.topk_group, 3);
  EXPECT_EQ(load_model("deepseek-v2-lite").moe.n_group, 0);  // topk_method greedy: every expert
  EXPECT_EQ(m.num_moe_layers(), 59);
  EXPECT_FALSE(has_tensor_containing(build_inventory(m), "e_score_correction_bias"));
}

TEST(Config, ExpertGroupsMustDivideTheExperts) {
  // The router views the 256 experts as n_group equal groups; 6 does not divide them.
  const auto& texts = preset_texts();
  const auto v3 = std::find_if(texts.begin(), texts.end(), [](const PresetText& p) { return std::string_view(p.name) == "deepseek-v3"; });
  ASSERT_NE(v3, texts.end());
  nlohmann::json j = nlohmann::json::parse(v3->json);
  j["n_group"] = 6;
  try {
    (void)parse_hf_config(j.dump(), "v3.json");
    FAIL() << "n_group 6 accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "v3.json: n_group");
    EXPECT_NE(std::string(e.what()).find("divisor of n_routed_experts (256)"), std::string::npos) << e.what();
  }
  j["n_group"] = 8;
  j["topk_group"] = 9;  // more groups than there are
  EXPECT_THROW((void)parse_hf_config(j.dump(), "v3.json"), InputError);
}

TEST(Config, NullQueryRankGivesAPlainQProj) {
  const ModelSpec m = load_model("deepseek-v2-lite");
  EXPECT_EQ(m.mla.q_lora_rank, 0);
  const Inventory inv = build_inventory(m);
  // q_proj is (n_h (d_h + d_hr)) x h = (16 * (128 + 64)) x 2048, in two parts.
  const Tensor* nope = find_tensor(inv, "layers.0.self_attn.q_proj.weight", "q_nope");
  const Tensor* rope = find_tensor(inv, "layers.0.self_attn.q_proj.weight", "q_rope");
  ASSERT_NE(nope, nullptr);
  ASSERT_NE(rope, nullptr);
  EXPECT_EQ(nope->rows, 16 * 128);
  EXPECT_EQ(rope->rows, 16 * 64);
  EXPECT_EQ(nope->cols, 2048);
  EXPECT_EQ(rope->cols, 2048);
  EXPECT_EQ((nope->params() + rope->params()).value(), 3072u * 2048u);
  EXPECT_FALSE(has_tensor_containing(inv, "q_a_proj"));
  EXPECT_FALSE(has_tensor_containing(inv, "q_b_proj"));
  EXPECT_FALSE(has_tensor_containing(inv, "q_a_layernorm"));
  // Every one of the 27 layers has it.
  EXPECT_NE(find_tensor(inv, "layers.26.self_attn.q_proj.weight", "q_nope"), nullptr);
}

TEST(Config, MtpCanBeExcludedOrDeepened) {
  ModelSpec m = load_model("deepseek-v3");
  const Inventory with = build_inventory(m);
  const Tensor* eh = find_tensor(with, "layers.61.eh_proj.weight");
  ASSERT_NE(eh, nullptr);
  EXPECT_EQ(eh->rows, 7168);
  EXPECT_EQ(eh->cols, 2 * 7168);
  EXPECT_EQ(eh->placement, Placement::mtp);
  const Tensor* emb = find_tensor(with, "layers.61.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_TRUE(emb->shared_in_training);

  set_mtp_layers(m, std::nullopt);  // keeps the config's depth
  EXPECT_EQ(m.mtp_layers, 1);
  set_mtp_layers(m, 0);
  EXPECT_EQ(m.mtp_layers, 0);
  const Inventory without = build_inventory(m);
  for (const auto& t : without.tensors) EXPECT_NE(t.placement, Placement::mtp) << t.name;
  EXPECT_FALSE(has_tensor_containing(without, "layers.61."));
  // paper-method.md §2: the MTP module holds 13,463,426,304 parameters.
  EXPECT_EQ(with.total().value() - without.total().value(), 13'463'426'304u);
  EXPECT_EQ(without.total().value(), 671'026'419'200u);  // with the router bias

  set_mtp_layers(m, 2);
  const Inventory two = build_inventory(m);
  EXPECT_NE(find_tensor(two, "layers.62.eh_proj.weight"), nullptr);
  EXPECT_EQ(two.total().value(), 671'026'419'200u + 2u * 13'463'426'304u);

  EXPECT_THROW(set_mtp_layers(m, -1), InputError);
  try {
    set_mtp_layers(m, -1);
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "--mtp");
    EXPECT_EQ(e.value(), "-1");
  }
  EXPECT_EQ(m.mtp_layers, 2);  // a refused value changes nothing
}

TEST(Config, UnrecognisedKeysAreReported) {
  nlohmann::json j = nlohmann::json::parse(preset_json("deepseek-v2-lite"));
  j["foo_size"] = 4096;
  const ModelSpec m = parse_hf_config(j.dump(), "custom.json");
  EXPECT_EQ(m.name, "custom.json");
  EXPECT_EQ(m.unrecognised_keys, std::vector<std::string>{"foo_size"});
  // The key changes nothing that was understood.
  EXPECT_EQ(build_inventory(m).total().value(), 15'706'484'224u);
  EXPECT_TRUE(parse_hf_config(preset_json("deepseek-v2-lite"), "plain.json").unrecognised_keys.empty());
}

TEST(Config, NestedTextConfigIsRead) {
  nlohmann::json inner = nlohmann::json::parse(preset_json("deepseek-v2-lite"));
  inner.erase("model_type");
  const nlohmann::json outer = {{"model_type", "deepseek_v2"}, {"text_config", inner}};
  const ModelSpec m = parse_hf_config(outer.dump(), "wrapper.json");
  EXPECT_EQ(m.hidden, 2048);
  EXPECT_EQ(build_inventory(m).total().value(), 15'706'484'224u);
}

TEST(Config, BadKeysNameTheKeyAndValue) {
  const auto expect_error = [](const std::string& key, const nlohmann::json& value, const std::string& shown) {
    nlohmann::json j = nlohmann::json::parse(preset_json("deepseek-v3"));
    if (value.is_discarded()) {
      j.erase(key);
    } else {
      j[key] = value;
    }
    try {
      (void)parse_hf_config(j.dump(), "cfg.json");
      ADD_FAILURE() << key << " = " << value.dump() << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(e.field().find(key), std::string::npos) << e.what();
      EXPECT_NE(e.field().find("cfg.json"), std::string::npos) << e.what();
      EXPECT_NE(e.value().find(shown), std::string::npos) << e.what();
    }
  };
  expect_error("hidden_size", "big", "big");
  expect_error("hidden_size", -7168, "-7168");
  expect_error("hidden_size", 0, "0");
  expect_error("hidden_size", 7168.5, "7168.5");
  expect_error("hidden_size", nlohmann::json::value_t::discarded, "missing");
  expect_error("num_hidden_layers", kTwoTo(40), "1099511627776");
  expect_error("q_lora_rank", -1, "-1");
  expect_error("tie_word_embeddings", "yes", "yes");
  expect_error("model_type", "gpt2_unknown", "gpt2_unknown");
  expect_error("model_type", 3, "3");
}

TEST(Config, ValidateModelChecksConsistency) {
  const ModelSpec good = load_model("deepseek-v3");
  EXPECT_NO_THROW(validate_model(good));
  ModelSpec m = good;
  m.moe.top_k = 257;  // more than the 256 routed experts
  try {
    validate_model(m);
    ADD_FAILURE() << "top_k above the expert count accepted";
  } catch (const InputError& e) {
    EXPECT_NE(e.field().find("num_experts_per_tok"), std::string::npos) << e.what();
    EXPECT_EQ(e.value(), "257");
  }
  m = good;
  m.layer_kinds.pop_back();
  EXPECT_THROW(validate_model(m), InputError);
  m = good;
  m.hidden = 0;
  EXPECT_THROW(validate_model(m), InputError);
}

// ---------------------------------------------------------------------------------------------
// inventory.hpp, DeepSeek-V3 (h 7168, n_h 128, d_h 128, d_hr 64, d_cq 1536, d_c 512, N 256,
// h_E 2048, h_F 18432, v 129280).

class V3Inventory : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelSpec m = load_model("deepseek-v3");
    set_mtp_layers(m, 0);
    inv = build_inventory(m);
  }
  Inventory inv;
};

TEST_F(V3Inventory, KvBProjIsSplitIntoKeyAndValueParts) {
  // kv_b_proj = [W_UK; W_UV] is (128 * (128 + 128)) x 512 = 32768 x 512.
  const Tensor* k = find_tensor(inv, "layers.7.self_attn.kv_b_proj.weight", "k_nope");
  const Tensor* v = find_tensor(inv, "layers.7.self_attn.kv_b_proj.weight", "v");
  ASSERT_NE(k, nullptr);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(k->role, Role::k_up);
  EXPECT_EQ(v->role, Role::v_up);
  EXPECT_EQ(k->rows + v->rows, 32768);
  EXPECT_EQ(k->rows, 16384);
  EXPECT_EQ(k->cols, 512);
  EXPECT_EQ(v->cols, 512);
  EXPECT_EQ(k->layer, 7);
  EXPECT_EQ(k->module, Module::attention);
  EXPECT_EQ(find_tensor(inv, "layers.7.self_attn.kv_b_proj.weight"), nullptr);  // no unsplit entry
}

TEST_F(V3Inventory, FusedQueryAndKvDownProjections) {
  // q_b_proj = [W_UQ; W_QR]: (128*128 + 128*64) x 1536; kv_a_proj_with_mqa = [W_DKV; W_KR]: (512 + 64) x 7168.
  const Tensor* uq = find_tensor(inv, "layers.7.self_attn.q_b_proj.weight", "q_nope");
  const Tensor* qr = find_tensor(inv, "layers.7.self_attn.q_b_proj.weight", "q_rope");
  const Tensor* dkv = find_tensor(inv, "layers.7.self_attn.kv_a_proj_with_mqa.weight", "kv_latent");
  const Tensor* kr = find_tensor(inv, "layers.7.self_attn.kv_a_proj_with_mqa.weight", "k_rope");
  const Tensor* dq = find_tensor(inv, "layers.7.self_attn.q_a_proj.weight");
  ASSERT_TRUE(uq && qr && dkv && kr && dq);
  EXPECT_EQ(uq->rows, 16384);
  EXPECT_EQ(qr->rows, 8192);
  EXPECT_EQ(uq->cols, 1536);
  EXPECT_EQ(dkv->rows, 512);
  EXPECT_EQ(kr->rows, 64);
  EXPECT_EQ(kr->cols, 7168);
  EXPECT_EQ(dq->rows, 1536);
  EXPECT_EQ(dq->cols, 7168);
}

TEST_F(V3Inventory, RoutedExpertsAreOneEntryWith256Copies) {
  const Tensor* down = find_tensor(inv, "layers.7.mlp.experts.*.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->rows, 7168);
  EXPECT_EQ(down->cols, 2048);
  EXPECT_EQ(down->copies, 256);
  EXPECT_TRUE(down->is_routed_expert);
  EXPECT_EQ(down->role, Role::expert_down);
  EXPECT_EQ(down->module, Module::routed_experts);
  EXPECT_EQ(down->params().value(), 256u * 7168u * 2048u);
  const Tensor* gate = find_tensor(inv, "layers.7.mlp.experts.*.gate_proj.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->rows, 2048);
  EXPECT_EQ(gate->cols, 7168);
  // The shared expert is not routed: one 2048 x 7168 gate.
  const Tensor* shared = find_tensor(inv, "layers.7.mlp.shared_experts.gate_proj.weight");
  ASSERT_NE(shared, nullptr);
  EXPECT_FALSE(shared->is_routed_expert);
  EXPECT_EQ(shared->copies, 1);
  EXPECT_EQ(shared->rows, 2048);
}

TEST_F(V3Inventory, DenseLayersHaveAnMlpAndNoRouter) {
  const Tensor* gate = find_tensor(inv, "layers.2.mlp.gate_proj.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->rows, 18432);
  EXPECT_EQ(gate->cols, 7168);
  EXPECT_EQ(gate->module, Module::dense_mlp);
  EXPECT_EQ(find_tensor(inv, "layers.2.mlp.gate.weight"), nullptr);
  const Tensor* router = find_tensor(inv, "layers.3.mlp.gate.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->rows, 256);
  EXPECT_EQ(router->cols, 7168);
  const Tensor* bias = find_tensor(inv, "layers.3.mlp.gate.e_score_correction_bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->params().value(), 256u);
  EXPECT_TRUE(bias->is_vector());
}

TEST_F(V3Inventory, EmbeddingHeadAndOrder) {
  ASSERT_FALSE(inv.tensors.empty());
  EXPECT_EQ(inv.tensors.front().name, "embed_tokens.weight");
  EXPECT_EQ(inv.tensors.front().rows, 129280);
  EXPECT_EQ(inv.tensors.front().cols, 7168);
  EXPECT_EQ(inv.tensors.front().placement, Placement::embedding);
  const Tensor* head = find_tensor(inv, "lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->placement, Placement::head);
  EXPECT_EQ(head->params().value(), 926'679'040u);
  const Tensor* norm = find_tensor(inv, "norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->params().value(), 7168u);
  // Checkpoint order: decoder layers never go backwards.
  std::int64_t last = -1;
  for (const auto& t : inv.tensors) {
    if (t.placement != Placement::decoder) continue;
    EXPECT_GE(t.layer, last) << t.name;
    last = t.layer;
  }
  EXPECT_EQ(last, 60);
}

TEST_F(V3Inventory, NameAndPartAreUnique) {
  for (std::size_t i = 0; i < inv.tensors.size(); ++i) {
    for (std::size_t j = i + 1; j < inv.tensors.size(); ++j) {
      const bool same = inv.tensors[i].name == inv.tensors[j].name && inv.tensors[i].part == inv.tensors[j].part;
      EXPECT_FALSE(same) << inv.tensors[i].name << " [" << inv.tensors[i].part << "]";
    }
  }
}

TEST_F(V3Inventory, PerLayerSumsMatchTheReference) {
  // paper-method.md §2: MLA 187,105,280 per layer, norms 2h + d_cq + d_c = 16,384, MoE block
  // (router and 257 experts) 11,320,164,352, dense FFN 396,361,728.
  std::uint64_t attention = 0, norms = 0, moe = 0, dense = 0;
  for (const auto& t : inv.tensors) {
    if (t.role == Role::router_bias) continue;
    if (t.layer == 7) {
      if (t.module == Module::attention) attention += t.params().value();
      if (t.module == Module::norms) norms += t.params().value();
      if (t.module == Module::router || t.module == Module::routed_experts || t.module == Module::shared_experts) {
        moe += t.params().value();
      }
    }
    if (t.layer == 0 && t.module == Module::dense_mlp) dense += t.params().value();
  }
  EXPECT_EQ(attention, 187'105'280u);
  EXPECT_EQ(norms, 16'384u);
  EXPECT_EQ(moe, 11'320'164'352u);
  EXPECT_EQ(dense, 396'361'728u);
  EXPECT_EQ(inv.total().value(), 671'026'419'200u);
}

// ---------------------------------------------------------------------------------------------
// parallel.hpp

TEST(Parallel, PaperLayoutResolves) {
  ModelSpec m = load_model("deepseek-v3");
  set_mtp_layers(m, 0);
  ParallelConfig p;
  p.tp = 2;
  p.pp = 16;
  p.dp = 32;
  p.ep = 8;
  p.sp = true;
  const Layout l = resolve_layout(m, p);
  EXPECT_EQ(l.world_size, 1024);  // 2 * 16 * 32
  EXPECT_EQ(l.edp, 8);            // 32 * 2 / 8 (paper-method.md §4)
  ASSERT_EQ(l.stages.size(), 16u);
  EXPECT_EQ(l.stages[1].first_layer, 4);
  EXPECT_EQ(l.stages[1].last_layer(), 7);
  EXPECT_EQ(l.stages[15].first_layer, 60);
  EXPECT_EQ(l.stages[15].num_layers, 1);
}

TEST(Parallel, ErrorsNameTheFlag) {
  const ModelSpec m = load_model("deepseek-v3");
  const auto field_of = [&](const ParallelConfig& p) -> std::string {
    try {
      (void)resolve_layout(m, p);
    } catch (const InputError& e) {
      return e.field();
    }
    return "(accepted)";
  };
  ParallelConfig p;
  p.tp = 0;
  EXPECT_EQ(field_of(p), "--tp");
  p = {};
  p.etp = -4;
  EXPECT_EQ(field_of(p), "--etp");
  p = {};
  p.ep = 3;
  EXPECT_EQ(field_of(p), "--ep");
  p = {};
  p.pp = 2;
  p.layers_per_stage = {61, 1};
  EXPECT_EQ(field_of(p), "--layers-per-stage");
  p = {};
  p.pp = 2;
  p.layers_per_stage = {0, 61};  // an empty first stage is a valid, if odd, choice
  EXPECT_EQ(field_of(p), "(accepted)");
}

}  // namespace
