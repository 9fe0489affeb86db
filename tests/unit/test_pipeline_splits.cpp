// Megatron's pipeline splits other than a layout string (issue 3), through resolve_layout: first
// and last stage layers, the embedding and loss counted as a layer, and the chunks DualPipe and
// DualPipeV give each rank.
// Expected values come from the rules as the issue and Megatron-LM state them, never from
// moemem's own output.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/parallel.hpp"
#include "moemem/pipeline.hpp"
#include "unit/pipeline_helpers.hpp"

namespace {

using namespace moemem;
using moemem::test::pipeline::I64s;
using moemem::test::pipeline::error_of;
using moemem::test::pipeline::idx;
using moemem::test::pipeline::model;
using moemem::test::pipeline::par;

I64s layer_counts(const Layout& l) {
  I64s out;
  for (const auto& c : l.chunks) out.push_back(c.num_layers);
  return out;
}

// --decoder-first/last-pipeline-num-layers 3 / 2 on 61 layers and 16 stages: 61 - 5 = 56 over
// the 14 middle stages, 4 each.
TEST(LayoutSplit, FirstAndLastStageLayers) {
  const ModelSpec m = model("deepseek-v3", 1);
  ParallelConfig p = par(2, 16, 32, 8, true);
  p.first_stage_layers = 3;
  p.last_stage_layers = 2;
  I64s expected(16, 4);
  expected.front() = 3;
  expected.back() = 2;
  const Layout l = resolve_layout(m, p);
  EXPECT_EQ(layer_counts(l), expected);
  EXPECT_EQ(l.stages[0].num_layers, 3);
  EXPECT_EQ(l.stages[15].first_layer, 59);
  // Only the first given: 61 - 1 = 60 over 15 stages.
  p.last_stage_layers.reset();
  p.first_stage_layers = 1;
  I64s first_only(16, 4);
  first_only.front() = 1;
  EXPECT_EQ(layer_counts(resolve_layout(m, p)), first_only);
  // 4 and 4 leave 53 for 14 stages: no equal share. 5 and 0 leave 56 = 14 x 4: valid.
  p.first_stage_layers = 4;
  p.last_stage_layers = 4;
  EXPECT_THROW((void)resolve_layout(m, p), InputError);
  p.first_stage_layers = 5;
  p.last_stage_layers = 0;
  I64s five_zero(16, 4);
  five_zero.front() = 5;
  five_zero.back() = 0;
  EXPECT_EQ(layer_counts(resolve_layout(m, p)), five_zero);
  // More layers than the model has.
  p.first_stage_layers = 62;
  p.last_stage_layers.reset();
  EXPECT_THROW((void)resolve_layout(m, p), InputError);
}

// --account-for-embedding/loss-in-pipeline-split: the embedding and/or the loss count as one
// layer each, and the L + e + l units are split evenly.
TEST(LayoutSplit, EmbeddingAndLossCountedAsLayers) {
  // DeepSeek-V2-Lite: 27 layers + embedding = 28 = 4 x 7: stage 0 has 6 layers, the rest 7.
  const ModelSpec lite = model("deepseek-v2-lite", 0);
  ASSERT_EQ(lite.num_layers, 27);
  ParallelConfig p = par(1, 4, 1, 1);
  p.account_for_embedding = true;
  EXPECT_EQ(layer_counts(resolve_layout(lite, p)), (I64s{6, 7, 7, 7}));
  // Both: 27 + 2 = 29 is not divisible by 4.
  p.account_for_loss = true;
  EXPECT_THROW((void)resolve_layout(lite, p), InputError);
  // Only the loss: 28 = 4 x 7 again, now the last stage has 6.
  p.account_for_embedding = false;
  EXPECT_EQ(layer_counts(resolve_layout(lite, p)), (I64s{7, 7, 7, 6}));
  // DeepSeek-V3, both: 61 + 2 = 63 = 9 x 7: stages 0 and 8 hold 6, the seven others 7.
  const ModelSpec v3 = model("deepseek-v3", 1);
  ParallelConfig q = par(1, 9, 1, 1);
  q.account_for_embedding = q.account_for_loss = true;
  EXPECT_EQ(layer_counts(resolve_layout(v3, q)), (I64s{6, 7, 7, 7, 7, 7, 7, 7, 6}));
  // With virtual stages the units are split over pp * vpp chunks: 63 = 3 x 3 x 7.
  q.pp = 3;
  q.vpp = 3;
  EXPECT_EQ(layer_counts(resolve_layout(v3, q)), (I64s{6, 7, 7, 7, 7, 7, 7, 7, 6}));
  // One unit per chunk (the ModelZoo's Qwen3-235B PP32 VPP3 run): 27 + 2 = 29 chunks, the first
  // holding the embedding alone and the last the loss alone; one chunk more is refused.
  ParallelConfig one = par(1, 29, 1, 1);
  one.account_for_embedding = one.account_for_loss = true;
  I64s each(29, 1);
  each.front() = 0;
  each.back() = 0;
  const Layout l = resolve_layout(lite, one);
  EXPECT_EQ(layer_counts(l), each);
  EXPECT_TRUE(l.chunks.front().embedding);
  EXPECT_TRUE(l.chunks.back().loss);
  one.pp = 30;
  EXPECT_NE(error_of([&] { (void)resolve_layout(lite, one); }).find("at most 29 units (27 layers, the embedding and the loss"),
            std::string::npos);
}

// DualPipe: rank r holds stages r and pp-1-r of a pp-chunk cut; DualPipeV: chunks r and
// 2pp-1-r of a 2pp-chunk cut. DualPipe needs an even pp.
TEST(LayoutSplit, DualPipeRankChunks) {
  const ModelSpec m = model("deepseek-v3", 1);
  ParallelConfig p = par(2, 16, 32, 8, true);
  p.schedule = Schedule::dualpipe;
  const Layout d = resolve_layout(m, p);
  ASSERT_EQ(d.chunks.size(), 16u);
  for (std::int64_t r = 0; r < 16; ++r) EXPECT_EQ(d.rank_chunks[idx(r)], (I64s{r, 15 - r})) << r;
  p.schedule = Schedule::dualpipev;
  p.pp = 8;
  const Layout v = resolve_layout(m, p);
  ASSERT_EQ(v.chunks.size(), 16u);
  EXPECT_EQ(layer_counts(v), layer_counts(d));  // the same 16-chunk cut of the model
  for (std::int64_t r = 0; r < 8; ++r) EXPECT_EQ(v.rank_chunks[idx(r)], (I64s{r, 15 - r})) << r;
  p.schedule = Schedule::dualpipe;
  p.pp = 3;
  p.dp = 8;
  const std::string msg = error_of([&] { (void)resolve_layout(m, p); });
  EXPECT_NE(msg.find("even"), std::string::npos) << msg;
}

}  // namespace
