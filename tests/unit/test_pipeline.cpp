// Pipeline layouts and schedules (issue 3), at the library level:
//   - the micro-batches each rank holds under every schedule (1F1B, ZB-H1, GPipe, Megatron's
//     interleaved warm-up, DualPipe, DualPipeV), restated by hand;
//   - Megatron's layout string: the parse, the chunks it gives and the rank that holds each,
//     and malformed strings pointing at the offending position;
//   - Megatron's other splits (first/last stage layers, embedding/loss counted as a layer);
//   - the megatron profile's logits terms (b*s*padded_vocab/tp in the loss's dtype);
//   - properties over random layouts: stage parameters add up to the model total, and each
//     stage holds exactly the device shards of the tensors of its chunks.
// Expected values come from the rules as the issue and Megatron-LM state them, never from
// moemem's own output.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/pipeline.hpp"
#include "moemem/profile.hpp"
#include "moemem/analyze.hpp"

namespace {

using namespace moemem;

std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }
std::size_t idx(std::int64_t v) { return static_cast<std::size_t>(v); }

using I64s = std::vector<std::int64_t>;

ParallelConfig par(std::int64_t tp, std::int64_t pp, std::int64_t dp, std::int64_t ep, bool sp = false,
                   std::int64_t etp = 1) {
  ParallelConfig p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.ep = ep;
  p.etp = etp;
  p.sp = sp;
  return p;
}

ModelSpec model(const std::string& preset, std::int64_t mtp) {
  ModelSpec m = load_model(preset);
  set_mtp_layers(m, mtp);
  return m;
}

TrainingConfig megatron_training() {
  TrainingConfig t;
  t.precision = megatron_profile().default_precision;
  t.overhead = OverheadPoint::none;
  return t;
}

// What a thrown InputError says, or "" when nothing is thrown.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Schedules: micro-batches in flight per rank.

// 1F1B (Megatron's non-interleaved schedule): rank p runs pp - p - 1 warm-up forwards and one
// more before its first backward, so it holds min(pp - p, m). ZB-H1 keeps 1F1B's activation
// memory (Qi et al., "Zero Bubble Pipeline Parallelism", H1 = 1F1B's peak).
TEST(ScheduleInFlight, OneFOneBAndZbH1HoldPpMinusRankCappedAtM) {
  for (const Schedule s : {Schedule::one_f_one_b, Schedule::zb_h1}) {
    for (std::int64_t p = 0; p < 16; ++p) {
      SCOPED_TRACE(std::string(name_of(s)) + " rank " + std::to_string(p));
      const InFlight full = in_flight(s, p, 16, 1, 32);
      ASSERT_EQ(full.per_chunk.size(), 1u);
      EXPECT_EQ(full.per_chunk[0], 16 - p);
      EXPECT_EQ(full.total, 16 - p);
      EXPECT_EQ(in_flight(s, p, 16, 1, 16).total, 16 - p);
      EXPECT_EQ(in_flight(s, p, 16, 1, 4).total, std::min<std::int64_t>(16 - p, 4));
      EXPECT_EQ(in_flight(s, p, 16, 1, 1).total, 1);
      EXPECT_EQ(in_flight(s, p, 16, 1, std::nullopt).total, 16 - p);  // enough to fill the pipeline
    }
  }
}

// GPipe runs every forward before any backward: all m micro-batches on every rank.
TEST(ScheduleInFlight, GPipeHoldsEveryMicroBatch) {
  for (std::int64_t p = 0; p < 8; ++p) {
    EXPECT_EQ(in_flight(Schedule::gpipe, p, 8, 1, 32).total, 32);
    EXPECT_EQ(in_flight(Schedule::gpipe, p, 8, 1, 3).total, 3);
  }
}

// Megatron-Core's get_pp_rank_microbatches for the interleaved schedule (microbatch group
// size = pp): warm-up (pp - r - 1) * 2 + (v - 1) * pp forwards, capped at m * v (current
// Megatron-Core has no all-warm-up branch for m == pp); the steady state runs one more forward
// before the first backward. Forward k
// runs model chunk (k % (pp*v)) / pp. pp 8, v 4, m 32: rank r holds 39 - 2r chunk forwards.
TEST(ScheduleInFlight, InterleavedFollowsMegatronsWarmup) {
  for (std::int64_t r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::int64_t expected = std::min<std::int64_t>((8 - r - 1) * 2 + (4 - 1) * 8 + 1, 32 * 4);
    ASSERT_EQ(expected, 39 - 2 * r);
    const InFlight f = in_flight(Schedule::interleaved, r, 8, 4, 32);
    ASSERT_EQ(f.per_chunk.size(), 4u);
    EXPECT_EQ(f.total, expected);
    EXPECT_EQ(std::accumulate(f.per_chunk.begin(), f.per_chunk.end(), std::int64_t{0}), expected);
    EXPECT_EQ(in_flight(Schedule::interleaved, r, 8, 4, 16).total, expected);
    EXPECT_EQ(in_flight(Schedule::interleaved, r, 8, 4, std::nullopt).total, expected);
    // m == pp: ranks 0-3 run all m * v = 32 forwards as warm-up, the later ones hold warm-up + 1.
    const InFlight few = in_flight(Schedule::interleaved, r, 8, 4, 8);
    EXPECT_EQ(few.total, std::min<std::int64_t>(expected, 32));
  }
  // Rank 0: forwards 0-38; 0-7 chunk 0, 8-15 chunk 1, 16-23 chunk 2, 24-31 chunk 3, 32-38 chunk 0.
  EXPECT_EQ(in_flight(Schedule::interleaved, 0, 8, 4, 32).per_chunk, (I64s{15, 8, 8, 8}));
  // Rank 3: 33 forwards, the 33rd (k = 32) back on chunk 0.
  EXPECT_EQ(in_flight(Schedule::interleaved, 3, 8, 4, 32).per_chunk, (I64s{9, 8, 8, 8}));
  // Rank 7: warm-up (0 + 24) fills chunks 0-2, the first steady forward (k = 24) is chunk 3.
  EXPECT_EQ(in_flight(Schedule::interleaved, 7, 8, 4, 32).per_chunk, (I64s{8, 8, 8, 1}));
  // pp 16, v 2, m 64: rank 0 warm-up 30 + 16 = 46, holds 47; rank 15 warm-up 16, holds 17.
  EXPECT_EQ(in_flight(Schedule::interleaved, 0, 16, 2, 64).total, 47);
  EXPECT_EQ(in_flight(Schedule::interleaved, 0, 16, 2, 64).per_chunk, (I64s{31, 16}));
  EXPECT_EQ(in_flight(Schedule::interleaved, 15, 16, 2, 64).per_chunk, (I64s{16, 1}));
}

// Megatron CI's gpt3_7b_tp1_pp4_memory_speed: pp 4, one layer per virtual stage (v = 8), m = 4.
// The last rank warms up (v - 1) * pp = 28 forwards (chunks 0-6, four micro-batches each); its
// first steady forward runs chunk 7, whose backward comes next: chunk 7 (the loss) never holds
// more than one micro-batch, whatever it weighs.
TEST(ScheduleInFlight, InterleavedLastChunkHoldsOneMicroBatch) {
  EXPECT_EQ(in_flight(Schedule::interleaved, 3, 4, 8, 4).per_chunk, (I64s{4, 4, 4, 4, 4, 4, 4, 1}));
  const std::vector<std::uint64_t> heavy_loss = {1, 1, 1, 1, 1, 1, 1, 100};
  EXPECT_EQ(in_flight(Schedule::interleaved, 3, 4, 8, 4, heavy_loss).per_chunk, (I64s{4, 4, 4, 4, 4, 4, 4, 1}));
  // pp 2, v 2, m 4, rank 1: warm-up 2 (chunk 0, mb 0-1); steady: F c0 mb... the table is
  // (0,c0) (1,c0) (0,c1) (1,c1) (2,c0) (3,c0) (2,c1) (3,c1); backward k runs chunk 1 - chunk(k).
  // After F2 (c1): {2, 1}; B0 frees c1 -> {2, 0}; F3 (c1): {2, 1}; B1 (c1) -> {2, 0}; F4 (c0):
  // {3, 0}; B2 (c0) -> {2, 0}; F5 (c0) {3, 0}. Counts peak at 3 either way; a heavy chunk 1
  // picks the instant {2, 1}, a heavy chunk 0 the instant {3, 0}.
  EXPECT_EQ(in_flight(Schedule::interleaved, 1, 2, 2, 4, std::vector<std::uint64_t>{1, 5}).per_chunk, (I64s{2, 1}));
  EXPECT_EQ(in_flight(Schedule::interleaved, 1, 2, 2, 4, std::vector<std::uint64_t>{5, 1}).per_chunk, (I64s{3, 0}));
  // m not a multiple of pp: the last group holds the remainder (pp 2, v 2, m 3, rank 1: table
  // (0,c0) (1,c0) (0,c1) (1,c1) (2,c0) (2,c1)).
  EXPECT_EQ(in_flight(Schedule::interleaved, 1, 2, 2, 3).total, 3);
}

// DeepSeek-V3 report, Table 2, and deepseek-ai/DualPipe's README ("based on the same number of
// PP stages"): DualPipe holds PP + 1 micro-batches of one stage per device on PP devices;
// DualPipeV the same PP + 1 on PP/2 devices, i.e. 2pp + 1 chunk micro-batches for moemem's pp
// devices. (Both schedules require m >= 2 x devices.)
TEST(ScheduleInFlight, DualPipeAndDualPipeVPublishedCounts) {
  for (std::int64_t r = 0; r < 16; ++r) {
    EXPECT_EQ(in_flight(Schedule::dualpipe, r, 16, 2, 32).total, 17);
    EXPECT_EQ(in_flight(Schedule::dualpipe, r, 16, 2, 64).total, 17);
    EXPECT_EQ(in_flight(Schedule::dualpipe, r, 16, 2, std::nullopt).total, 17);
  }
  for (std::int64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(in_flight(Schedule::dualpipev, r, 8, 2, 16).total, 17);
    EXPECT_EQ(in_flight(Schedule::dualpipev, r, 8, 2, 32).total, 17);
    EXPECT_EQ(in_flight(Schedule::dualpipev, r, 8, 2, std::nullopt).total, 17);
  }
}

TEST(ScheduleInFlight, NamesRoundTrip) {
  for (const Schedule s : {Schedule::one_f_one_b, Schedule::interleaved, Schedule::dualpipe, Schedule::dualpipev,
                           Schedule::gpipe, Schedule::zb_h1}) {
    EXPECT_EQ(parse_schedule(name_of(s)), s);
  }
  EXPECT_THROW((void)parse_schedule("1F1B-interleaved"), InputError);
}

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

// ---------------------------------------------------------------------------------------------
// Megatron's other splits.

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

// ---------------------------------------------------------------------------------------------
// Logits of the loss and of each MTP depth: b x s x padded_vocab/tp in the loss's dtype.

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

// ---------------------------------------------------------------------------------------------
// Properties over random layouts.

// The chunks (model order) of each rank, by schedule, restated from the issue and DualPipe.
std::vector<I64s> hand_rank_chunks(Schedule s, std::int64_t pp, std::int64_t vpp) {
  std::vector<I64s> out(idx(pp));
  for (std::int64_t r = 0; r < pp; ++r) {
    switch (s) {
      case Schedule::dualpipe: out[idx(r)] = {r, pp - 1 - r}; break;
      case Schedule::dualpipev: out[idx(r)] = {r, 2 * pp - 1 - r}; break;
      case Schedule::interleaved:
        for (std::int64_t v = 0; v < vpp; ++v) out[idx(r)].push_back(r + v * pp);
        break;
      default: out[idx(r)] = {r}; break;
    }
  }
  return out;
}

bool holds(const I64s& chunks, std::int64_t c) { return std::find(chunks.begin(), chunks.end(), c) != chunks.end(); }

std::int64_t chunk_of_tensor(const Tensor& t, const Layout& l, const ModelSpec& m) {
  for (std::size_t c = 0; c < l.chunks.size(); ++c) {
    const Chunk& ch = l.chunks[c];
    const auto ci = static_cast<std::int64_t>(c);
    switch (t.placement) {
      case Placement::embedding:
        if (ch.embedding) return ci;
        break;
      case Placement::head:
        if (ch.loss) return ci;
        break;
      case Placement::decoder:
        if (t.layer >= ch.first_layer && t.layer < ch.first_layer + ch.num_layers) return ci;
        break;
      case Placement::mtp: {
        const std::int64_t depth = t.layer - m.num_layers;
        if (depth >= ch.first_mtp && depth < ch.first_mtp + ch.mtp_depths) return ci;
        break;
      }
    }
  }
  ADD_FAILURE() << "no chunk for " << t.name;
  return 0;
}

std::int64_t find_chunk(const Layout& l, bool embedding) {
  for (std::size_t c = 0; c < l.chunks.size(); ++c) {
    if (embedding ? l.chunks[c].embedding : l.chunks[c].loss) return static_cast<std::int64_t>(c);
  }
  return -1;
}

std::uint64_t ceil_share(std::uint64_t n, std::int64_t k) { return (n + u(k) - 1) / u(k); }

// Elements of `t` on rank 0 of every group under Megatron's TP rules as the issue states them:
// MLA down-projections (q_a, kv_a with the RoPE key) replicated; up-projections (q_b with its
// RoPE rows, kv_b) and q/k/v column-parallel, o_proj row-parallel; dense and shared-expert MLPs
// fc1 column / fc2 row; MTP's eh_proj column-parallel; embedding and heads vocab-parallel over
// the padded vocabulary; routed experts whole over ep, each expert's FFN dimension over etp;
// router, norms and the remaining biases replicated. Rank 0 holds the ceiling.
std::uint64_t hand_device_params(const Tensor& t, std::int64_t tp, std::int64_t ep, std::int64_t etp,
                                 std::int64_t vocab_rows) {
  const std::uint64_t rows = u(t.rows), cols = u(t.cols), copies = u(t.copies);
  if (t.is_routed_expert) {
    const std::uint64_t experts = ceil_share(copies, ep);
    return t.role == Role::expert_down ? experts * rows * ceil_share(cols, etp) : experts * ceil_share(rows, etp) * cols;
  }
  switch (t.role) {
    case Role::q_up:
    case Role::q_rope:
    case Role::k_up:
    case Role::v_up:
    case Role::q_proj:
    case Role::k_proj:
    case Role::v_proj:
    case Role::q_bias:
    case Role::k_bias:
    case Role::v_bias:
    case Role::mlp_gate:
    case Role::mlp_up:
    case Role::mlp_gate_bias:
    case Role::mlp_up_bias:
    case Role::shared_gate:
    case Role::shared_up:
    case Role::mtp_eh_proj: return ceil_share(rows, tp) * cols * copies;
    case Role::o_proj:
    case Role::mlp_down:
    case Role::shared_down: return rows * ceil_share(cols, tp) * copies;
    case Role::embedding:
    case Role::output_head:
    case Role::mtp_embedding:
    case Role::mtp_output_head: return ceil_share(std::max(rows, u(vocab_rows)), tp) * cols;
    default: return rows * cols * copies;
  }
}

struct Preset {
  const char* name;
  std::int64_t mtp;
};
const Preset kPresets[] = {{"deepseek-v3", 1}, {"mixtral-8x7b", 0}, {"qwen3-30b-a3b", 0}, {"llama-3.1-70b", 0}};
const Schedule kSchedules[] = {Schedule::one_f_one_b, Schedule::interleaved, Schedule::gpipe,
                               Schedule::zb_h1,       Schedule::dualpipe,    Schedule::dualpipev};

std::int64_t pick(std::mt19937& rng, const I64s& from) {
  return from[std::uniform_int_distribution<std::size_t>(0, from.size() - 1)(rng)];
}

// A random split of `layers` into `n` counts (zeros allowed), summing to `layers`.
I64s random_split(std::mt19937& rng, std::int64_t layers, std::int64_t n) {
  I64s cuts;
  for (std::int64_t i = 0; i + 1 < n; ++i) cuts.push_back(std::uniform_int_distribution<std::int64_t>(0, layers)(rng));
  std::sort(cuts.begin(), cuts.end());
  I64s out;
  std::int64_t prev = 0;
  for (const auto c : cuts) {
    out.push_back(c - prev);
    prev = c;
  }
  out.push_back(layers - prev);
  return out;
}

// Random pipeline settings: pp, schedule (with vpp for interleaved) and, one time in three, a
// random explicit split.
ParallelConfig random_pipeline(std::mt19937& rng, const ModelSpec& m, ParallelConfig p) {
  p.pp = std::uniform_int_distribution<std::int64_t>(1, 16)(rng);
  p.schedule = kSchedules[std::uniform_int_distribution<std::size_t>(0, std::size(kSchedules) - 1)(rng)];
  p.vpp = p.schedule == Schedule::interleaved ? std::uniform_int_distribution<std::int64_t>(2, 4)(rng) : 1;
  if (std::uniform_int_distribution<int>(0, 2)(rng) == 0) {
    const std::int64_t n = p.schedule == Schedule::interleaved ? p.pp * p.vpp
                           : p.schedule == Schedule::dualpipev ? 2 * p.pp
                                                               : p.pp;
    if (n <= m.num_layers) p.layers_per_stage = random_split(rng, m.num_layers, n);
  }
  return p;
}

// With tp = ep = etp = 1 a device holds whole tensors, so the stages add up to the inventory,
// less the MTP copies of the embedding and head that a rank already holding the main embedding
// or head does not keep twice. With the default and explicit splits the MTP depths sit in the
// last chunk with the loss, so the head copy is always the main head's; the embedding copy is
// the main embedding's when a rank holding the last chunk also holds the first: pp = 1 for
// 1F1B/GPipe/ZB-H1/interleaved, always for DualPipe (ranks 0 and pp-1 both hold chunks 0 and
// pp-1) and DualPipeV (rank 0 holds chunks 0 and 2pp-1). DualPipe holds every chunk twice.
TEST(PipelineParamsProperty, StagesAddUpToTheModelOverRandomLayouts) {
  std::mt19937 rng(20250403);
  int valid = 0, odd_dualpipe = 0;
  for (int it = 0; it < 200; ++it) {
    const Preset& preset = kPresets[static_cast<std::size_t>(it) % std::size(kPresets)];
    const ModelSpec m = model(preset.name, preset.mtp);
    const Inventory inv = build_inventory(m);
    ParallelConfig p = random_pipeline(rng, m, par(1, 1, pick(rng, {1, 2, 8}), 1));
    SCOPED_TRACE(std::string(preset.name) + " pp " + std::to_string(p.pp) + " vpp " + std::to_string(p.vpp) + " " +
                 std::string(name_of(p.schedule)) + (p.layers_per_stage.empty() ? "" : " explicit split"));
    std::optional<Layout> l;
    try {
      l = resolve_layout(m, p);
    } catch (const InputError&) {
      if (p.schedule == Schedule::dualpipe && p.pp % 2 == 1) ++odd_dualpipe;
      continue;
    }
    EXPECT_FALSE(p.schedule == Schedule::dualpipe && p.pp % 2 == 1) << "odd pp accepted for dualpipe";
    ++valid;
    TrainingConfig t = megatron_training();
    t.vocab_multiple = 1;
    t.global_batch = p.dp * pick(rng, {1, 3, 32});  // micro-batches per step: 1, 3 or 32
    const MemoryReport r = analyze(m, inv, megatron_profile(), *l, t);
    std::uint64_t mtp_embedding = 0, mtp_head = 0;
    for (const auto& tensor : inv.tensors) {
      if (tensor.role == Role::mtp_embedding) mtp_embedding += tensor.params().value();
      if (tensor.role == Role::mtp_output_head) mtp_head += tensor.params().value();
    }
    EXPECT_EQ(r.total_params.value(), inv.total().value());
    const bool embedding_shared = p.pp == 1 || p.schedule == Schedule::dualpipe || p.schedule == Schedule::dualpipev;
    const std::uint64_t once = inv.total().value() - mtp_head - (embedding_shared ? mtp_embedding : 0);
    const std::uint64_t expected = (p.schedule == Schedule::dualpipe ? 2 : 1) * once;
    std::uint64_t sum = 0, expert = 0;
    for (const auto& s : r.stages) {
      sum += (s.params.non_expert + s.params.expert).value();
      expert += s.params.expert.value();
    }
    EXPECT_EQ(sum, expected);
    // The expert part (routed experts, tp = ep = 1: all of them) likewise.
    std::uint64_t routed = 0;
    for (const auto& tensor : inv.tensors) {
      if (tensor.is_routed_expert) routed += tensor.params().value();
    }
    EXPECT_EQ(expert, (p.schedule == Schedule::dualpipe ? 2 : 1) * routed);
    // Every rank has the chunks the schedule gives it.
    EXPECT_EQ(l->rank_chunks, hand_rank_chunks(l->config.schedule, p.pp, p.vpp));
    for (const auto& s : r.stages) EXPECT_EQ(s.model_chunks, static_cast<std::int64_t>(s.chunks.size()));
  }
  EXPECT_GE(valid, 100);
  EXPECT_GT(odd_dualpipe, 0);  // the odd-pp refusal was exercised
}

// With random tp/ep/etp and the vocabulary padded or not, each stage holds exactly the rank-0
// shards (restated by hand above) of the tensors of the chunks it holds, MTP copies of the
// embedding/head excepted where the rank holds the main ones; routed experts are the expert
// part. Layouts from random layout strings are included via explicit splits and schedules.
TEST(PipelineParamsProperty, EachStageHoldsTheShardsOfItsChunks) {
  std::mt19937 rng(7);
  int valid = 0;
  for (int it = 0; it < 200; ++it) {
    const Preset& preset = kPresets[static_cast<std::size_t>(it) % std::size(kPresets)];
    const ModelSpec m = model(preset.name, preset.mtp);
    const Inventory inv = build_inventory(m);
    const std::int64_t tp = pick(rng, {1, 2, 4, 8});
    const std::int64_t ep = m.is_moe() ? pick(rng, {1, 2, 4, 8}) : 1;
    const std::int64_t etp = m.is_moe() ? pick(rng, {1, 2, 4}) : 1;
    const std::int64_t dp = ep * etp * pick(rng, {1, 2});
    ParallelConfig p = random_pipeline(rng, m, par(tp, 1, dp, ep, std::uniform_int_distribution<int>(0, 1)(rng) == 1, etp));
    TrainingConfig t = megatron_training();
    const std::int64_t multiple = pick(rng, {1, 128});
    t.vocab_multiple = multiple;
    t.global_batch = dp * pick(rng, {1, 3, 32});
    SCOPED_TRACE(std::string(preset.name) + " tp " + std::to_string(tp) + " ep " + std::to_string(ep) + " etp " +
                 std::to_string(etp) + " dp " + std::to_string(dp) + " pp " + std::to_string(p.pp) + " vpp " +
                 std::to_string(p.vpp) + " " + std::string(name_of(p.schedule)) + " vocab multiple " +
                 std::to_string(multiple));
    std::optional<Layout> l;
    try {
      l = resolve_layout(m, p);
    } catch (const InputError&) {
      continue;
    }
    ++valid;
    const MemoryReport r = analyze(m, inv, megatron_profile(), *l, t);
    const std::int64_t unit = multiple * tp;
    const std::int64_t vocab_rows = (m.vocab + unit - 1) / unit * unit;
    EXPECT_EQ(r.padded_vocab, vocab_rows);
    const auto ranks = hand_rank_chunks(l->config.schedule, p.pp, p.vpp);
    const std::int64_t embedding_chunk = find_chunk(*l, true), loss_chunk = find_chunk(*l, false);
    std::vector<std::uint64_t> dense(idx(p.pp), 0), expert(idx(p.pp), 0);
    for (const auto& tensor : inv.tensors) {
      const std::int64_t c = chunk_of_tensor(tensor, *l, m);
      const std::uint64_t n = hand_device_params(tensor, tp, ep, etp, vocab_rows);
      for (std::int64_t rank = 0; rank < p.pp; ++rank) {
        const auto& held = ranks[idx(rank)];
        if (!holds(held, c)) continue;
        if (tensor.role == Role::mtp_embedding && holds(held, embedding_chunk)) continue;
        if (tensor.role == Role::mtp_output_head && holds(held, loss_chunk)) continue;
        (tensor.is_routed_expert ? expert : dense)[idx(rank)] += n;
      }
    }
    ASSERT_EQ(r.stages.size(), idx(p.pp));
    for (std::size_t s = 0; s < r.stages.size(); ++s) {
      EXPECT_EQ(r.stages[s].params.non_expert.value(), dense[s]) << "stage " << s;
      EXPECT_EQ(r.stages[s].params.expert.value(), expert[s]) << "stage " << s;
    }
  }
  EXPECT_GE(valid, 100);
}

// The same over random Megatron layout strings that Megatron-LM itself accepts: E first, L
// last, the model's 61 t spread at random over the stages up to the MTP stage, m after every t
// and in the last virtual stage of its rank (validate_layer_layout). The chunks follow the
// string, and the stages add up to the inventory less the MTP copies that the MTP's rank
// already holds (the embedding on rank 0, the head on rank pp-1).
TEST(PipelineParamsProperty, RandomLayoutStringsAddUp) {
  std::mt19937 rng(99);
  const ModelSpec m = model("deepseek-v3", 1);
  const Inventory inv = build_inventory(m);
  std::uint64_t mtp_embedding = 0, mtp_head = 0;
  for (const auto& tensor : inv.tensors) {
    if (tensor.role == Role::mtp_embedding) mtp_embedding += tensor.params().value();
    if (tensor.role == Role::mtp_output_head) mtp_head += tensor.params().value();
  }
  int valid = 0;
  for (int it = 0; it < 120; ++it) {
    const std::int64_t pp = pick(rng, {1, 2, 4, 8, 16}), vpp = pick(rng, {1, 2, 3, 4});
    const std::int64_t n = pp * vpp;
    const std::int64_t mtp_stage = std::uniform_int_distribution<std::int64_t>(n - pp, n - 1)(rng);
    I64s split = random_split(rng, 61, mtp_stage + 1);
    split.resize(idx(n), 0);
    std::string text;
    for (std::int64_t s = 0; s < n; ++s) {
      if (s > 0) text += "|";
      if (s == 0) text += "E";
      if (split[idx(s)] > 0) text += "(t)*" + std::to_string(split[idx(s)]);
      if (s == mtp_stage) text += "m";
      if (s == n - 1) text += "L";
    }
    SCOPED_TRACE(text + " pp " + std::to_string(pp) + " vpp " + std::to_string(vpp));
    ParallelConfig p = par(1, pp, 1, 1);
    p.vpp = vpp;
    p.pipeline_layout = text;
    const Layout l = resolve_layout(m, p);  // always valid
    ++valid;
    ASSERT_EQ(l.chunks.size(), idx(n));
    for (std::int64_t c = 0; c < n; ++c) {
      EXPECT_EQ(l.chunks[idx(c)].num_layers, split[idx(c)]);
      EXPECT_EQ(l.chunks[idx(c)].mtp_depths, c == mtp_stage ? 1 : 0);
    }
    TrainingConfig t = megatron_training();
    t.vocab_multiple = 1;
    const MemoryReport r = analyze(m, inv, megatron_profile(), l, t);
    // Rank of the MTP chunk: mtp_stage % pp; it shares the embedding with rank 0 and the head
    // with rank (n-1) % pp = pp-1.
    const std::int64_t mtp_rank = mtp_stage % pp;
    const std::uint64_t expected = inv.total().value() - (mtp_rank == 0 ? mtp_embedding : 0) -
                                   (mtp_rank == pp - 1 ? mtp_head : 0);
    std::uint64_t sum = 0;
    for (const auto& s : r.stages) sum += (s.params.non_expert + s.params.expert).value();
    EXPECT_EQ(sum, expected);
  }
  EXPECT_EQ(valid, 120);
}

}  // namespace
