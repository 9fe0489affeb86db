// Gated DeltaNet layers' training activations under the megatron profile (issue 14;
// src/profiles/megatron_gdn.cpp): one Qwen3-Next layer's mixer terms worked out by hand from
// Megatron-Core's GatedDeltaNet and the flash-linear-attention kernels it calls (shapes x dtype
// sizes), the gated attention layers' extra terms, analyses that complete, and the refusals.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/run_cli.hpp"
#include "moemem/activation.hpp"
#include "moemem/analyze.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"
#include "moemem/training.hpp"
#include "unit/layer_terms_helpers.hpp"
#include "unit/inventory_helpers.hpp"

namespace {

using namespace moemem;
using namespace moemem::test;

TrainingConfig training(std::int64_t seq) { return test::hand_training(seq); }

std::vector<ActivationTerm> layer(const ModelSpec& m, const TrainingConfig& t, MixerKind mixer) {
  ParallelConfig p;
  p.tp = 2;
  p.sp = true;
  p.ep = 8;
  p.dp = 8;
  return layer_activation_terms(get_profile("megatron"), m, resolve_layout(m, p), t, LayerKind::moe, mixer);
}

// Bytes of the terms whose name starts with `prefix`: saved ones kept under `t`'s recomputation,
// or the transient ones.
std::uint64_t bytes_of_prefix(const std::vector<ActivationTerm>& terms, const std::string& prefix, const TrainingConfig& t,
                              bool transient = false) {
  std::uint64_t sum = 0;
  for (const auto& term : terms) {
    if (std::string(term.name).rfind(prefix, 0) != 0 || term.transient != transient) continue;
    if (!transient && !is_kept(term, t.recompute, t.recompute_modules)) continue;
    sum += term.bytes().value();
  }
  return sum;
}

}  // namespace

// Qwen3-Next-80B-A3B: h 2048, 16 key heads and 32 value heads of 128, conv kernel 4. b 1,
// s 4096, tp 2 with sequence parallelism: 4096 tokens, 2048 per rank before in_proj, 8 key and
// 16 value heads per rank; bf16 = 2 bytes, fp32 = 4.
//   layer input, fused norm's output   2 x 2048 x 2048 x 2                   = 16,777,216
//   the norm's rsigma                  2048 x 4                              =      8,192
//   in_proj output (conv1d input)      4096 x (2x2048 + 2x4096 + 2x32)/2 x 2 = 50,593,792
//   l2norm output of q and k           4096 x 16 x 128 x 2                   = 16,777,216
//   l2norm rstd                        4096 x 16 x 4                         =    262,144
//   q, k (repeated to 16 heads), v     3 x 4096 x 16 x 128 x 2               = 50,331,648
//   g's chunk-local cumsum (fp32)      4096 x 16 x 4                         =    262,144
//   beta                               4096 x 16 x 2                         =    131,072
//   A (64 per chunk row)               4096 x 16 x 64 x 2                    =  8,388,608
//   kernel output (out_norm input)     4096 x 16 x 128 x 2                   = 16,777,216
//   out_norm rstd                      4096 x 16 x 4                         =    262,144
//   norm output, z, gated output       3 x 4096 x 16 x 128 x 2               = 50,331,648
//   sum                                                                      = 210,903,040
TEST(GdnActivations, QwenNextMixerTermsByHand) {
  const ModelSpec m = load_model("qwen3-next-80b-a3b");
  const TrainingConfig t = training(4096);
  const auto terms = layer(m, t, MixerKind::gated_delta_net);
  EXPECT_EQ(bytes_of_prefix(terms, "gdn.", t), 210903040u);
  // The chunk kernel's backward: 5 x (128 + 128) wide rows of 4096 x 16 heads, and the states h
  // and dh of 64 chunks x 16 heads x 128 x 128: (83,886,080 + 33,554,432) x 2 bytes.
  EXPECT_EQ(bytes_of_prefix(terms, "gdn.", t, true), 234881024u);
  // No attention term in a linear-attention layer, and the MoE block's are the attention layer's.
  EXPECT_EQ(bytes_of_prefix(terms, "attn.", t), 0u);
  const auto attention = layer(m, t, MixerKind::attention);
  EXPECT_EQ(bytes_of_prefix(terms, "mlp.", t), bytes_of_prefix(attention, "mlp.", t));
  EXPECT_GT(bytes_of_prefix(terms, "mlp.", t), 0u);
}

// Full recomputation keeps the layer input alone: 2048 x 2048 x 2.
TEST(GdnActivations, FullRecomputationKeepsTheLayerInput) {
  const ModelSpec m = load_model("qwen3-next-80b-a3b");
  TrainingConfig t = training(4096);
  t.recompute = Recompute::full;
  EXPECT_EQ(bytes_of_prefix(layer(m, t, MixerKind::gated_delta_net), "gdn.", t), 8388608u);
}

// --recompute-modules gdn_norm_out frees the out_norm rstd (262,144) and output and the gated
// output (16,777,216 each): 33,816,576 less; the kernel output and z stay. Refused for a model
// without Gated DeltaNet layers (Megatron asserts it).
TEST(GdnActivations, GdnNormOutFreesTheGatedNorm) {
  const ModelSpec m = load_model("qwen3-next-80b-a3b");
  TrainingConfig t = training(4096);
  t.recompute = Recompute::selective;
  t.recompute_modules = kRecomputeGdnNormOut;
  EXPECT_EQ(bytes_of_prefix(layer(m, t, MixerKind::gated_delta_net), "gdn.", t), 210903040u - 33816576u);
  const auto r = run_cli({"analyze", "--model", "qwen3-8b", "--recompute", "selective", "--recompute-modules", "gdn_norm_out"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("gdn_norm_out"), std::string::npos) << r.err;
  const auto ok = run_cli({"analyze", "--model", "qwen3-next-80b-a3b", "--ep", "8", "--dp", "8", "--recompute", "selective",
                           "--recompute-modules", "gdn_norm_out,moe_act"});
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// The full-attention layers' output gate (16 heads of 256, 8 per rank): the bf16 gate and the
// gated output o_proj keeps, each 4096 x 8 x 256 x 2 = 16,777,216.
TEST(GdnActivations, GatedAttentionKeepsTheGateAndTheGatedOutput) {
  const ModelSpec m = load_model("qwen3-next-80b-a3b");
  const TrainingConfig t = training(4096);
  const auto terms = layer(m, t, MixerKind::attention);
  EXPECT_EQ(bytes_of_prefix(terms, "attn.output_gate", t), 16777216u);
  EXPECT_EQ(bytes_of_prefix(terms, "attn.gated_context", t), 16777216u);
}

TEST(GdnActivations, HybridModelsAnalyseUnderMegatronAndAreRefusedElsewhere) {
  const auto a = run_cli({"analyze", "--model", "qwen3-next-80b-a3b", "--tp", "2", "--sp", "--ep", "8", "--pp", "4",
                          "--dp", "8", "--seq-len", "4096", "--global-batch", "64"});
  EXPECT_EQ(a.code, 0) << a.err;
  const auto e = run_cli({"explain", "--stage", "0", "--model", "qwen3-next-80b-a3b", "--tp", "2", "--sp", "--ep", "8",
                          "--pp", "4", "--dp", "8", "--seq-len", "4096", "--global-batch", "64"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("moe linear-attention"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("gdn.chunk_A"), std::string::npos) << e.out;
  // Qwen3.5's released (multimodal) configs analyse with the vision tower counted, and say so.
  const auto v = run_cli({"analyze", "--model", "qwen3.5-9b", "--tp", "2", "--sp", "--dp", "4", "--seq-len", "4096",
                          "--global-batch", "64"});
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("vision tower (vision_config)"), std::string::npos) << v.out;
  for (const char* profile : {"torchtitan", "paper"}) {
    const auto r = run_cli({"analyze", "--model", "qwen3-next-80b-a3b", "--profile", profile, "--dp", "8"});
    EXPECT_EQ(r.code, 2) << profile;
    EXPECT_NE(r.err.find("--profile"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Gated DeltaNet"), std::string::npos) << r.err;
  }
  const auto hf = run_cli({"analyze", "--model", "qwen3-next-80b-a3b", "--profile", "hf", "--dp", "8"});
  EXPECT_EQ(hf.code, 2);
  EXPECT_NE(hf.err.find("qwen3_next"), std::string::npos) << hf.err;
  // Megatron-Core asserts the heads divide over tp; context parallelism is not modelled.
  const auto tp = run_cli({"analyze", "--model", "qwen3.5-27b", "--tp", "32", "--dp", "1"});
  EXPECT_EQ(tp.code, 2);
  const auto cp = run_cli({"analyze", "--model", "qwen3-next-80b-a3b", "--cp", "2", "--ep", "8", "--dp", "8"});
  EXPECT_EQ(cp.code, 2);
  EXPECT_NE(cp.err.find("--cp"), std::string::npos) << cp.err;
  EXPECT_NE(cp.err.find("Gated DeltaNet"), std::string::npos) << cp.err;
}

// The step-time model does not time the chunked delta rule: a timed search is refused by name and
// a search by memory (--gpu-memory) ranks the layouts that fit.
TEST(GdnActivations, SearchRanksHybridModelsByMemoryOnly) {
  const auto timed = run_cli({"search", "--model", "qwen3-next-80b-a3b", "--gpus", "16", "--gpu", "h100-80g", "--global-batch", "64"});
  EXPECT_EQ(timed.code, 2);
  EXPECT_NE(timed.err.find("--gpu"), std::string::npos) << timed.err;
  EXPECT_NE(timed.err.find("Gated DeltaNet"), std::string::npos) << timed.err;
  const auto memory = run_cli({"search", "--model", "qwen3-next-80b-a3b", "--gpus", "64", "--gpu-memory", "80GiB",
                               "--global-batch", "64", "--top", "3", "--threads", "2"});
  EXPECT_EQ(memory.code, 0) << memory.err;
  EXPECT_NE(memory.out.find("fit"), std::string::npos) << memory.out;
}
