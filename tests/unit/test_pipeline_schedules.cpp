// Pipeline schedules (issue 3), at the library level: the micro-batches each rank holds under
// every schedule (1F1B, ZB-H1, GPipe, Megatron's interleaved warm-up, DualPipe, DualPipeV),
// restated by hand, and the schedule names.
// Expected values come from the rules as the issue and Megatron-LM state them, never from
// moemem's own output.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "moemem/errors.hpp"
#include "moemem/pipeline.hpp"
#include "unit/pipeline_helpers.hpp"

namespace {

using namespace moemem;
using moemem::test::pipeline::I64s;

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

// The interleaved count without shortcuts: Megatron-Core's schedule table walked forward by
// forward (forward k runs chunk (k % (pp*v)) / pp in whole groups, the last group's remainder
// after them; backward j runs chunk v - 1 - that of forward j), the counts kept at the heaviest
// instant after a forward. in_flight counts in closed form and walks without dividing; both
// must agree on every rank, weight pattern and micro-batch count, remainders included.
I64s interleaved_by_steps(std::int64_t rank, std::int64_t pp, std::int64_t v, std::int64_t m,
                          const std::vector<std::uint64_t>& w) {
  const std::int64_t full = m / pp * pp * v, rem = m % pp, total = m * v;
  const auto chunk = [&](std::int64_t k) { return k < full ? (k % (pp * v)) / pp : (k - full) / rem; };
  const std::int64_t warmup = std::min((pp - rank - 1) * 2 + (v - 1) * pp, total);
  I64s held(static_cast<std::size_t>(v), 0);
  for (std::int64_t k = 0; k < warmup; ++k) ++held[static_cast<std::size_t>(chunk(k))];
  I64s best = held;
  std::uint64_t best_w = 0;
  bool first = true;
  for (std::int64_t j = 0; warmup + j < total; ++j) {
    ++held[static_cast<std::size_t>(chunk(warmup + j))];
    std::uint64_t sum = 0;
    for (std::size_t c = 0; c < held.size(); ++c) sum += static_cast<std::uint64_t>(held[c]) * w[c];
    if (first || sum > best_w) {
      best = held;
      best_w = sum;
      first = false;
    }
    --held[static_cast<std::size_t>(v - 1 - chunk(j))];
  }
  return best;
}

TEST(ScheduleInFlight, InterleavedClosedFormMatchesTheScheduleWalkedStepByStep) {
  std::uint64_t seed = 7;
  const auto next = [&] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return seed >> 33;
  };
  int compared = 0;
  for (const std::int64_t pp : {2, 3, 4, 8}) {
    for (const std::int64_t v : {2, 3, 4}) {
      for (const std::int64_t m : {pp, pp + 1, 2 * pp, 3 * pp + 2, 5 * pp}) {
        for (std::int64_t r = 0; r < pp; ++r) {
          for (int pattern = 0; pattern < 4; ++pattern) {
            std::vector<std::uint64_t> w(static_cast<std::size_t>(v), 1);
            if (pattern > 0) {
              for (auto& x : w) x = 1 + next() % 50;
            }
            SCOPED_TRACE(fmt::format("pp {} v {} m {} rank {} weights {}", pp, v, m, r, fmt::join(w, ",")));
            EXPECT_EQ(in_flight(Schedule::interleaved, r, pp, v, m, w).per_chunk, interleaved_by_steps(r, pp, v, m, w));
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, (2 + 3 + 4 + 8) * 3 * 5 * 4);  // ranks x v x m x weight patterns
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

}  // namespace

namespace {

// Interleaved 1F1B past a few groups of pp micro-batches repeats until the last group's remainder:
// a step of 2^40 x pp + 3 micro-batches holds what one of 5 x pp + 3 holds (the latter walked in
// full), per chunk and with chunks of different weights, and its count neither overflows nor
// takes time.
TEST(PipelineSchedules, InterleavedWithHugeMicroBatchCountsHoldsWhatAFewGroupsHold) {
  using moemem::in_flight;
  using moemem::Schedule;
  const std::vector<std::uint64_t> weights = {5, 3, 7, 2};
  for (const std::int64_t pp : {2, 4, 8}) {
    for (std::int64_t rank = 0; rank < pp; ++rank) {
      for (const std::int64_t rem : {0, 1, 3}) {
        if (rem >= pp) continue;
        const std::int64_t few = 5 * pp + rem, huge = (std::int64_t{1} << 40) * pp + rem;
        EXPECT_EQ(in_flight(Schedule::interleaved, rank, pp, 4, huge).per_chunk,
                  in_flight(Schedule::interleaved, rank, pp, 4, few).per_chunk)
            << pp << " " << rank << " " << rem;
        EXPECT_EQ(in_flight(Schedule::interleaved, rank, pp, 4, huge, weights).per_chunk,
                  in_flight(Schedule::interleaved, rank, pp, 4, few, weights).per_chunk)
            << pp << " " << rank << " " << rem;
      }
    }
  }
}

}  // namespace
