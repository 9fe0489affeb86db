// Saved-tensor accounting and `explain` (issue 4), at the library level:
//   - the megatron profile's per-layer terms for DeepSeek-V3 and a GQA model, sized by hand;
//   - which recompute module frees which term (the dropped_by masks), and is_kept/kept_bytes;
//   - FP8 scale tensors per recipe; the recompute-module parser;
//   - explain_stage: items add up, category by category, to analyze(); activation items are a
//     term's bytes x layers x micro-batches in flight, under none, full uniform and full block.
// Expected values come from the model configs (data/models/*.json) and the rules of the issue
// and Megatron-Core, never from moemem's own output.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "moemem/activation.hpp"
#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/explain.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"
#include "moemem/analyze.hpp"

namespace {

using namespace moemem;

using Names = std::set<std::string>;

// DeepSeek-V3 (MTP depth 1 from its config, as the megatron profile keeps it) with the base
// layout TP2 PP16 DP32 EP8 and sequence parallelism.
struct World {
  ModelSpec model;
  Inventory inventory;
  Layout layout;
};

World world(const std::string& preset, ParallelConfig p) {
  World s{load_model(preset), {}, {}};
  s.inventory = build_inventory(s.model);
  s.layout = resolve_layout(s.model, p);
  return s;
}

ParallelConfig base_parallel() {
  ParallelConfig p;
  p.tp = 2;
  p.pp = 16;
  p.dp = 32;
  p.ep = 8;
  p.sp = true;
  return p;
}

TrainingConfig base_training(const Profile& profile = megatron_profile()) {
  TrainingConfig t;
  t.micro_batch = 1;
  t.seq_len = 4096;
  t.zero = 1;
  t.global_batch = 1024;
  t.precision = profile.default_precision;
  return t;
}

std::map<std::string, Bytes> by_category(const std::vector<ExplainItem>& items) {
  std::map<std::string, Bytes> out;
  for (const auto& i : items) out[i.category] += i.bytes;
  return out;
}

bool unsaved_item(const ExplainItem& i) { return i.item.ends_with("(transient)"); }

// Activation items by name (summed over chunks), the layer transient (recomputation transient and
// the tensors one layer's forward holds unsaved) apart.
std::map<std::string, std::uint64_t> saved(const std::vector<ExplainItem>& items) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& i : items) {
    if (i.category == "activations" && i.item != "recomputation transient" && !unsaved_item(i)) out[i.item] += i.bytes.value();
  }
  return out;
}

// The unsaved tensors of the layer transient.
std::uint64_t unsaved(const std::vector<ExplainItem>& items) {
  std::uint64_t b = 0;
  for (const auto& i : items) {
    if (unsaved_item(i)) b += i.bytes.value();
  }
  return b;
}

std::uint64_t transient(const std::vector<ExplainItem>& items) {
  for (const auto& i : items) {
    if (i.item == "recomputation transient") return i.bytes.value();
  }
  return 0;
}

const ActivationTerm* find(const std::vector<ActivationTerm>& terms, std::string_view name) {
  for (const auto& t : terms) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Names dropped_by(const std::vector<ActivationTerm>& terms, std::uint16_t bit) {
  Names out;
  for (const auto& t : terms) {
    if ((t.dropped_by & bit) != 0) out.emplace(t.name);
  }
  return out;
}

constexpr std::uint64_t kHidden = 7168;
constexpr std::uint64_t kTokens = 4096;         // b * s / cp on one rank
constexpr std::uint64_t kTokensSp = 4096 / 2;   // ... over tp 2 with sequence parallelism
constexpr std::uint64_t kHeads = 128 / 2;       // attention heads per TP rank
constexpr std::uint64_t kRouted = kTokensSp * 8;  // R = tokens_sp x top_k x etp 1

// ---------------------------------------------------------------------------------------------
// The megatron profile's terms, sized by hand.

TEST(ActivationTerms, DeepSeekV3MoeLayerSizesAndDtypes) {
  const World s = world("deepseek-v3", base_parallel());
  const auto terms = layer_activation_terms(megatron_profile(), s.model, s.layout, base_training(), LayerKind::moe);
  struct Want {
    const char* name;
    std::uint64_t elements;
    DType dtype;
  };
  const Want want[] = {
      {"attn.input (layer input)", kTokensSp * kHidden, DType::bf16},
      {"attn.norm_output (q/kv input)", kTokensSp * kHidden, DType::bf16},
      {"attn.q_compressed", kTokensSp * 1536, DType::bf16},
      {"attn.q_compressed_norm (q_up input)", kTokensSp * 1536, DType::bf16},
      {"attn.kv_compressed", kTokensSp * 512, DType::bf16},
      {"attn.kv_compressed_norm (kv_up input)", kTokensSp * 512, DType::bf16},
      {"attn.q", kTokens * kHeads * (128 + 64), DType::bf16},
      {"attn.k", kTokens * kHeads * (128 + 64), DType::bf16},
      {"attn.v", kTokens * kHeads * 128, DType::bf16},
      {"attn.softmax_lse", kHeads * kTokens, DType::fp32},
      {"attn.context", kTokens * kHeads * 128, DType::bf16},
      {"mlp.input", kTokensSp * kHidden, DType::bf16},
      {"mlp.norm_output (router input)", kTokensSp * kHidden, DType::bf16},
      {"router.scores", kTokensSp * 256, DType::fp32},
      {"router.routing_map", kTokensSp * 256, DType::int8},
      {"experts.fc1_input (dispatched tokens)", kRouted * kHidden, DType::bf16},
      {"experts.fc1_output (SwiGLU input)", kRouted * 2 * 2048, DType::bf16},
      {"experts.act_output (fc2 input)", kRouted * 2048, DType::bf16},
      {"experts.probs", kRouted, DType::fp32},
      // One shared expert of 2048, split over tp 2, on the gathered tokens.
      {"shared.fc1_output", kTokens * 2 * 2048 / 2, DType::bf16},
      {"shared.act_output (fc2 input)", kTokens * 2048 / 2, DType::bf16},
      // The dispatch transient, 256 / ep 8 = 32 experts per rank: permuted S, all-to-all output
      // R, unsorted R and fc2's output R, S = tokens_sp x top_k = R.
      {"moe.permuted_tokens (transient)", kRouted * kHidden, DType::bf16},
      {"moe.a2a_output (transient)", kRouted * kHidden, DType::bf16},
      {"moe.unsorted_output (transient)", kRouted * kHidden, DType::bf16},
      {"experts.fc2_output (transient)", kRouted * kHidden, DType::bf16},
  };
  EXPECT_EQ(terms.size(), std::size(want));
  for (const auto& w : want) {
    SCOPED_TRACE(w.name);
    const auto* t = find(terms, w.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->elements.value(), w.elements);
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_FALSE(t->rule.empty());
  }
  // Full recomputation keeps the layer input only.
  for (const auto& t : terms) EXPECT_EQ(t.kept_under_full, t.name == "attn.input (layer input)") << t.name;
}

TEST(ActivationTerms, EagerKeepsTheSoftmaxOutputInsteadOfLogSumExp) {
  // Megatron's unfused DotProductAttention.forward: the baddbmm scores are not saved (its backward
  // needs q and k; FusedScaleMaskSoftmax saves only its output, which the bmm with V saves too).
  const World s = world("deepseek-v3", base_parallel());
  TrainingConfig t = base_training();
  t.attention = AttentionKernel::eager;
  const auto terms = layer_activation_terms(megatron_profile(), s.model, s.layout, t, LayerKind::moe);
  EXPECT_EQ(find(terms, "attn.softmax_lse"), nullptr);
  EXPECT_EQ(find(terms, "attn.scores"), nullptr);
  const auto* term = find(terms, "attn.softmax");
  ASSERT_NE(term, nullptr);
  EXPECT_EQ(term->elements.value(), 1 * kHeads * 4096 * 4096);  // b x heads/tp x s/cp x s
  EXPECT_EQ(term->dtype, DType::bf16);
}

// Llama-3.1-70B on tp 8 (sequence-parallel), pp 4, dp 4.
World llama70b_tp8() {
  ParallelConfig p;
  p.tp = 8;
  p.pp = 4;
  p.dp = 4;
  p.sp = true;
  return world("llama-3.1-70b", p);
}

TEST(ActivationTerms, EagerGqaKeepsKAndVRepeatedToEveryQueryHead) {
  // Llama-3.1-70B at tp 8: 64/8 = 8 query heads, 8/8 = 1 KV head per rank, head_dim 128. The
  // unfused kernel repeat_interleaves K and V to the 8 query heads before baddbmm/bmm save them:
  // T x 8 x 128 each instead of flash's T x 1 x 128.
  const World s = llama70b_tp8();
  TrainingConfig t = base_training();
  t.attention = AttentionKernel::eager;
  const auto terms = layer_activation_terms(megatron_profile(), s.model, s.layout, t, LayerKind::dense);
  const std::uint64_t tokens = 4096;
  EXPECT_EQ(find(terms, "attn.k")->elements.value(), tokens * 8 * 128);
  EXPECT_EQ(find(terms, "attn.v")->elements.value(), tokens * 8 * 128);
  EXPECT_EQ(find(terms, "attn.softmax")->elements.value(), 1 * 8 * tokens * tokens);  // b x heads/tp x s x s
}

TEST(ActivationTerms, GqaUsesKvHeadsAndHasNoMlaTerms) {
  // Llama-3.1-70B: 64 heads, 8 KV heads, head_dim 128, ffn 28672; tp 8: 8 and 1 per rank.
  const World s = llama70b_tp8();
  const auto terms = layer_activation_terms(megatron_profile(), s.model, s.layout, base_training(), LayerKind::dense);
  const std::uint64_t tokens = 4096;
  ASSERT_NE(find(terms, "attn.q"), nullptr);
  EXPECT_EQ(find(terms, "attn.q")->elements.value(), tokens * 8 * 128);
  EXPECT_EQ(find(terms, "attn.k")->elements.value(), tokens * 1 * 128);
  EXPECT_EQ(find(terms, "attn.v")->elements.value(), tokens * 1 * 128);
  EXPECT_EQ(find(terms, "attn.q_compressed"), nullptr);
  EXPECT_EQ(find(terms, "attn.kv_compressed_norm (kv_up input)"), nullptr);
  EXPECT_EQ(find(terms, "mlp.fc1_output")->elements.value(), tokens * 2 * 28672 / 8);
  EXPECT_EQ(find(terms, "mlp.act_output (fc2 input)")->elements.value(), tokens * 28672 / 8);
  EXPECT_EQ(find(terms, "attn.input (layer input)")->elements.value(), tokens / 8 * 8192);
  // No MLA: mla_up_proj frees nothing.
  EXPECT_TRUE(dropped_by(terms, kRecomputeMlaUpProj).empty());
}

// ---------------------------------------------------------------------------------------------
// Recompute modules.

TEST(RecomputeTerms, EachModuleFreesTheTermsItNames) {
  const World s = world("deepseek-v3", base_parallel());
  const auto moe = layer_activation_terms(megatron_profile(), s.model, s.layout, base_training(), LayerKind::moe);
  const auto dense = layer_activation_terms(megatron_profile(), s.model, s.layout, base_training(), LayerKind::dense);
  EXPECT_EQ(dropped_by(moe, kRecomputeLayernorm), (Names{"attn.norm_output (q/kv input)", "mlp.norm_output (router input)"}));
  // The dense MLP's norm is fused into fc1: layernorm skips it, the mlp checkpoint frees it.
  EXPECT_EQ(dropped_by(dense, kRecomputeLayernorm), (Names{"attn.norm_output (q/kv input)"}));
  EXPECT_EQ(dropped_by(moe, kRecomputeMlaUpProj), (Names{"attn.q_compressed_norm (q_up input)",
                                                         "attn.kv_compressed_norm (kv_up input)", "attn.q", "attn.k"}));
  EXPECT_EQ(dropped_by(moe, kRecomputeMoeAct), (Names{"experts.act_output (fc2 input)"}));
  EXPECT_EQ(dropped_by(moe, kRecomputeCoreAttn), (Names{"attn.softmax_lse"}));
  EXPECT_EQ(dropped_by(moe, kRecomputeSharedExperts), (Names{"shared.fc1_output", "shared.act_output (fc2 input)"}));
  EXPECT_EQ(dropped_by(moe, kRecomputeMlp), Names{});
  EXPECT_EQ(dropped_by(dense, kRecomputeMlp), (Names{"mlp.fc1_output", "mlp.act_output (fc2 input)", "mlp.norm_output (fc1 input)"}));
  Names moe_block;
  for (const auto& t : moe) {
    const std::string_view n = t.name;
    if (n.starts_with("router.") || n.starts_with("experts.") || n.starts_with("shared.") || n.starts_with("moe.")) {
      moe_block.emplace(n);
    }
  }
  EXPECT_EQ(dropped_by(moe, kRecomputeMoe), moe_block);
  // Router 2, routed experts 4, shared experts 2, and the 4 dispatch copies its rerun re-creates.
  EXPECT_EQ(moe_block.size(), 12u);
  // Nothing on a dense layer belongs to the MoE block.
  EXPECT_TRUE(dropped_by(dense, kRecomputeMoe | kRecomputeMoeAct | kRecomputeSharedExperts).empty());
  // The inputs every mode keeps (checkpoint inputs) are freed by no module.
  for (const char* n : {"attn.input (layer input)", "mlp.input", "attn.q_compressed", "attn.kv_compressed", "attn.context"}) {
    ASSERT_NE(find(moe, n), nullptr) << n;
    EXPECT_EQ(find(moe, n)->dropped_by, 0) << n;
  }
}

TEST(RecomputeTerms, IsKeptAndKeptBytesFollowTheMode) {
  const World s = world("deepseek-v3", base_parallel());
  const auto terms = layer_activation_terms(megatron_profile(), s.model, s.layout, base_training(), LayerKind::moe);
  Bytes all, input, without_norms;
  for (const auto& t : terms) {
    if (t.transient) continue;  // never kept
    all += t.bytes();
    if (t.name == "attn.input (layer input)") input += t.bytes();
    if (t.name != "attn.norm_output (q/kv input)" && t.name != "mlp.norm_output (router input)") without_norms += t.bytes();
  }
  EXPECT_EQ(kept_bytes(terms, Recompute::none), all);
  EXPECT_EQ(kept_bytes(terms, Recompute::full), input);
  EXPECT_EQ(input, bytes_of(Count(kTokensSp * kHidden), DType::bf16));
  EXPECT_EQ(kept_bytes(terms, Recompute::selective, kRecomputeLayernorm), without_norms);
  // Selective with no module keeps everything.
  EXPECT_EQ(kept_bytes(terms, Recompute::selective, 0), all);
  const auto* act = find(terms, "experts.act_output (fc2 input)");
  ASSERT_NE(act, nullptr);
  EXPECT_TRUE(is_kept(*act, Recompute::none, kRecomputeMoeAct));
  EXPECT_FALSE(is_kept(*act, Recompute::selective, kRecomputeMoeAct));
  EXPECT_FALSE(is_kept(*act, Recompute::selective, kRecomputeMoe));
  EXPECT_TRUE(is_kept(*act, Recompute::selective, kRecomputeLayernorm | kRecomputeCoreAttn));
  EXPECT_FALSE(is_kept(*act, Recompute::full, 0));
}

TEST(RecomputeModules, ParseAndText) {
  EXPECT_EQ(parse_recompute_modules("layernorm,mla_up_proj,moe_act", "--recompute-modules"),
            kRecomputeLayernorm | kRecomputeMlaUpProj | kRecomputeMoeAct);
  EXPECT_EQ(parse_recompute_modules("core_attn", "--recompute-modules"), kRecomputeCoreAttn);
  EXPECT_EQ(parse_recompute_modules("moe shared_experts", "--recompute-modules"), kRecomputeMoe | kRecomputeSharedExperts);
  const std::uint16_t all = parse_recompute_modules("core_attn,mla_up_proj,layernorm,moe_act,mlp,moe,shared_experts", "x");
  EXPECT_EQ(all, 0x7f);
  EXPECT_EQ(parse_recompute_modules(recompute_modules_text(all), "x"), all);
  try {
    (void)parse_recompute_modules("layernorm,attention", "--recompute-modules");
    FAIL() << "accepted an unknown module";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "--recompute-modules");
    EXPECT_EQ(e.value(), "attention");
  }
  EXPECT_THROW((void)parse_recompute_modules("", "--recompute-modules"), InputError);
  EXPECT_THROW((void)parse_recompute_modules(",", "--recompute-modules"), InputError);
}

// ---------------------------------------------------------------------------------------------
// FP8.

TEST(Fp8Scales, ElementsAndDtypesPerRecipe) {
  EXPECT_EQ(fp8_scale_elements(Count(1000), Fp8Recipe::none).value(), 0u);
  EXPECT_EQ(fp8_scale_elements(Count(1000), Fp8Recipe::tensorwise).value(), 1u);
  EXPECT_EQ(fp8_scale_elements(Count(1000), Fp8Recipe::delayed).value(), 1u);
  // 1x128 tiles: ceil(1000 / 128) = 8; 1x32 blocks: ceil(1000 / 32) = 32.
  EXPECT_EQ(fp8_scale_elements(Count(1000), Fp8Recipe::blockwise).value(), 8u);
  EXPECT_EQ(fp8_scale_elements(Count(1024), Fp8Recipe::blockwise).value(), 8u);
  EXPECT_EQ(fp8_scale_elements(Count(1025), Fp8Recipe::blockwise).value(), 9u);
  EXPECT_EQ(fp8_scale_elements(Count(1000), Fp8Recipe::mxfp8).value(), 32u);
  EXPECT_EQ(fp8_scale_elements(Count(1024), Fp8Recipe::mxfp8).value(), 32u);
  EXPECT_EQ(bits_of(fp8_scale_dtype(Fp8Recipe::blockwise)), 32u);
  EXPECT_EQ(bits_of(fp8_scale_dtype(Fp8Recipe::tensorwise)), 32u);
  EXPECT_EQ(bits_of(fp8_scale_dtype(Fp8Recipe::mxfp8)), 8u);  // e8m0
  for (const auto f : {Fp8Recipe::none, Fp8Recipe::tensorwise, Fp8Recipe::delayed, Fp8Recipe::blockwise, Fp8Recipe::mxfp8}) {
    EXPECT_EQ(parse_fp8_recipe(name_of(f)), f);
  }
  EXPECT_THROW((void)parse_fp8_recipe("e4m3"), InputError);
}

TEST(Fp8Scales, LinearInputsBecomeFp8WithScalesOtherTermsKeepTheirDtype) {
  const World s = world("deepseek-v3", base_parallel());
  TrainingConfig t = base_training();
  t.fp8 = Fp8Recipe::blockwise;
  const auto terms = layer_activation_terms(megatron_profile(), s.model, s.layout, t, LayerKind::moe);
  // The inputs of FP8 GEMMs (docs/formulas.md): norm output (q/kv down), q/kv norm outputs
  // (up-projections), dispatched tokens, fc2 inputs. o_proj saves the attention kernel's BF16
  // output itself (set_save_original_input, every recipe but delayed scaling).
  const Names fp8 = {"attn.norm_output (q/kv input)", "attn.q_compressed_norm (q_up input)",
                     "attn.kv_compressed_norm (kv_up input)", "experts.fc1_input (dispatched tokens)",
                     "experts.act_output (fc2 input)", "shared.act_output (fc2 input)"};
  Names got;
  for (const auto& term : terms) {
    if (term.dtype == DType::fp8) got.emplace(term.name);
  }
  EXPECT_EQ(got, fp8);
  for (const auto& n : fp8) {
    const std::string scales = n.substr(0, n.find(' ')) + ".scales";
    const auto* sc = find(terms, scales);
    const auto* tensor = find(terms, n);
    ASSERT_NE(sc, nullptr) << scales;
    EXPECT_EQ(sc->elements.value(), (tensor->elements.value() + 127) / 128) << scales;
    EXPECT_EQ(sc->dtype, DType::fp32);
    // A scale is freed with its tensor.
    EXPECT_EQ(sc->dropped_by, tensor->dropped_by) << scales;
  }
  // The router's input is not a GEMM input: it stays bf16, and so does the attention output the
  // kernel keeps.
  EXPECT_EQ(find(terms, "mlp.norm_output (router input)")->dtype, DType::bf16);
  EXPECT_EQ(find(terms, "attn.context")->dtype, DType::bf16);
  EXPECT_EQ(find(terms, "router.scores")->dtype, DType::fp32);
}

// Megatron's Attention.__init__ (781e765818) makes o_proj save its BF16 input under every FP8
// recipe but delayed scaling; delayed scaling, and Megatron 0.12, keep o_proj's own FP8 copy.
TEST(Fp8Scales, OprojKeepsAnFp8CopyOnlyUnderDelayedScalingOrMegatron012) {
  const World s = world("deepseek-v3", base_parallel());
  const auto o_proj_copy = [&](Fp8Recipe f, MegatronVersion v) {
    TrainingConfig t = base_training();
    t.fp8 = f;
    t.megatron_version = v;
    const auto terms = layer_activation_terms(megatron_profile(), s.model, s.layout, t, LayerKind::moe);
    EXPECT_NE(find(terms, "attn.context"), nullptr);
    return find(terms, "attn.context (o_proj input)") != nullptr;
  };
  for (const auto f : {Fp8Recipe::tensorwise, Fp8Recipe::blockwise, Fp8Recipe::mxfp8}) {
    EXPECT_FALSE(o_proj_copy(f, MegatronVersion::current)) << name_of(f);
    EXPECT_TRUE(o_proj_copy(f, MegatronVersion::v0_12)) << name_of(f);
  }
  EXPECT_TRUE(o_proj_copy(Fp8Recipe::delayed, MegatronVersion::current));
  EXPECT_FALSE(o_proj_copy(Fp8Recipe::none, MegatronVersion::current));
}

// ---------------------------------------------------------------------------------------------
// explain_stage against analyze.

TEST(ExplainLib, CategoriesAddUpToAnalyzeOnEveryStage) {
  struct Config {
    const char* name;
    Recompute recompute;
    RecomputeMethod method;
    std::int64_t n;
    int zero;
    Fp8Recipe fp8;
    std::int64_t cp;
  };
  const Config configs[] = {
      {"none", Recompute::none, RecomputeMethod::uniform, 1, 1, Fp8Recipe::none, 1},
      {"full uniform 3", Recompute::full, RecomputeMethod::uniform, 3, 2, Fp8Recipe::none, 1},
      {"full block 3", Recompute::full, RecomputeMethod::block, 3, 3, Fp8Recipe::mxfp8, 1},
      {"selective cp 2", Recompute::selective, RecomputeMethod::uniform, 1, 0, Fp8Recipe::blockwise, 2},
  };
  for (const auto& c : configs) {
    SCOPED_TRACE(c.name);
    ParallelConfig p = base_parallel();
    p.cp = c.cp;
    p.dp = 32 / c.cp;
    const World s = world("deepseek-v3", p);
    TrainingConfig t = base_training();
    t.recompute = c.recompute;
    t.recompute_modules = kRecomputeLayernorm | kRecomputeMoeAct;
    t.recompute_method = c.method;
    t.recompute_num_layers = c.n;
    t.zero = c.zero;
    t.fp8 = c.fp8;
    const MemoryReport r = analyze(s.model, s.inventory, megatron_profile(), s.layout, t);
    for (const auto& st : r.stages) {
      SCOPED_TRACE("stage " + std::to_string(st.stage));
      const auto items = explain_stage(s.model, s.inventory, megatron_profile(), s.layout, t, st.stage);
      auto cat = by_category(items);
      // Every category but buffers (0 here without DeepEP) has bytes on every stage.
      EXPECT_EQ(cat.size(), 6u + (st.bytes.buffers.value() > 0 ? 1u : 0u));
      EXPECT_EQ(cat["weights"], st.bytes.weights);
      EXPECT_EQ(cat["gradients"], st.bytes.gradients);
      EXPECT_EQ(cat["optimizer"], st.bytes.optimizer);
      EXPECT_EQ(cat["activations"], st.bytes.activations);
      EXPECT_EQ(cat["buffers"], st.bytes.buffers);
      EXPECT_EQ(cat["fragmentation"], st.bytes.fragmentation);
      EXPECT_EQ(cat["runtime"], st.bytes.runtime);
      Bytes total;
      for (const auto& i : items) total += i.bytes;
      EXPECT_EQ(total, st.bytes.total());
    }
  }
}

TEST(ExplainLib, StageOutOfRangeThrowsNamingStage) {
  const World s = world("deepseek-v3", base_parallel());
  for (const std::int64_t stage : {std::int64_t{-1}, std::int64_t{16}, std::int64_t{1000}}) {
    try {
      (void)explain_stage(s.model, s.inventory, megatron_profile(), s.layout, base_training(), stage);
      FAIL() << "stage " << stage << " accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "--stage");
      EXPECT_EQ(e.value(), std::to_string(stage));
    }
  }
}

// Stage 1 of the base layout: 4 MoE layers (4-7), 15 micro-batches in flight under 1F1B (m = 32).
constexpr std::uint64_t kLayers = 4, kInFlight = 15;

TEST(ExplainLib, ActivationItemIsTermTimesLayersTimesMicrobatches) {
  const World s = world("deepseek-v3", base_parallel());
  const TrainingConfig t = base_training();
  const auto terms = layer_activation_terms(megatron_profile(), s.model, s.layout, t, LayerKind::moe);
  const auto items = explain_stage(s.model, s.inventory, megatron_profile(), s.layout, t, 1);
  const auto a = saved(items);
  EXPECT_EQ(a.size(), terms.size() - 4);  // the 4 dispatch copies are not saved
  for (const auto& term : terms) {
    if (term.transient) continue;
    SCOPED_TRACE(std::string(term.name));
    ASSERT_TRUE(a.contains(std::string(term.name)));
    EXPECT_EQ(a.at(std::string(term.name)), term.bytes().value() * kLayers * kInFlight);
  }
  EXPECT_EQ(transient(items), 0u);
  // One layer's dispatch copies while it computes: 2 bytes x 7168 x (S + 3R), S = R = 16384.
  EXPECT_EQ(unsaved(items), 2u * kHidden * 4 * kRouted);
  // By hand: the dispatched tokens, R x h bf16.
  EXPECT_EQ(a.at("experts.fc1_input (dispatched tokens)"), kRouted * kHidden * 2 * kLayers * kInFlight);
}

TEST(ExplainLib, StageZeroMixesDenseAndMoeLayers) {
  // Layers 0-3: dense 0, 1, 2 and MoE 3; 16 micro-batches in flight; plus the token ids.
  const World s = world("deepseek-v3", base_parallel());
  const TrainingConfig t = base_training();
  const auto dense = layer_activation_terms(megatron_profile(), s.model, s.layout, t, LayerKind::dense);
  const auto moe = layer_activation_terms(megatron_profile(), s.model, s.layout, t, LayerKind::moe);
  const auto a = saved(explain_stage(s.model, s.inventory, megatron_profile(), s.layout, t, 0));
  const auto expect = [&](const char* name, std::uint64_t per_mb) {
    ASSERT_TRUE(a.contains(name)) << name;
    EXPECT_EQ(a.at(name), per_mb * 16) << name;
  };
  expect("attn.input (layer input)", find(dense, "attn.input (layer input)")->bytes().value() * 4);
  expect("mlp.fc1_output", find(dense, "mlp.fc1_output")->bytes().value() * 3);
  expect("mlp.norm_output (fc1 input)", find(dense, "mlp.norm_output (fc1 input)")->bytes().value() * 3);
  expect("experts.fc1_input (dispatched tokens)", find(moe, "experts.fc1_input (dispatched tokens)")->bytes().value() * 1);
  expect("embedding.token_ids", 4096 * 8);  // b * s/cp int64
  EXPECT_EQ(find(dense, "mlp.fc1_output")->elements.value(), 4096ull * 2 * 18432 / 2);
}

TEST(ExplainLib, FullUniformKeepsOneInputPerGroupAndTheGroupTransient) {
  const World s = world("deepseek-v3", base_parallel());
  const auto terms = layer_activation_terms(megatron_profile(), s.model, s.layout, base_training(), LayerKind::moe);
  const std::uint64_t input = kept_bytes(terms, Recompute::full).value();
  const std::uint64_t layer = kept_bytes(terms, Recompute::none).value();
  for (const std::int64_t n : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE("uniform " + std::to_string(n));
    TrainingConfig t = base_training();
    t.recompute = Recompute::full;
    t.recompute_num_layers = n;
    const auto items = explain_stage(s.model, s.inventory, megatron_profile(), s.layout, t, 1);
    const auto a = saved(items);
    // Groups of n over 4 layers: ceil(4 / n) inputs kept; the largest group, min(n, 4) layers,
    // lives while it is recomputed, less the input it was checkpointed with (CheckpointFunction
    // reruns on that very tensor, already counted as kept).
    const std::uint64_t groups = (kLayers + static_cast<std::uint64_t>(n) - 1) / static_cast<std::uint64_t>(n);
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a.at("attn.input (layer input)"), input * groups * kInFlight);
    EXPECT_EQ(transient(items), layer * std::min<std::uint64_t>(static_cast<std::uint64_t>(n), kLayers) - input);
    // The rerun forward of one of the group's layers holds its dispatch copies (S + 3R, bf16).
    EXPECT_EQ(unsaved(items), 2u * kHidden * 4 * kRouted);
  }
}

TEST(ExplainLib, FullBlockCheckpointsTheFirstNLayersOfTheChunk) {
  const World s = world("deepseek-v3", base_parallel());
  const auto terms = layer_activation_terms(megatron_profile(), s.model, s.layout, base_training(), LayerKind::moe);
  TrainingConfig t = base_training();
  t.recompute = Recompute::full;
  t.recompute_method = RecomputeMethod::block;
  t.recompute_num_layers = 3;
  const auto items = explain_stage(s.model, s.inventory, megatron_profile(), s.layout, t, 1);
  const auto a = saved(items);
  EXPECT_EQ(a.size(), terms.size() - 4);
  for (const auto& term : terms) {
    if (term.transient) continue;
    SCOPED_TRACE(std::string(term.name));
    // Layer 4 of the chunk keeps everything; layers 1-3 keep their input.
    const std::uint64_t layers = term.kept_under_full ? 4 : 1;
    EXPECT_EQ(a.at(std::string(term.name)), term.bytes().value() * layers * kInFlight);
  }
  // One checkpointed layer rerun at a time, on its kept input.
  EXPECT_EQ(transient(items), kept_bytes(terms, Recompute::none).value() - kept_bytes(terms, Recompute::full).value());
  EXPECT_EQ(unsaved(items), 2u * kHidden * 4 * kRouted);
}

TEST(ExplainLib, SelectiveTransientIsOneLayersFreedTensors) {
  const World s = world("deepseek-v3", base_parallel());
  TrainingConfig t = base_training();
  t.recompute = Recompute::selective;
  t.recompute_modules = kRecomputeLayernorm | kRecomputeMlaUpProj | kRecomputeMoeAct;
  const auto terms = layer_activation_terms(megatron_profile(), s.model, s.layout, t, LayerKind::moe);
  const auto items = explain_stage(s.model, s.inventory, megatron_profile(), s.layout, t, 1);
  std::uint64_t freed = 0;
  for (const char* n : {"attn.norm_output (q/kv input)", "mlp.norm_output (router input)", "attn.q_compressed_norm (q_up input)",
                        "attn.kv_compressed_norm (kv_up input)", "attn.q", "attn.k", "experts.act_output (fc2 input)"}) {
    ASSERT_NE(find(terms, n), nullptr) << n;
    freed += find(terms, n)->bytes().value();
  }
  // The freed tensors come back one layer at a time: norm outputs 2 x 2048 x 7168 x 2, up-projection
  // norms 2048 x (1536 + 512) x 2, q and k 2 x 4096 x 64 x 192 x 2, the expert activation 16384 x
  // 2048 x 2: 335,544,320 bytes, less than a forward's
  // dispatch copies (2 x 7168 x 4 x 16384 = 939,524,096), which the recomputed modules do not
  // re-create: the layer transient is a forward's copies.
  EXPECT_EQ(freed, 335544320u);
  EXPECT_EQ(transient(items), 0u);
  EXPECT_EQ(unsaved(items), 2u * kHidden * 4 * kRouted);
  // Recomputing the moe module brings back its block and, in its rerun forward, the copies.
  TrainingConfig moe = t;
  moe.recompute_modules = kRecomputeMoe;
  const auto moe_items = explain_stage(s.model, s.inventory, megatron_profile(), s.layout, moe, 1);
  std::uint64_t block = 0;
  for (const auto& term : terms) {
    if (!term.transient && (term.dropped_by & kRecomputeMoe) != 0) block += term.bytes().value();
  }
  EXPECT_EQ(transient(moe_items), block);
  EXPECT_EQ(unsaved(moe_items), 2u * kHidden * 4 * kRouted);
  const auto a = saved(items);
  EXPECT_FALSE(a.contains("attn.q"));
  EXPECT_TRUE(a.contains("attn.q_compressed"));
}

TEST(ExplainLib, PaperProfileHoldsOneMicrobatchWhateverTheSchedule) {
  const World s = world("deepseek-v3", base_parallel());
  const TrainingConfig t = base_training(paper_profile());
  const auto terms = layer_activation_terms(paper_profile(), s.model, s.layout, t, LayerKind::moe);
  const auto a = saved(explain_stage(s.model, s.inventory, paper_profile(), s.layout, t, 1));
  for (const auto& term : terms) {
    SCOPED_TRACE(std::string(term.name));
    ASSERT_TRUE(a.contains(std::string(term.name)));
    EXPECT_EQ(a.at(std::string(term.name)), term.bytes().value() * kLayers);
  }
}

}  // namespace
