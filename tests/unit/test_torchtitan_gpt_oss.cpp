// torchtitan's gpt-oss (models/gpt_oss at c5d93d109): one block's saved tensors worked out by hand
// from the model code (src/profiles/torchtitan_moe.cpp says which op saves what), and the setups
// the profile refuses by name.
//
// gpt-oss-20b: h 2880, 64 heads and 8 KV heads of 64 (q width 4096, kv 512), 32 experts of 2880
// (F), top 4. Bytes per token of one block, tp 1, ep 1 (N = 4 routed rows per token):
//   attention: block input 2h = 5,760; attention_norm rstd 4; its output (wq/wk/wv input) 5,760;
//   cos and sin fp32 2 x 64 x 4 = 512; flex q 8,192, k 1,024, v 1,024, output 8,192, fp32 lse
//   64 x 4 = 256; sink sigmoid fp32 256 and its bf16 cast 128; wo input 8,192: 39,300.
//   MoE: ffn_norm input 5,760 and rstd 4; the router's fp32 input 4h = 11,520; fp32 scores
//   32 x 4 = 128; top-k indices 4 x 8 = 32; route_norm numerator 4 x 4 = 16 and denominator 4;
//   sorted and token indices 2 x 4 x 8 = 64; per routed row (x4): experts input 2h = 5,760, two
//   int64 bias indices 16, mlp1 output 2 x 2F = 11,520, five [F] bf16 SwiGLU tensors 28,800, the
//   fp32 combine copy 4h = 11,520 and the fp32 sorted score 4: 57,620 x 4 = 230,480. 248,008.
//   Block: 287,308 bytes per token.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "moemem/analyze.hpp"
#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"
#include "moemem/training.hpp"

#include "unit/layer_terms_helpers.hpp"

namespace {

using namespace moemem;
using namespace moemem::test;

std::uint64_t saved_bytes(const std::vector<ActivationTerm>& terms, bool kept_under_full_only = false) {
  std::uint64_t b = 0;
  for (const auto& t : terms) {
    if (t.transient || (kept_under_full_only && !t.kept_under_full)) continue;
    b += t.bytes().value();
  }
  return b;
}

std::vector<ActivationTerm> block(const ModelSpec& m, const ParallelConfig& p, const TrainingConfig& t) {
  return layer_activation_terms(get_profile("torchtitan"), m, resolve_layout(m, p), t, LayerKind::moe);
}

// FSDP over 8 ranks; EP 8 over them; the hottest rank receiving 1.5 x its share.
ParallelConfig fsdp8() {
  ParallelConfig p;
  p.dp = 8;
  return p;
}
ParallelConfig ep8() {
  ParallelConfig p = fsdp8();
  p.ep = 8;
  return p;
}
TrainingConfig hot(TrainingConfig t) {
  t.moe_imbalance = 1.5;
  return t;
}

TEST(TorchtitanGptOss, OneBlockSavesWhatEagerAutogradKeeps) {
  const ModelSpec m = load_model("gpt-oss-20b");
  const TrainingConfig t = hand_training(8192);
  const ParallelConfig p = fsdp8();
  EXPECT_EQ(saved_bytes(block(m, p, t)), 8192u * 287308u);
  // Full activation checkpointing keeps the block input only.
  EXPECT_EQ(saved_bytes(block(m, p, t), true), 8192u * 5760u);
  // TP 2 (ep 1: the experts split on their hidden width): the norms' input and rstd halve
  // (sequence-parallel), the attention and MoE inputs are gathered whole, heads and F halve.
  // Attention 2,880 + 2 + 5,760 + 512 + 4,096 + 512 + 512 + 4,096 + 128 + 128 + 64 + 4,096 =
  // 22,786; MoE 2,880 + 2 + 11,520 + 128 + 32 + 16 + 4 + 64 + 4 x (5,760 + 16 + 5,760 + 14,400 +
  // 11,520 + 4) = 14,646 + 149,840 = 164,486. 187,272 per token.
  ParallelConfig tp2;
  tp2.tp = 2;
  tp2.dp = 4;
  EXPECT_EQ(saved_bytes(block(m, tp2, t)), 8192u * 187272u);
  // EP 8 with the hottest rank receiving 1.5 x its share: R = 49,152 rows of 8,192 x 4. Per token
  // 39,300 + 17,528 (norm, router and dispatch indices) and per routed row the combine's 11,524,
  // per received row 46,104 (input 5,760, bias indices 16, mlp1 11,520, SwiGLU 28,800, permute's
  // index 8): 465,534,976 + 377,618,432 + 2,266,103,808.
  EXPECT_EQ(saved_bytes(block(m, ep8(), hot(t))), 3109257216u);
}

std::uint64_t transient_total(const std::vector<ActivationTerm>& terms) {
  std::uint64_t b = 0;
  for (const auto& t : terms) {
    if (t.transient) b += t.bytes().value();
  }
  return b;
}

// The block's largest moment is the combine's cast of its fp32 product back to bf16 (common/
// token_dispatcher.py combine): alive then, beside what the block saved, MoE.forward's bf16 input
// (b*s x h), the experts' output (N x h), under EP the combine all-to-all's output (b*s*top_k x h),
// the fp32 product (N x h x 4 bytes), its bf16 cast and zeros_like(x) (b*s x h). At ep 1 the
// gathered rows are the experts' saved input, not a second copy.
TEST(TorchtitanGptOss, CombineTransientsAreTheBlocksLargestMoment) {
  const ModelSpec m = load_model("gpt-oss-20b");
  const TrainingConfig t = hand_training(8192);
  const ParallelConfig p = fsdp8();
  // Per token (N = 4 rows): 5,760 + 4 x 5,760 + 4 x 11,520 + 4 x 5,760 + 5,760 = 103,680.
  EXPECT_EQ(transient_total(block(m, p, t)), 8192u * 103680u);
  // EP 8, the hottest rank receiving 1.5 x its share (49,152 rows): input 47,185,920, experts'
  // output 283,115,520, all-to-all output 188,743,680, fp32 product 377,487,360, its cast
  // 188,743,680, zeros 47,185,920.
  EXPECT_EQ(transient_total(block(m, ep8(), hot(t))), 1132462080u);
}

void expect_refused(const ParallelConfig& p, const TrainingConfig& t, const std::string& field) {
  const ModelSpec m = load_model("gpt-oss-20b");
  try {
    (void)analyze(m, build_inventory(m), get_profile("torchtitan"), resolve_layout(m, p), t);
    ADD_FAILURE() << "analysed, expected a refusal of " << field;
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), field) << e.what();
  }
}

// What is not modelled is refused by name: the per-op SAC list, compiled blocks, float8, other
// releases' model code, PP (wired at c5d93d109, not modelled) and CP (its README: to do), TP with EP;
// and what torchtitan itself refuses: a sequence beyond the flavors' RoPE table.
TEST(TorchtitanGptOss, RefusesWhatIsNotModelled) {
  const ModelSpec m = load_model("gpt-oss-20b");
  TrainingConfig full = hand_training(8192);
  full.recompute = Recompute::full;
  ParallelConfig p;
  p.dp = 8;
  const MemoryReport r = analyze(m, build_inventory(m), get_profile("torchtitan"), resolve_layout(m, p), full);
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_GT(r.stages[0].bytes.total().value(), 0u);

  TrainingConfig sel = full;
  sel.recompute = Recompute::selective;
  expect_refused(p, sel, "--recompute");
  TrainingConfig compiled = full;
  compiled.compile = true;
  expect_refused(p, compiled, "--compile");
  TrainingConfig release = full;
  release.torchtitan_version = TorchtitanVersion::v0_2_2;
  expect_refused(p, release, "--torchtitan-version");
  TrainingConfig fp8 = full;
  fp8.fp8 = Fp8Recipe::tensorwise;
  expect_refused(p, fp8, "--fp8");
  ParallelConfig pp = p;
  pp.dp = 4;
  pp.pp = 2;
  expect_refused(pp, full, "--pp");
  ParallelConfig cp = p;
  cp.dp = 4;
  cp.cp = 2;
  expect_refused(cp, full, "--cp");
  ParallelConfig tp_ep = p;
  tp_ep.dp = 4;
  tp_ep.tp = 2;
  tp_ep.ep = 4;
  expect_refused(tp_ep, full, "--tp/--ep");
  // The trainer raises when seq_len exceeds the flavors' RoPE max_seq_len (131,072).
  TrainingConfig longest = full;
  longest.seq_len = 131072;
  EXPECT_NO_THROW((void)analyze(m, build_inventory(m), get_profile("torchtitan"), resolve_layout(m, p), longest));
  TrainingConfig longer = full;
  longer.seq_len = 262144;
  expect_refused(p, longer, "--seq-len");
}

}  // namespace
