// Pipeline parameters over random layouts (issue 3): stage parameters add up to the model total,
// each stage holds exactly the device shards of the tensors of its chunks, and random Megatron
// layout strings add up too.
// Expected values come from the rules as the issue and Megatron-LM state them, never from
// moemem's own output.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "moemem/analyze.hpp"
#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/pipeline.hpp"
#include "moemem/profile.hpp"
#include "unit/pipeline_helpers.hpp"

namespace {

using namespace moemem;
using moemem::test::pipeline::I64s;
using moemem::test::pipeline::idx;
using moemem::test::pipeline::megatron_training;
using moemem::test::pipeline::model;
using moemem::test::pipeline::par;
using moemem::test::pipeline::u;

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

// Micro-batches per step: 1, 3 or 32; under DualPipe(V) 2 x pp or 4 x pp (its step() needs an
// even count of at least 2 x pp).
std::int64_t microbatches(std::mt19937& rng, const ParallelConfig& p) {
  if (p.schedule == Schedule::dualpipe || p.schedule == Schedule::dualpipev) return p.pp * pick(rng, {2, 4});
  return pick(rng, {1, 3, 32});
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
  p.schedule = kSchedules[std::uniform_int_distribution<std::size_t>(0, std::size(kSchedules) - 1)(rng)];
  // Model chunks need pipeline parallelism (pp 1 with vpp > 1 is refused).
  p.pp = std::uniform_int_distribution<std::int64_t>(p.schedule == Schedule::interleaved ? 2 : 1, 16)(rng);
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
    t.global_batch = p.dp * microbatches(rng, p);
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
    t.global_batch = dp * microbatches(rng, p);
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
    const std::int64_t pp = pick(rng, {1, 2, 4, 8, 16});
    const std::int64_t vpp = pp == 1 ? 1 : pick(rng, {1, 2, 3, 4});  // model chunks need pp > 1
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
