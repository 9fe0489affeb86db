// Nemotron-H's blocks under the megatron profile (issue 14; src/profiles/megatron_mamba.cpp and
// megatron_hybrid_block): one Mamba-2 block's and one MLP block's saved tensors worked out by hand
// from Megatron-Core's MambaMixer with mamba_ssm's fused scan and from its hybrid layer specs
// (shapes x dtype sizes), the chunked scan's backward transient, and the refusals.
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

std::vector<ActivationTerm> block(const ModelSpec& m, const TrainingConfig& t, LayerKind kind, MixerKind mixer) {
  ParallelConfig p;
  p.dp = 8;
  return layer_activation_terms(get_profile("megatron"), m, resolve_layout(m, p), t, kind, mixer);
}

std::uint64_t saved_bytes(const std::vector<ActivationTerm>& terms, const TrainingConfig& t) {
  std::uint64_t sum = 0;
  for (const auto& term : terms) {
    if (!term.transient && is_kept(term, t.recompute, t.recompute_modules)) sum += term.bytes().value();
  }
  return sum;
}

std::uint64_t transient_sum(const std::vector<ActivationTerm>& terms) {
  std::uint64_t sum = 0;
  for (const auto& term : terms) sum += term.transient ? term.bytes().value() : 0;
  return sum;
}

}  // namespace

// Nemotron-Nano-9B-v2: h 4480, 128 Mamba heads of 80 (d_inner 10240), 8 groups, d_state 128,
// chunk 128; tp 1, b 1, s 4096. Bytes per token:
//   block input, fused norm output  2 x 4480 x 2                         = 17,920
//   the norm's rsigma               4                                    =      4
//   zxbcdt                          (2 x 10240 + 2 x 8 x 128 + 128) x 2  = 45,312
//   out_x, gated output, out_proj input  3 x 10240 x 2                   = 61,440
//   the grouped norm's rstd         8 x 4                                =     32
//   sum 124,708 x 4096 tokens = 510,803,968
TEST(MambaActivations, NemotronNanoMambaBlockByHand) {
  const ModelSpec m = load_model("nemotron-nano-9b-v2");
  const TrainingConfig t = training(4096);
  const auto terms = block(m, t, LayerKind::dense, MixerKind::mamba2);
  EXPECT_EQ(saved_bytes(terms, t), 510803968u);
  // The scan's backward: chunk states 32 chunks x 128 heads x 80 x 128 = 41,943,040 elements, twice
  // in fp32 (335,544,320 bytes) and twice in bf16, with 4096 x (22,656 + 2 x 12,288 + 2 x 10,240)
  // bf16 gradients and recomputed buffers: (83,886,080 + 277,348,352) x 2 = 722,468,864.
  EXPECT_EQ(transient_sum(terms), 335544320u + 722468864u);
  // Full recomputation keeps the block input: 4096 x 4480 x 2.
  TrainingConfig full = t;
  full.recompute = Recompute::full;
  EXPECT_EQ(saved_bytes(terms, full), 36700160u);
}

// The MLP block (squared ReLU, intermediate 15680): block input and fc1's fused norm output
// 2 x 4480 x 2, fc1's output (the activation's saved input) and fc2's input 2 x 15680 x 2: 80,640
// bytes per token, x 4096 = 330,301,440. No attention term; the attention block has no MLP term.
TEST(MambaActivations, NemotronNanoMlpAndAttentionBlocksHoldOneMixerEach) {
  const ModelSpec m = load_model("nemotron-nano-9b-v2");
  const TrainingConfig t = training(4096);
  const auto mlp = block(m, t, LayerKind::dense, MixerKind::none);
  EXPECT_EQ(saved_bytes(mlp, t), 330301440u);
  for (const auto& term : mlp) EXPECT_EQ(std::string(term.name).rfind("attn.", 0), std::string::npos) << term.name;
  const auto attention = block(m, t, LayerKind::dense, MixerKind::attention);
  for (const auto& term : attention) EXPECT_EQ(std::string(term.name).rfind("mlp.", 0), std::string::npos) << term.name;
}

TEST(MambaActivations, NemotronHAnalysesUnderMegatronWithItsRules) {
  const auto a = run_cli({"analyze", "--model", "nemotron-3-nano-30b-a3b", "--ep", "8", "--dp", "8", "--seq-len", "8192",
                          "--global-batch", "64", "--recompute", "selective", "--recompute-modules", "moe,layernorm"});
  EXPECT_EQ(a.code, 0) << a.err;
  const auto e = run_cli({"explain", "--stage", "0", "--model", "nemotron-nano-9b-v2", "--tp", "2", "--sp", "--dp", "4",
                          "--seq-len", "8192", "--global-batch", "64"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("dense mamba"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("mamba.zxbcdt"), std::string::npos) << e.out;
  // mamba_mixer.py asserts the heads and groups divide over tp (8 groups).
  const auto tp = run_cli({"analyze", "--model", "nemotron-nano-9b-v2", "--tp", "16", "--dp", "1"});
  EXPECT_EQ(tp.code, 2);
  EXPECT_NE(tp.err.find("--tp"), std::string::npos) << tp.err;
  const auto cp = run_cli({"analyze", "--model", "nemotron-nano-9b-v2", "--cp", "2", "--dp", "4"});
  EXPECT_EQ(cp.code, 2);
  EXPECT_NE(cp.err.find("Mamba-2"), std::string::npos) << cp.err;
}
