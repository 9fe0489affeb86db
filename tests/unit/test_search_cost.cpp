// The search's cost model takes its GEMM FLOPs from the tensor inventory (issue 11): each layer
// kind's parts are checked here against hand counts from the published shapes, the recompute
// fraction against the same hand counts, and a GeLU MLP counts its two matrices.
#include <gtest/gtest.h>

#include "moemem/config.hpp"
#include "moemem/search.hpp"

namespace {

using namespace moemem;

struct Compiled {
  ModelSpec model;
  Inventory inventory;
  CompiledModel cm;
  explicit Compiled(ModelSpec m)
      : model(std::move(m)), inventory(build_inventory(model)), cm(compile_model(model, inventory, megatron_profile())) {}
  explicit Compiled(const std::string& name) : Compiled(load_model(name)) {}
};

// Parameters one token passes through, by part (the expected LayerGemms), written out by hand.
struct Hand {
  std::uint64_t attention = 0, mla_up = 0, mlp = 0, moe = 0, shared = 0;
};

void expect_gemms(const LayerGemms& g, const Hand& h, const char* what) {
  EXPECT_EQ(g.attention.value(), h.attention) << what;
  EXPECT_EQ(g.mla_up.value(), h.mla_up) << what;
  EXPECT_EQ(g.mlp.value(), h.mlp) << what;
  EXPECT_EQ(g.moe.value(), h.moe) << what;
  EXPECT_EQ(g.shared.value(), h.shared) << what;
}

// DeepSeek-V3 (config.json): hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk
// nope/rope 128/64, v 128; dense FFN 18432 (first 3 layers); 256 routed experts of 2048, top 8,
// one shared expert of 2048.
constexpr std::uint64_t kV3H = 7168, kV3Heads = 128, kV3Dq = 1536, kV3Dc = 512, kV3Nope = 128, kV3Rope = 64, kV3V = 128;

Hand v3_attention() {
  Hand a;
  const std::uint64_t up = kV3Heads * (kV3Nope + kV3Rope) * kV3Dq + kV3Heads * (kV3Nope + kV3V) * kV3Dc;
  a.mla_up = up;
  a.attention = kV3Dq * kV3H + (kV3Dc + kV3Rope) * kV3H + up + kV3H * kV3Heads * kV3V;
  return a;
}

TEST(SearchCost, DeepSeekV3LayerGemmsMatchTheHandCount) {
  const Compiled c("deepseek-v3");
  const LayerKindGemms g = layer_gemms(c.cm);
  Hand dense = v3_attention(), moe = v3_attention();
  dense.mlp = 3 * kV3H * 18432;
  moe.shared = 3 * kV3H * 2048;
  moe.moe = 256 * kV3H + 8 * 3 * kV3H * 2048 + moe.shared;
  expect_gemms(g[static_cast<std::size_t>(LayerKind::dense)], dense, "dense");
  expect_gemms(g[static_cast<std::size_t>(LayerKind::moe)], moe, "moe");
}

// DeepSeek-V2-Lite has no query latent: its q_proj (split into q_up/q_rope rows in the inventory)
// reads the hidden state and is not an up-projection.
TEST(SearchCost, MlaWithoutQueryLatent) {
  const Compiled c("deepseek-v2-lite");
  const std::uint64_t h = 2048, heads = 16, dc = 512, nope = 128, rope = 64, v = 128;
  Hand moe;
  moe.mla_up = heads * (nope + v) * dc;
  moe.attention = h * heads * (nope + rope) + (dc + rope) * h + moe.mla_up + h * heads * v;
  moe.shared = 3 * h * (2 * 1408);
  moe.moe = 64 * h + 6 * 3 * h * 1408 + moe.shared;
  expect_gemms(layer_gemms(c.cm)[static_cast<std::size_t>(LayerKind::moe)], moe, "moe");
}

// Llama 3.1 8B: hidden 4096, 32 query heads and 8 KV heads of 128, SwiGLU FFN 14336.
TEST(SearchCost, Llama31_8bLayerGemmsMatchTheHandCount) {
  const Compiled c("llama-3.1-8b");
  const std::uint64_t h = 4096, kv = 8 * 128;
  Hand dense;
  dense.attention = h * h + 2 * kv * h + h * h;
  dense.mlp = 3 * h * 14336;
  const LayerKindGemms g = layer_gemms(c.cm);
  expect_gemms(g[static_cast<std::size_t>(LayerKind::dense)], dense, "dense");
  expect_gemms(g[static_cast<std::size_t>(LayerKind::moe)], Hand{}, "moe (none)");
}

// Mixtral 8x7B: GQA, 8 experts of 14336, top 2, no shared expert.
TEST(SearchCost, MixtralRoutedExpertsCountTopK) {
  const Compiled c("mixtral-8x7b");
  const std::uint64_t h = 4096, kv = 8 * 128;
  Hand moe;
  moe.attention = h * h + 2 * kv * h + h * h;
  moe.moe = 8 * h + 2 * 3 * h * 14336;
  expect_gemms(layer_gemms(c.cm)[static_cast<std::size_t>(LayerKind::moe)], moe, "moe");
}

// Qwen2-MoE's shared expert has a 1 x h sigmoid gate: a GEMM of the shared part too.
TEST(SearchCost, SharedExpertGateIsAGemm) {
  const Compiled c("qwen2-57b-a14b");
  const std::uint64_t h = 3584;
  const LayerGemms g = layer_gemms(c.cm)[static_cast<std::size_t>(LayerKind::moe)];
  EXPECT_EQ(g.shared.value(), 3 * h * 20480 + h);
  EXPECT_EQ(g.moe.value(), 64 * h + 8 * 3 * h * 2560 + g.shared.value());
  EXPECT_EQ(g.attention.value(), h * h + 2 * (4 * 128) * h + h * h);  // the q/k/v biases are vectors
}

// A GPT-style MLP (fc1, GeLU, fc2) has two matrices, not SwiGLU's three.
TEST(SearchCost, GeluMlpCountsTwoMatrices) {
  ModelSpec m = load_model("llama-3.1-8b");
  m.gated_mlp = false;
  m.mlp_bias = true;  // vectors: not GEMMs
  const Compiled gelu(m);
  const Compiled swiglu("llama-3.1-8b");
  const auto dense = static_cast<std::size_t>(LayerKind::dense);
  EXPECT_EQ(layer_gemms(gelu.cm)[dense].mlp.value(), 2ull * 4096 * 14336);
  EXPECT_EQ(layer_gemms(swiglu.cm)[dense].mlp.value(), 3ull * 4096 * 14336);
  EXPECT_EQ(layer_gemms(gelu.cm)[dense].attention, layer_gemms(swiglu.cm)[dense].attention);
  // Fewer MLP FLOPs: recomputing the MLP is a smaller share of the step.
  ParallelConfig p;
  TrainingConfig t;
  t.global_batch = 8;
  t.recompute = Recompute::selective;
  t.recompute_modules = kRecomputeMlp;
  EXPECT_LT(estimate_cost(gelu.cm, p, t, 8).recompute, estimate_cost(swiglu.cm, p, t, 8).recompute);
}

// The recompute fraction from the hand counts: FLOPs = 2 x parameters, plus 2 s heads (d_qk + d_v)
// of causal attention; recomputed forward FLOPs over 3 x the forward FLOPs. All the sums are
// exact integers in doubles, so the model must give exactly these values.
double hand_fraction(const Hand& dense, const Hand& moe, double dense_layers, double moe_layers, double core_attn,
                     std::uint16_t modules) {
  const auto total = [&](const Hand& k) {
    return 2 * static_cast<double>(k.attention + k.mlp + k.moe) + core_attn;
  };
  const auto again = [&](const Hand& k) {
    double a = 0;
    if (modules & kRecomputeCoreAttn) a += core_attn;
    if (modules & kRecomputeMlaUpProj) a += 2 * static_cast<double>(k.mla_up);
    if (modules & kRecomputeMlp) a += 2 * static_cast<double>(k.mlp);
    if (modules & kRecomputeMoe) a += 2 * static_cast<double>(k.moe);
    else if (modules & kRecomputeSharedExperts) a += 2 * static_cast<double>(k.shared);
    return a;
  };
  const double all = dense_layers * total(dense) + moe_layers * total(moe);
  return (dense_layers * again(dense) + moe_layers * again(moe)) / (3 * all);
}

TEST(SearchCost, RecomputeFractionsEqualTheHandCount) {
  const Compiled v3("deepseek-v3");
  Hand dense = v3_attention(), moe = v3_attention();
  dense.mlp = 3 * kV3H * 18432;
  moe.shared = 3 * kV3H * 2048;
  moe.moe = 256 * kV3H + 8 * 3 * kV3H * 2048 + moe.shared;
  TrainingConfig t;
  t.global_batch = 1024;
  t.seq_len = 4096;
  const double core = 2.0 * 4096 * 128 * (192 + 128);
  ParallelConfig p;
  p.tp = 2;
  p.pp = 8;
  p.dp = 16;
  p.ep = 32;
  for (const std::uint16_t modules :
       {std::uint16_t{kRecomputeCoreAttn}, std::uint16_t{kRecomputeMlaUpProj | kRecomputeLayernorm},
        std::uint16_t{kRecomputeMoe}, std::uint16_t{kRecomputeSharedExperts | kRecomputeMlp}}) {
    t.recompute = Recompute::selective;
    t.recompute_modules = modules;
    EXPECT_EQ(estimate_cost(v3.cm, p, t, 8).recompute, hand_fraction(dense, moe, 3, 58, core, modules)) << modules;
  }
  t.recompute = Recompute::full;
  EXPECT_DOUBLE_EQ(estimate_cost(v3.cm, p, t, 8).recompute, 1.0 / 3);

  const Compiled llama("llama-3.1-8b");
  Hand ld;
  ld.attention = 2 * 4096ull * 4096 + 2 * 1024ull * 4096;
  ld.mlp = 3 * 4096ull * 14336;
  t.seq_len = 8192;
  t.recompute = Recompute::selective;
  t.recompute_modules = kRecomputeCoreAttn;
  EXPECT_EQ(estimate_cost(llama.cm, ParallelConfig{}, t, 8).recompute,
            hand_fraction(ld, Hand{}, 32, 0, 2.0 * 8192 * 32 * 256, kRecomputeCoreAttn));
}

}  // namespace
