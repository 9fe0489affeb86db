// The megatron profile's logits (issue 3): the loss's and each MTP depth's logits are
// b x s x padded_vocab/tp in the loss's dtype; the vocabulary padding by hand; only the loss and
// MTP chunks have logits; the logits dtype through analyze.
// Expected values come from the rules as the issue and Megatron-LM state them, never from
// moemem's own output.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "moemem/activation.hpp"
#include "moemem/analyze.hpp"
#include "moemem/config.hpp"
#include "moemem/dtype.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"
#include "unit/pipeline_helpers.hpp"

namespace {

using namespace moemem;
using moemem::test::pipeline::megatron_training;
using moemem::test::pipeline::model;
using moemem::test::pipeline::par;
using moemem::test::pipeline::u;

std::uint64_t term_bytes(const std::vector<ActivationTerm>& terms, std::string_view name) {
  std::uint64_t total = 0;
  int found = 0;
  for (const auto& t : terms) {
    if (t.name == name) {
      total += t.bytes().value();
      ++found;
    }
  }
  EXPECT_EQ(found, 1) << name;
  return total;
}

TEST(MegatronLogits, PaddedVocabularyByHand) {
  // 129,280 = 505 x 256: already a multiple of 128 x 2; 128 x 3 = 384 and 129,280 / 384 =
  // 336.67, so 337 x 384 = 129,408; 128 x 4 = 512: 253 x 512 = 129,536.
  EXPECT_EQ(padded_vocab(129280, 128, 1), 129280);
  EXPECT_EQ(padded_vocab(129280, 128, 2), 129280);
  EXPECT_EQ(padded_vocab(129280, 128, 3), 129408);
  EXPECT_EQ(padded_vocab(129280, 128, 4), 129536);
  EXPECT_EQ(padded_vocab(129280, 128, 8), 130048);  // 128 x 8 = 1024; 127 x 1024 = 130,048
  EXPECT_EQ(padded_vocab(129280, 0, 8), 129280);
  EXPECT_EQ(padded_vocab(129280, 1, 8), 129280);  // 129,280 = 8 x 16,160
  EXPECT_EQ(padded_vocab(32000, 128, 1), 32000);
  EXPECT_EQ(padded_vocab(32000, 128, 3), 32256);  // 84 x 384
}

struct LogitsCase {
  std::int64_t tp, b, s, vocab_rows;
  DType dtype;
};

TEST(MegatronLogits, LossAndMtpLogitsAreBTimesSTimesVocabOverTp) {
  const ModelSpec m = model("deepseek-v3", 1);
  const LogitsCase cases[] = {
      {2, 1, 4096, 129280, DType::fp32},
      {2, 2, 4096, 129280, DType::fp32},
      {4, 1, 4096, 129536, DType::fp32},
      {2, 1, 4096, 129280, DType::bf16},
      {8, 1, 8192, 130048, DType::fp32},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE("tp " + std::to_string(c.tp) + " b " + std::to_string(c.b) + " s " + std::to_string(c.s) + " " +
                 std::string(name_of(c.dtype)));
    for (const bool sp : {false, true}) {
      const Layout l = resolve_layout(m, par(c.tp, 1, 1, 1, sp));
      TrainingConfig t = megatron_training();
      t.micro_batch = c.b;
      t.seq_len = c.s;
      t.logits_dtype = c.dtype;
      ASSERT_EQ(padded_vocab(m.vocab, 128, c.tp), c.vocab_rows);
      const ActivationContext ctx{m, l, t, AttentionKernel::flash, c.vocab_rows};
      Chunk chunk;
      chunk.loss = true;
      chunk.mtp_depths = 1;
      std::vector<ActivationTerm> terms;
      megatron_profile().chunk_activations(ctx, chunk, terms);
      // The vocab-parallel head sees the whole (gathered) sequence: no division by tp for sp.
      const std::uint64_t expected = u(c.b) * u(c.s) * u(c.vocab_rows / c.tp) * (c.dtype == DType::fp32 ? 4u : 2u);
      EXPECT_EQ(term_bytes(terms, "loss.logits"), expected) << "sp " << sp;
      EXPECT_EQ(term_bytes(terms, "mtp.logits"), expected) << "sp " << sp;
    }
  }
  // tp 3 where padding matters (no DeepSeek preset splits its 128 heads over 3; the chunk terms
  // only read tp from the layout): 129,408 / 3 = 43,136 rows per rank.
  Layout l3;
  l3.config.tp = 3;
  TrainingConfig t = megatron_training();
  const ActivationContext ctx{m, l3, t, AttentionKernel::flash, padded_vocab(m.vocab, 128, 3)};
  Chunk chunk;
  chunk.loss = true;
  chunk.mtp_depths = 2;
  std::vector<ActivationTerm> terms;
  megatron_profile().chunk_activations(ctx, chunk, terms);
  EXPECT_EQ(term_bytes(terms, "loss.logits"), 4096ull * 43136 * 4);
  std::uint64_t mtp_logits = 0;
  int n = 0;
  for (const auto& term : terms) {
    if (term.name == "mtp.logits") {
      mtp_logits += term.bytes().value();
      ++n;
    }
  }
  EXPECT_EQ(n, 2);  // one per MTP depth
  EXPECT_EQ(mtp_logits, 2 * 4096ull * 43136 * 4);
}

// A chunk with neither loss nor MTP has no logits; the embedding chunk keeps the token ids.
TEST(MegatronLogits, OnlyTheLossAndMtpChunksHaveLogits) {
  const ModelSpec m = model("deepseek-v3", 1);
  const Layout l = resolve_layout(m, par(2, 1, 1, 1, true));
  const TrainingConfig t = megatron_training();
  const ActivationContext ctx{m, l, t, AttentionKernel::flash, 129280};
  Chunk first;
  first.embedding = true;
  std::vector<ActivationTerm> terms;
  megatron_profile().chunk_activations(ctx, first, terms);
  for (const auto& term : terms) EXPECT_EQ(term.name.find("logits"), std::string_view::npos) << term.name;
  EXPECT_EQ(term_bytes(terms, "embedding.token_ids"), 4096u * 8u);  // int64 ids of b x s tokens
}

// Through analyze: halving the logits dtype on the last stage of DeepSeek-V3 (main head and one
// MTP depth) saves 2 x b*s*V/tp x 2 bytes per micro-batch there and nothing elsewhere.
TEST(MegatronLogits, LogitsDtypeHalvesTheTermInTheReport) {
  const ModelSpec m = model("deepseek-v3", 1);
  const Inventory inv = build_inventory(m);
  for (const std::int64_t tp : {2, 4}) {
    const Layout l = resolve_layout(m, par(tp, 16, 32, 8, true));
    TrainingConfig t = megatron_training();
    const MemoryReport fp32 = analyze(m, inv, megatron_profile(), l, t);
    t.logits_dtype = DType::bf16;
    const MemoryReport bf16 = analyze(m, inv, megatron_profile(), l, t);
    const std::uint64_t rows = u(padded_vocab(129280, 128, tp) / tp);
    EXPECT_EQ(fp32.padded_vocab, padded_vocab(129280, 128, tp));
    for (std::size_t s = 0; s < 16; ++s) {
      const std::uint64_t saved =
          fp32.stages[s].activations_per_microbatch.value() - bf16.stages[s].activations_per_microbatch.value();
      EXPECT_EQ(saved, s == 15 ? 2 * 4096 * rows * 2 : 0) << "tp " << tp << " stage " << s;
    }
  }
}

// The loss's backward (megatron_loss_peak): with fp32 logits (Megatron's vocab_parallel_cross_entropy
// and native fused path, TE's parallel_cross_entropy from 2.18) the fp32 gradient is cast to the
// head's bf16, one more b*s/cp x V/tp bf16 tensor: DeepSeek-V3 at tp 2, b = 1, s = 4096:
// 4096 x 129280/2 x 2 = 529,530,880 bytes. With bf16 logits (TE's fused cross entropy before 2.18)
// the gradient is written in place into the saved logits: nothing more.
TEST(MegatronLogits, LossBackwardCastsOnlyAnFp32Gradient) {
  const ModelSpec m = model("deepseek-v3", 1);
  const Layout l = resolve_layout(m, par(2, 1, 1, 1, true));
  TrainingConfig t = megatron_training();
  const LossPeak fp32 = megatron_profile().loss_peak(ActivationContext{m, l, t, AttentionKernel::flash, 129280});
  EXPECT_EQ(fp32.allocated.value(), 4096u * 64640u * 2u);
  EXPECT_EQ(fp32.cached.value(), 0u);
  t.logits_dtype = DType::bf16;
  const LossPeak bf16 = megatron_profile().loss_peak(ActivationContext{m, l, t, AttentionKernel::flash, 129280});
  EXPECT_EQ(bf16.allocated.value(), 0u);
  EXPECT_EQ(bf16.cached.value(), 0u);
}

}  // namespace
