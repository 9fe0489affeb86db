// Megatron's pipeline layout string (--pipeline-model-parallel-layout, issue 3), at the library
// level: the parse, malformed strings pointing at the offending position, the chunks a string
// gives and the rank that holds each, and strings that parse but do not fit the model.
// Expected values come from the rules as the issue and Megatron-LM state them, never from
// moemem's own output.
#include <cstdint>
#include <string>
#include <vector>

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

// ---------------------------------------------------------------------------------------------
// Layout strings: the parse.

LayoutStage st(std::int64_t e, std::int64_t t, std::int64_t m, std::int64_t l) {
  LayoutStage s;
  s.embedding = e;
  s.decoder = t;
  s.mtp = m;
  s.loss = l;
  return s;
}

void expect_stage(const LayoutStage& got, const LayoutStage& want, std::size_t i) {
  EXPECT_EQ(got.embedding, want.embedding) << "stage " << i;
  EXPECT_EQ(got.decoder, want.decoder) << "stage " << i;
  EXPECT_EQ(got.mtp, want.mtp) << "stage " << i;
  EXPECT_EQ(got.loss, want.loss) << "stage " << i;
}

// NVIDIA's DeepSeek-V3 recipe: "Et" + 30 x "tt|" + "mL" = 32 stages, 1 + 60 = 61 t.
TEST(LayoutString, ParsesTheNvidiaRecipe) {
  const auto s = parse_pipeline_layout("Et|(tt|)*30mL");
  ASSERT_EQ(s.size(), 32u);
  expect_stage(s[0], st(1, 1, 0, 0), 0);
  for (std::size_t i = 1; i <= 30; ++i) expect_stage(s[i], st(0, 2, 0, 0), i);
  expect_stage(s[31], st(0, 0, 1, 1), 31);
}

// Megatron's own docstring example: '*N' binds to the item before it ("t*3" is "ttt"), commas
// are cosmetic; 1 + 29 + 1 + 1 = 32 stages and 3 + 58 = 61 t.
TEST(LayoutString, RepetitionBindsToThePrecedingItemAndCommasAreCosmetic) {
  const auto s = parse_pipeline_layout("Et*3|(tt|)*29,m|L");
  ASSERT_EQ(s.size(), 32u);
  expect_stage(s[0], st(1, 3, 0, 0), 0);
  for (std::size_t i = 1; i <= 29; ++i) expect_stage(s[i], st(0, 2, 0, 0), i);
  expect_stage(s[30], st(0, 0, 1, 0), 30);
  expect_stage(s[31], st(0, 0, 0, 1), 31);
  // Spaces and commas anywhere between items change nothing.
  const auto spaced = parse_pipeline_layout(" E t *3 , | ( t t | ) *29 , m | L ");
  ASSERT_EQ(spaced.size(), 32u);
  for (std::size_t i = 0; i < 32; ++i) expect_stage(spaced[i], s[i], i);
}

TEST(LayoutString, NestedGroupsAndEmptyStages) {
  // ((t)*2|)*3 = "tt|tt|tt|", then "L": four stages, the last holding only the loss.
  const auto s = parse_pipeline_layout("E((t)*2|)*3L");
  ASSERT_EQ(s.size(), 4u);
  expect_stage(s[0], st(1, 2, 0, 0), 0);
  expect_stage(s[1], st(0, 2, 0, 0), 1);
  expect_stage(s[2], st(0, 2, 0, 0), 2);
  expect_stage(s[3], st(0, 0, 0, 1), 3);
  // Two boundaries in a row: an empty stage between them.
  const auto e = parse_pipeline_layout("Et||tL");
  ASSERT_EQ(e.size(), 3u);
  expect_stage(e[1], st(0, 0, 0, 0), 1);
  // "*0" removes the item.
  EXPECT_EQ(parse_pipeline_layout("Et*0|L")[0].decoder, 0);
}

struct Malformed {
  const char* text;
  const char* where;  // what the message must show: the position and the character there
};

// Positions are 0-based character offsets into the string as typed.
TEST(LayoutString, MalformedStringsPointAtTheOffendingPosition) {
  const Malformed cases[] = {
      {"Ex|tL", "position 1: 'x'"},           // not a layout item
      {"Et|(tt|)*mL", "position 9: 'm'"},     // '*' without a number: 'm' is where it is missing
      {"Et|(tt|*30mL", "position 12: 'end'"}, // the group is never closed: the end of the text
      {"Et|tt)|L", "position 5: ')'"},        // ')' without '('
      {"*3Et|L", "position 0: '*'"},          // repetition of nothing
      {"Et|(tt|)*30mL]", "position 13: ']'"}, // trailing junk
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string msg = error_of([&] { (void)parse_pipeline_layout(c.text); });
    ASSERT_FALSE(msg.empty()) << "accepted";
    EXPECT_NE(msg.find("--pipeline-model-parallel-layout"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.where), std::string::npos) << msg;
  }
  EXPECT_THROW((void)parse_pipeline_layout(""), InputError);
}

// A layout that would expand past any real model is refused before it is built.
TEST(LayoutString, HugeRepetitionIsRefusedNotExpanded) {
  for (const char* text : {"(t)*99999999999999999999", "(((t)*1000)*1000)*1000", "Et|(tt|)*4000000000L"}) {
    SCOPED_TRACE(text);
    const std::string msg = error_of([&] { (void)parse_pipeline_layout(text); });
    EXPECT_NE(msg.find("position"), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------------------------------------
// Layout strings: chunks and ranks.

ParallelConfig nvidia_recipe() {
  ParallelConfig p = par(2, 8, 64, 64, true);
  p.vpp = 4;
  p.pipeline_layout = "Et|(tt|)*30mL";
  return p;
}

// Virtual stage i of a layout string is model chunk i, held by rank i % pp (Megatron converts
// the 1D list with layout[vpp_rank * pp + pp_rank]).
TEST(LayoutResolve, NvidiaRecipeChunksAndRanks) {
  const ModelSpec m = model("deepseek-v3", 1);
  const Layout l = resolve_layout(m, nvidia_recipe());
  EXPECT_EQ(l.config.schedule, Schedule::interleaved);
  ASSERT_EQ(l.chunks.size(), 32u);
  std::int64_t layers = 0, embeddings = 0, losses = 0, mtps = 0;
  for (std::size_t c = 0; c < l.chunks.size(); ++c) {
    const Chunk& ch = l.chunks[c];
    EXPECT_EQ(ch.first_layer, layers) << "chunk " << c;  // model order, contiguous
    layers += ch.num_layers;
    embeddings += ch.embedding ? 1 : 0;
    losses += ch.loss ? 1 : 0;
    mtps += ch.mtp_depths;
  }
  EXPECT_EQ(layers, 61);
  EXPECT_EQ(embeddings, 1);
  EXPECT_EQ(losses, 1);
  EXPECT_EQ(mtps, 1);
  EXPECT_TRUE(l.chunks[0].embedding);
  EXPECT_EQ(l.chunks[0].num_layers, 1);
  for (std::size_t c = 1; c <= 30; ++c) {
    EXPECT_EQ(l.chunks[c].num_layers, 2) << c;
    EXPECT_EQ(l.chunks[c].first_layer, 2 * static_cast<std::int64_t>(c) - 1) << c;
  }
  EXPECT_EQ(l.chunks[31].num_layers, 0);
  EXPECT_TRUE(l.chunks[31].loss);
  EXPECT_EQ(l.chunks[31].mtp_depths, 1);
  EXPECT_EQ(l.chunk_with_embedding(), 0);
  EXPECT_EQ(l.chunk_with_loss(), 31);
  EXPECT_EQ(l.chunk_of_mtp(0), 31);
  ASSERT_EQ(l.rank_chunks.size(), 8u);
  for (std::int64_t r = 0; r < 8; ++r) EXPECT_EQ(l.rank_chunks[idx(r)], (I64s{r, r + 8, r + 16, r + 24})) << r;
  // Rank 0: 1 + 2 + 2 + 2 layers; rank 7: 2 + 2 + 2 + 0; the others 8.
  EXPECT_EQ(l.stages[0].num_layers, 7);
  for (std::size_t r = 1; r < 7; ++r) EXPECT_EQ(l.stages[r].num_layers, 8) << r;
  EXPECT_EQ(l.stages[7].num_layers, 6);
  EXPECT_EQ(l.edp, 2);  // tp*dp / ep = 128 / 64
  EXPECT_EQ(l.world_size, 2 * 8 * 64);
}

TEST(LayoutResolve, MegatronDocstringLayoutOnSixteenRanksTwoVirtualStages) {
  const ModelSpec m = model("deepseek-v3", 1);
  ParallelConfig p = par(2, 16, 64, 64, true);
  p.vpp = 2;
  p.pipeline_layout = "Et*3|(tt|)*29,m|L";
  const Layout l = resolve_layout(m, p);
  ASSERT_EQ(l.chunks.size(), 32u);
  std::int64_t layers = 0;
  for (const auto& c : l.chunks) layers += c.num_layers;
  EXPECT_EQ(layers, 61);
  EXPECT_EQ(l.chunks[0].num_layers, 3);
  EXPECT_EQ(l.chunks[30].mtp_depths, 1);
  EXPECT_FALSE(l.chunks[30].loss);
  EXPECT_TRUE(l.chunks[31].loss);
  EXPECT_EQ(l.chunks[31].mtp_depths, 0);
  for (std::int64_t r = 0; r < 16; ++r) EXPECT_EQ(l.rank_chunks[idx(r)], (I64s{r, r + 16})) << r;
}

// MTP not placed by the layout goes with the loss.
TEST(LayoutResolve, UnplacedMtpGoesWithTheLoss) {
  const ModelSpec m = model("deepseek-v3", 1);
  ParallelConfig p = nvidia_recipe();
  p.pipeline_layout = "Et|(tt|)*30L";
  const Layout l = resolve_layout(m, p);
  EXPECT_EQ(l.chunks[31].mtp_depths, 1);
  EXPECT_TRUE(l.chunks[31].loss);
}

struct BadLayout {
  const char* text;
  std::vector<const char*> words;  // the message names the rule broken
};

// Strings that parse but do not describe this model and layout. They have no single offending
// character, so the message states the rule (stage count, t count, one E, one L).
TEST(LayoutResolve, SemanticallyWrongStringsAreRefused) {
  const ModelSpec m = model("deepseek-v3", 1);
  const BadLayout cases[] = {
      {"Et|(tt|)*29ttmL", {"32 stages", "not 31"}},        // 61 t but 31 stages
      {"E|(tt|)*30mL", {"60 t", "61 t"}},                   // 32 stages, 60 t
      {"Et|(tt|)*30mLE", {"exactly one E"}},                // a second embedding
      {"Et|(tt|)*30m", {"exactly one E"}},                  // no loss (rule: one E and one L)
      {"Et|(tt|)*30mmL", {"MTP"}},                          // two m with --mtp 1
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    ParallelConfig p = nvidia_recipe();
    p.pipeline_layout = c.text;
    const std::string msg = error_of([&] { (void)resolve_layout(m, p); });
    ASSERT_FALSE(msg.empty()) << "accepted";
    EXPECT_NE(msg.find("--pipeline-model-parallel-layout"), std::string::npos) << msg;
    for (const char* w : c.words) EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in " << msg;
  }
}

// Megatron-LM (PipelineParallelLayerLayout.validate_layer_layout) requires the first item of
// the flattened layout to be the embedding and the last to be the loss. A layout that puts the
// embedding after decoder layers describes no runnable model.
TEST(LayoutResolve, EmbeddingMustComeFirstAndLossLast) {
  const ModelSpec m = model("deepseek-v3", 1);
  for (const char* text : {"t|(tt|)*30EmL", "Et|(tt|)*30Lm", "L|(tt|)*30tmE"}) {
    SCOPED_TRACE(text);
    ParallelConfig p = nvidia_recipe();
    p.pipeline_layout = text;
    EXPECT_THROW((void)resolve_layout(m, p), InputError);
  }
}

// Megatron-LM's validate_layer_layout (with MTP): "decoder layers must be placed before MTP
// layers". An MTP depth predicts from the main model's last hidden state.
TEST(LayoutResolve, MtpComesAfterEveryDecoderLayer) {
  const ModelSpec m = model("deepseek-v3", 1);
  ParallelConfig p = nvidia_recipe();
  p.pipeline_layout = "Emt|(tt|)*30L";  // 32 stages, 61 t, the m before them
  EXPECT_THROW((void)resolve_layout(m, p), InputError);
}

// A layout string with a degree out of range (fuzz_layout_string: pp 0 divided the string's
// stage count to infer vpp) is refused by the degree's own rule, not a division by zero.
TEST(LayoutResolve, LayoutStringWithABadPipelineDegreeNamesTheDegree) {
  const ModelSpec m = model("deepseek-v3", 1);
  for (const std::int64_t pp : {std::int64_t{0}, std::int64_t{-4}, std::int64_t{1} << 62}) {
    SCOPED_TRACE(pp);
    ParallelConfig p = nvidia_recipe();
    p.pp = pp;
    p.pipeline_layout = "Et|(tt|)*30mL";
    const std::string msg = error_of([&] { (void)resolve_layout(m, p); });
    EXPECT_NE(msg.find("--pp"), std::string::npos) << msg;
  }
  ParallelConfig p = nvidia_recipe();
  p.pp = 0;
  p.schedule = Schedule::dualpipe;
  p.pipeline_layout = "E|L";
  EXPECT_NE(error_of([&] { (void)resolve_layout(m, p); }).find("--pp"), std::string::npos);
}

}  // namespace
