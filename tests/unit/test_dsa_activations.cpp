// DeepSeek sparse attention's training activations under the megatron profile (issue 14;
// src/profiles/megatron_dsa.cpp): one DeepSeek-V3.2 layer's attention terms worked out by hand
// from Megatron-Core's absorbed MLA, SparseMLA and lightning indexer (shapes x dtype sizes), the
// selective recomputation modules, an analysis that completes, and the refusals.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "moemem/activation.hpp"
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

// DeepSeek-V3.2 (config.json): hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
// qk_nope 128, qk_rope 64, v_head_dim 128, index_n_heads 64, index_head_dim 128, index_topk 2048.
TrainingConfig training(std::int64_t seq) { return test::hand_training(seq); }

std::vector<ActivationTerm> moe_layer(const ModelSpec& m, const ParallelConfig& p, const TrainingConfig& t) {
  return layer_activation_terms(get_profile("megatron"), m, resolve_layout(m, p), t, LayerKind::moe);
}

// Saved (transient: false) or transient bytes of the attention module's terms kept under `t`'s recomputation.
std::uint64_t attention_bytes(const std::vector<ActivationTerm>& terms, const TrainingConfig& t, bool transient = false) {
  std::uint64_t sum = 0;
  for (const auto& term : terms) {
    if (term.module != Module::attention || term.transient != transient) continue;
    if (!transient && !is_kept(term, t.recompute, t.recompute_modules)) continue;
    sum += term.bytes().value();
  }
  return sum;
}

bool has_term(const std::vector<ActivationTerm>& terms, const std::string& name) {
  return std::any_of(terms.begin(), terms.end(), [&](const ActivationTerm& t) { return t.name == name; });
}

}  // namespace

// b 1, s 4096, tp 1 (T = 4096 tokens, 128 heads on the rank), no recomputation, bf16 = 2 bytes:
//   layer input, norm output        2 x 4096 x 7168 x 2          = 117,440,512
//   q_compressed, its norm's output 2 x 4096 x 1536 x 2          =  25,165,824
//   kv_compressed                   4096 x 512 x 2                =   4,194,304
//   q up-projection output          4096 x 128 x 192 x 2          = 201,326,592
//   absorbed query                  4096 x 128 x 576 x 2          = 603,979,776
//   latent key                      4096 x 576 x 2                =   4,718,592
//   SparseMLA top-k (int32)         4096 x 2048 x 4               =  33,554,432
//   SparseMLA valid heads (bool)    4096 x 128                    =     524,288
//   latent context (v_up input)     4096 x 128 x 512 x 2          = 536,870,912
//   v_up weight copy                128 x 128 x 512 x 2           =  16,777,216
//   context (o_proj input)          4096 x 128 x 128 x 2          = 134,217,728
//   indexer k_norm input + stats    4096 x 128 x 2 + 2 x 4096 x 4 =   1,081,344
//   indexer q                       4096 x 64 x 128 x 2           =  67,108,864
//   indexer k                       4096 x 128 x 2                =   1,048,576
//   indexer weights (fp32)          4096 x 64 x 4                 =   1,048,576
//   indexer top-k (int32)           4096 x 2048 x 4               =  33,554,432
//   indexer score mask (bool)       4096 x 2048                   =   8,388,608
//   KL score gradient (fp32)        4096 x 2048 x 4               =  33,554,432
//                                                                 1,824,555,008 bytes
// Transient, the indexer's phase: the row's query copy 4096 x 128 x 576 x 2 = 603,979,776 and the
// fp32 logits of one block, min(4096, 8192) x 4096 x 4 = 67,108,864: 671,088,640 (larger than the
// sparse phase, which copies nothing at b 1 with 128 heads).
TEST(DsaActivations, DeepSeekV32LayerAtTp1) {
  const ModelSpec m = load_model("deepseek-v3.2");
  const TrainingConfig t = training(4096);
  const auto terms = moe_layer(m, ParallelConfig{}, t);
  EXPECT_EQ(attention_bytes(terms, t), 1'824'555'008u);
  EXPECT_EQ(attention_bytes(terms, t, true), 671'088'640u);
  EXPECT_TRUE(has_term(terms, "indexer.kl_score_grad"));
  EXPECT_FALSE(has_term(terms, "attn.softmax_lse")) << "SparseMLA does not save its LSE";
  EXPECT_FALSE(has_term(terms, "indexer.sort_order")) << "no TP sort at tp 1";
}

// b 2 (T = 8192): every term of the tp-1 layer doubles but the v_up weight copy (16,777,216):
// 2 x (1,824,555,008 - 16,777,216) + 16,777,216 = 3,632,332,800. SparseMLA now saves [b, s]-ordered
// copies of query and key, so mla_up_proj frees only the q up-projection output (2 x 201,326,592)
// and adds its inputs (2 x 4,718,592): 3,632,332,800 - 402,653,184 + 9,437,184 = 3,239,116,800.
// The transient is the sparse phase's output beside its copy, 8192 x 128 x 512 x 2 = 1,073,741,824,
// above the indexer phase's 671,088,640 (per sequence, as at b 1).
TEST(DsaActivations, TwoSequencesPerMicroBatch) {
  const ModelSpec m = load_model("deepseek-v3.2");
  TrainingConfig t = training(4096);
  t.micro_batch = 2;
  const auto terms = moe_layer(m, ParallelConfig{}, t);
  EXPECT_EQ(attention_bytes(terms, t), 3'632'332'800u);
  EXPECT_EQ(attention_bytes(terms, t, true), 1'073'741'824u);
  t.recompute = Recompute::selective;
  t.recompute_modules = kRecomputeMlaUpProj;
  EXPECT_EQ(attention_bytes(moe_layer(m, ParallelConfig{}, t), t), 3'239'116'800u);
}

// tp 8 with sequence parallelism (T = 4096, T/tp = 512, 16 heads per rank):
//   layer input, norm output        2 x 512 x 7168 x 2            =  14,680,064
//   q_compressed, its norm's output 2 x 512 x 1536 x 2            =   3,145,728
//   kv_compressed                   512 x 512 x 2                 =     524,288
//   q up-projection output          4096 x 16 x 192 x 2           =  25,165,824
//   absorbed query                  4096 x 16 x 576 x 2           =  75,497,472
//   latent key (full sequence)      4096 x 576 x 2                =   4,718,592
//   SparseMLA top-k, valid heads    4096 x 2048 x 4 + 4096 x 16   =  33,619,968
//   latent context                  4096 x 16 x 512 x 2           =  67,108,864
//   v_up weight copy                16 x 128 x 512 x 2            =   2,097,152
//   context                         4096 x 16 x 128 x 2           =  16,777,216
//   indexer x, qr gathered over tp  4096 x (7168 + 1536) x 2      =  71,303,168
//   indexer as at tp 1 (duplicated) 1,081,344 + 67,108,864 + 1,048,576 + 1,048,576
//                                   + 33,554,432 + 8,388,608 + 33,554,432 = 145,784,832
//   TP sort: int64 order + mask     4096 x 2048 x (8 + 1)         =  75,497,472
//                                                                   535,920,640 bytes
TEST(DsaActivations, DeepSeekV32LayerAtTp8WithSequenceParallelism) {
  const ModelSpec m = load_model("deepseek-v3.2");
  ParallelConfig p;
  p.tp = 8;
  p.sp = true;
  p.ep = 8;
  p.dp = 8;
  const TrainingConfig t = training(4096);
  const auto terms = moe_layer(m, p, t);
  EXPECT_EQ(attention_bytes(terms, t), 535'920'640u);
  EXPECT_TRUE(has_term(terms, "indexer.x_gathered (wk/weights_proj input)"));
  EXPECT_TRUE(has_term(terms, "indexer.sort_order"));
}

// core_attn's checkpoint (absorbed_mla.py _checkpointed_attention_forward) keeps its inputs, the
// absorbed query and the latent key, and drops the sparse attention and the indexer: at tp 1 what
// stays is the input, norm output, q/kv latents and their norm, the q up-projection output, query,
// key and context: 117,440,512 + 25,165,824 + 4,194,304 + 201,326,592 + 603,979,776 + 4,718,592 +
// 134,217,728 = 1,091,043,328. mla_up_proj at b 1 frees the q up-projection output, query and key
// (discard_output_and_register_recompute frees the storage SparseMLA saved) and keeps its inputs,
// the normed kv latent 4096 x 512 x 2 = 4,194,304 and the RoPE key 4096 x 64 x 2 = 524,288:
// 1,824,555,008 - 201,326,592 - 603,979,776 - 4,718,592 + 4,194,304 + 524,288 = 1,019,248,640.
TEST(DsaActivations, SelectiveRecomputationModules) {
  const ModelSpec m = load_model("deepseek-v3.2");
  TrainingConfig t = training(4096);
  t.recompute = Recompute::selective;
  t.recompute_modules = kRecomputeCoreAttn;
  EXPECT_EQ(attention_bytes(moe_layer(m, ParallelConfig{}, t), t), 1'091'043'328u);
  t.recompute_modules = kRecomputeMlaUpProj;
  EXPECT_EQ(attention_bytes(moe_layer(m, ParallelConfig{}, t), t), 1'019'248'640u);
}

// A realistic layout: DeepSeek-V3.2 over 16 pipeline stages, ep 64, tp 1, s 4096, b 1, the
// distributed optimizer. The analysis completes, every stage holds activations, and the report
// names what it assumes of DSA.
TEST(DsaActivations, AnalysisCompletesUnderMegatron) {
  const ModelSpec m = load_model("deepseek-v3.2");
  ParallelConfig p;
  p.pp = 16;
  p.dp = 64;
  p.ep = 64;
  TrainingConfig t = training(4096);
  t.global_batch = 1024;
  const MemoryReport r = analyze(m, build_inventory(m), get_profile("megatron"), resolve_layout(m, p), t);
  ASSERT_EQ(r.stages.size(), 16u);
  for (const auto& st : r.stages) EXPECT_GT(st.bytes.activations.value(), 0u) << st.stage;
  const bool named = std::any_of(r.assumptions.begin(), r.assumptions.end(), [](const std::string& a) {
    return a.find("tilelang") != std::string::npos && a.find("2048") != std::string::npos;
  });
  EXPECT_TRUE(named);
}

namespace {

void expect_refused(const ModelSpec& m, const ParallelConfig& p, const TrainingConfig& t, const std::string& field) {
  const auto e = get_profile("megatron").check(m, resolve_layout(m, p), t);
  ASSERT_TRUE(e.has_value()) << field;
  EXPECT_EQ(e->field(), field) << e->what();
}

}  // namespace

// What Megatron refuses with DSA, and what moemem does not model of what it accepts, by name.
TEST(DsaActivations, RefusedSettings) {
  const ModelSpec m = load_model("deepseek-v3.2");
  const TrainingConfig plain = training(4096);
  ParallelConfig p;
  p.dp = 8;
  p.ep = 8;
  ParallelConfig cp = p;
  cp.cp = 2;
  expect_refused(m, cp, plain, "--cp");
  TrainingConfig t = plain;
  t.attention = AttentionKernel::eager;
  expect_refused(m, p, t, "--attention");
  t.attention = AttentionKernel::sdpa;
  expect_refused(m, p, t, "--attention");
  t = plain;
  t.fp8 = Fp8Recipe::blockwise;
  expect_refused(m, p, t, "--fp8");
  ParallelConfig tp = p;
  tp.tp = 2;
  expect_refused(m, tp, plain, "--sp");
  t = plain;
  t.seq_len = 1000;  // top-k min(2048, 1000) = 1000: not a multiple of 256
  expect_refused(m, p, t, "--seq-len");
  ModelSpec odd = m;
  odd.dsa.index_topk = 1000;
  expect_refused(odd, p, plain, "index_topk");
  odd = m;
  odd.dsa.index_n_heads = 128;  // the fused indexer backward takes at most 64
  expect_refused(odd, p, plain, "index_n_heads");
  odd = m;
  odd.mla.kv_lora_rank = 256;
  expect_refused(odd, p, plain, "kv_lora_rank/qk_rope_head_dim");
  // tp 16 leaves 8 heads per rank, padded to SparseMLA's 16: accepted.
  ParallelConfig tp16 = p;
  tp16.tp = 16;
  tp16.sp = true;
  tp16.dp = 1;
  EXPECT_FALSE(get_profile("megatron").check(m, resolve_layout(m, tp16), plain).has_value());
}
