// Property tests: invariants that must hold for every preset and many layouts, anchored where
// possible to figures derived by hand from paper-method.md (never to moemem's own output).
//   - shards of a tensor add up to the tensor, for every split and uneven degrees;
//   - ZeRO 3 <= 2 <= 1 <= none, strictly when a ZeRO group has more than one rank;
//   - full recomputation <= none; activations grow with micro-batch and sequence length;
//   - stage parameters fold back to the model total, and TP/EP replication is consistent;
//   - the default pipeline split.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"
#include "moemem/analyze.hpp"
#include "moemem/sharding.hpp"

namespace {

using namespace moemem;

std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }
std::size_t idx(std::int64_t v) { return static_cast<std::size_t>(v); }

ModelSpec model_without_mtp(const std::string& preset) {
  ModelSpec m = load_model(preset);
  set_mtp_layers(m, 0);
  return m;
}

TrainingConfig paper_training() {
  TrainingConfig t;
  t.precision = paper_profile().default_precision;
  t.overhead = OverheadPoint::none;
  return t;
}

ParallelConfig layout(std::int64_t tp, std::int64_t pp, std::int64_t dp, std::int64_t ep, bool sp = false,
                      std::int64_t cp = 1, std::int64_t etp = 1) {
  ParallelConfig p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.cp = cp;
  p.ep = ep;
  p.etp = etp;
  p.sp = sp;
  return p;
}

// DeepSeek-V3 as the reference analyses it: TP 2, PP 16, DP 32, EP 8, SP, no MTP.
ParallelConfig paper_layout() { return layout(2, 16, 32, 8, true); }

MemoryReport run(const ModelSpec& m, const ParallelConfig& p, const TrainingConfig& t) {
  const Inventory inv = build_inventory(m);
  return analyze(m, inv, paper_profile(), resolve_layout(m, p), t);
}

Bytes static_bytes(const StageReport& s) { return s.bytes.weights + s.bytes.gradients + s.bytes.optimizer; }

// ---------------------------------------------------------------------------------------------
// Shards add up.

struct Degrees {
  std::int64_t tp, ep, etp;
};
// Even and deliberately uneven degrees (none of 3, 5, 7, 11 divides a power-of-two dimension).
const std::vector<Degrees> kDegrees = {{1, 1, 1}, {2, 8, 1}, {3, 5, 3}, {7, 3, 2}, {4, 16, 4}, {5, 7, 11}, {8, 1, 7}};
const TpSplit kSplits[] = {TpSplit::replicated, TpSplit::column, TpSplit::row, TpSplit::vocab};

TEST(ShardProperty, ShardsOfEveryTensorAddUpForEveryPresetAndDegree) {
  const auto presets = preset_names();
  ASSERT_GE(presets.size(), 3u);
  for (const auto& name : presets) {
    const Inventory inv = build_inventory(load_model(name));  // the config's MTP depth included
    ASSERT_FALSE(inv.tensors.empty()) << name;
    for (const auto& d : kDegrees) {
      ParallelConfig p;
      p.tp = d.tp;
      p.ep = d.ep;
      p.etp = d.etp;
      for (const auto& t : inv.tensors) {
        SCOPED_TRACE(name + " " + t.name + " [" + std::string(t.part) + "] tp " + std::to_string(d.tp) + " ep " +
                     std::to_string(d.ep) + " etp " + std::to_string(d.etp));
        const std::uint64_t whole = t.params().value();
        if (t.is_routed_expert) {
          std::uint64_t sum = 0, largest = 0, smallest = UINT64_MAX;
          for (std::int64_t e = 0; e < d.ep; ++e) {
            for (std::int64_t r = 0; r < d.etp; ++r) {
              const std::uint64_t s = shard_params(t, TpSplit::replicated, p, {0, e, r}).value();
              sum += s;
              largest = std::max(largest, s);
              smallest = std::min(smallest, s);
            }
          }
          // gpt-oss's expert down-projection bias (h values per expert) is whole on every etp
          // rank, as a row-parallel layer's bias; every other routed tensor is partitioned.
          EXPECT_EQ(sum, t.role == Role::expert_down_bias ? whole * static_cast<std::uint64_t>(d.etp) : whole);
          // Rank (0, 0) holds the largest shard: that is the device the report sizes.
          EXPECT_EQ(shard_params(t, TpSplit::replicated, p, {0, 0, 0}).value(), largest);
          EXPECT_LE(smallest, largest);
          continue;
        }
        for (const TpSplit split : kSplits) {
          std::uint64_t sum = 0, largest = 0, smallest = UINT64_MAX;
          for (std::int64_t r = 0; r < d.tp; ++r) {
            const std::uint64_t s = shard_params(t, split, p, {r, 0, 0}).value();
            sum += s;
            largest = std::max(largest, s);
            smallest = std::min(smallest, s);
          }
          if (split == TpSplit::replicated) {
            EXPECT_EQ(largest, whole);
            EXPECT_EQ(smallest, whole);
            EXPECT_EQ(sum, whole * u(d.tp));
            continue;
          }
          EXPECT_EQ(sum, whole) << "split " << static_cast<int>(split);
          EXPECT_EQ(shard_params(t, split, p, {0, 0, 0}).value(), largest);
          // Balanced: shards differ by at most one row (column/vocab) or one column (row).
          const std::uint64_t unit = split == TpSplit::row ? u(t.rows) * u(t.copies) : u(t.cols) * u(t.copies);
          EXPECT_LE(largest - smallest, unit) << "split " << static_cast<int>(split);
        }
      }
    }
  }
}

// Hand-computed uneven shards of DeepSeek-V3 tensors.
TEST(ShardProperty, UnevenShardsByHand) {
  const Inventory inv = build_inventory(model_without_mtp("deepseek-v3"));
  const auto find = [&](const std::string& name) -> const Tensor& {
    for (const auto& t : inv.tensors) {
      if (t.name == name) return t;
    }
    throw std::runtime_error("no tensor " + name);
  };
  // o_proj is 7168 x 16384; a row split over tp 3 gives 16384 = 5462 + 5461 + 5461 columns.
  const Tensor& o = find("layers.7.self_attn.o_proj.weight");
  ParallelConfig p;
  p.tp = 3;
  EXPECT_EQ(shard_params(o, TpSplit::row, p, {0, 0, 0}).value(), 7168u * 5462u);
  EXPECT_EQ(shard_params(o, TpSplit::row, p, {1, 0, 0}).value(), 7168u * 5461u);
  EXPECT_EQ(shard_params(o, TpSplit::row, p, {2, 0, 0}).value(), 7168u * 5461u);
  // The same split by rows (column-parallel): 7168 = 2390 + 2389 + 2389 rows of 16384.
  EXPECT_EQ(shard_params(o, TpSplit::column, p, {0, 0, 0}).value(), 2390u * 16384u);
  EXPECT_EQ(shard_params(o, TpSplit::column, p, {2, 0, 0}).value(), 2389u * 16384u);

  // down_proj of the 256 experts is 7168 x 2048 each. ep 7: 256 = 4 * 37 + 3 * 36 experts;
  // etp 11 splits the 2048 FFN columns as 2 * 187 + 9 * 186.
  const Tensor& down = find("layers.7.mlp.experts.*.down_proj.weight");
  p.ep = 7;
  p.etp = 11;
  EXPECT_EQ(shard_params(down, TpSplit::replicated, p, {0, 0, 0}).value(), 37u * 7168u * 187u);
  EXPECT_EQ(shard_params(down, TpSplit::replicated, p, {0, 3, 1}).value(), 37u * 7168u * 187u);
  EXPECT_EQ(shard_params(down, TpSplit::replicated, p, {0, 4, 2}).value(), 36u * 7168u * 186u);
  // gate_proj is 2048 x 7168 per expert: etp splits its rows.
  const Tensor& gate = find("layers.7.mlp.experts.*.gate_proj.weight");
  EXPECT_EQ(shard_params(gate, TpSplit::replicated, p, {0, 6, 10}).value(), 36u * 186u * 7168u);
}

// ---------------------------------------------------------------------------------------------
// ZeRO ordering.

struct NamedLayout {
  const char* model;
  ParallelConfig p;
};

std::vector<NamedLayout> zero_layouts() {
  return {
      {"deepseek-v3", paper_layout()},
      {"deepseek-v3", layout(1, 1, 1, 1)},           // nothing to shard over: all stages equal
      {"deepseek-v3", layout(8, 8, 1, 8)},           // dp 1 and edp = 8/8 = 1: all equal
      {"deepseek-v3", layout(1, 4, 16, 16)},         // edp 1, dp 16
      {"deepseek-v2", layout(4, 4, 2, 8, false, 2, 2)},  // cp 2: dense group 4, edp 16/16 = 1
      {"deepseek-v2-lite", layout(2, 3, 4, 4)},      // edp 2
  };
}

TEST(ZeroProperty, ShardingNeverGrowsAndShrinksWhenThereIsAGroup) {
  for (const auto& nl : zero_layouts()) {
    const ModelSpec m = model_without_mtp(nl.model);
    std::vector<MemoryReport> by_zero;
    for (int z = 0; z <= 3; ++z) {
      TrainingConfig t = paper_training();
      t.zero = z;
      by_zero.push_back(run(m, nl.p, t));
    }
    const auto& lay = by_zero[0].layout;
    const std::int64_t dense_group = nl.p.dp * nl.p.cp;
    for (std::size_t s = 0; s < by_zero[0].stages.size(); ++s) {
      SCOPED_TRACE(std::string(nl.model) + " tp " + std::to_string(nl.p.tp) + " pp " + std::to_string(nl.p.pp) +
                   " dp " + std::to_string(nl.p.dp) + " ep " + std::to_string(nl.p.ep) + " stage " + std::to_string(s));
      const auto& params = by_zero[0].stages[s].params;
      const bool shards = (dense_group > 1 && params.non_expert.value() > 1) || (lay.edp > 1 && params.expert.value() > 1);
      const Bytes z0 = static_bytes(by_zero[0].stages[s]), z1 = static_bytes(by_zero[1].stages[s]),
                  z2 = static_bytes(by_zero[2].stages[s]), z3 = static_bytes(by_zero[3].stages[s]);
      if (shards) {
        EXPECT_LT(z3, z2);
        EXPECT_LT(z2, z1);
        EXPECT_LT(z1, z0);
      } else {
        EXPECT_EQ(z3, z0);
        EXPECT_EQ(z2, z0);
        EXPECT_EQ(z1, z0);
      }
      // Without ZeRO every parameter costs 2 (bf16 weight) + 4 (fp32 gradient) + 4 + 2 + 2
      // (fp32 master, bf16 moments) = 14 bytes (paper-method.md §5).
      const std::uint64_t n = (params.non_expert + params.expert).value();
      EXPECT_EQ(z0.value(), 14u * n);
      // ZeRO never changes what a device holds, only how its states are split.
      for (int z = 1; z <= 3; ++z) {
        EXPECT_EQ(by_zero[idx(z)].stages[s].params.non_expert, params.non_expert);
        EXPECT_EQ(by_zero[idx(z)].stages[s].params.expert, params.expert);
      }
    }
  }
}

// paper-method.md §5, exact: stage 1 holds 429,719,552 non-expert and 5,820,645,376 expert
// parameters per device; ZeRO shards them over dp 32 and edp 8, 741,009,408 in all.
TEST(ZeroProperty, PaperStageOneByHand) {
  const ModelSpec m = model_without_mtp("deepseek-v3");
  const std::uint64_t full = 6'250'364'928, shard = 429'719'552 / 32 + 5'820'645'376 / 8;
  ASSERT_EQ(shard, 741'009'408u);
  const std::uint64_t expected[4] = {14 * full, 6 * full + 8 * shard, 2 * full + 12 * shard, 14 * shard};
  for (int z = 0; z <= 3; ++z) {
    TrainingConfig t = paper_training();
    t.zero = z;
    const auto r = run(m, paper_layout(), t);
    EXPECT_EQ(r.stages[1].params.non_expert.value(), 429'719'552u);
    EXPECT_EQ(r.stages[1].params.expert.value(), 5'820'645'376u);
    EXPECT_EQ(static_bytes(r.stages[1]).value(), expected[idx(z)]) << "ZeRO " << z;
  }
}

// ---------------------------------------------------------------------------------------------
// Activations.

std::vector<NamedLayout> activation_layouts() {
  return {
      {"deepseek-v3", paper_layout()},
      {"deepseek-v3", layout(1, 1, 1, 1)},
      {"deepseek-v3", layout(4, 8, 2, 8, false, 2)},
      {"deepseek-v2", layout(4, 4, 2, 8, true)},
      {"deepseek-v2-lite", layout(2, 3, 4, 4)},
      {"deepseek-v2-lite", layout(1, 2, 2, 1, false, 1, 2)},  // etp 2
  };
}

TEST(ActivationProperty, FullRecomputationNeverKeepsMore) {
  for (const auto& nl : activation_layouts()) {
    const ModelSpec m = model_without_mtp(nl.model);
    TrainingConfig t = paper_training();
    const auto none = run(m, nl.p, t);
    t.recompute = Recompute::full;
    const auto full = run(m, nl.p, t);
    for (std::size_t s = 0; s < none.stages.size(); ++s) {
      SCOPED_TRACE(std::string(nl.model) + " stage " + std::to_string(s));
      if (none.stages[s].layers.num_layers > 0) {
        EXPECT_LT(full.stages[s].bytes.activations, none.stages[s].bytes.activations);
        EXPECT_GT(full.stages[s].bytes.activations.value(), 0u);
      } else {
        EXPECT_EQ(full.stages[s].bytes.activations, none.stages[s].bytes.activations);
      }
    }
  }
}

TEST(ActivationProperty, GrowStrictlyWithMicroBatchAndSequence) {
  for (const auto& nl : activation_layouts()) {
    const ModelSpec m = model_without_mtp(nl.model);
    for (const Recompute rc : {Recompute::none, Recompute::full}) {
      std::vector<MemoryReport> by_b, by_s;
      for (const std::int64_t b : {1, 2, 4}) {
        TrainingConfig t = paper_training();
        t.recompute = rc;
        t.micro_batch = b;
        by_b.push_back(run(m, nl.p, t));
      }
      for (const std::int64_t s : {1024, 2048, 4096}) {
        TrainingConfig t = paper_training();
        t.recompute = rc;
        t.seq_len = s;
        by_s.push_back(run(m, nl.p, t));
      }
      for (std::size_t st = 0; st < by_b[0].stages.size(); ++st) {
        SCOPED_TRACE(std::string(nl.model) + " recompute " + std::string(name_of(rc)) + " stage " + std::to_string(st));
        if (by_b[0].stages[st].layers.num_layers == 0) continue;
        EXPECT_LT(by_b[0].stages[st].bytes.activations, by_b[1].stages[st].bytes.activations);
        EXPECT_LT(by_b[1].stages[st].bytes.activations, by_b[2].stages[st].bytes.activations);
        EXPECT_LT(by_s[0].stages[st].bytes.activations, by_s[1].stages[st].bytes.activations);
        EXPECT_LT(by_s[1].stages[st].bytes.activations, by_s[2].stages[st].bytes.activations);
      }
    }
  }
}

// paper-method.md §6: the terms scale linearly with b, and full recomputation of the four MoE
// layers of stage 1 keeps 8bsh + 8bsN_r = 8*4096*7168 + 8*4096*8 = 235,143,168 bytes at b = 1.
TEST(ActivationProperty, PaperLayoutLinearInMicroBatchAndFullRecomputeByHand) {
  const ModelSpec m = model_without_mtp("deepseek-v3");
  for (const Recompute rc : {Recompute::none, Recompute::full}) {
    std::vector<std::uint64_t> act;
    for (const std::int64_t b : {1, 2, 4}) {
      TrainingConfig t = paper_training();
      t.recompute = rc;
      t.micro_batch = b;
      act.push_back(run(m, paper_layout(), t).stages[1].bytes.activations.value());
    }
    EXPECT_EQ(act[1], 2 * act[0]) << name_of(rc);
    EXPECT_EQ(act[2], 4 * act[0]) << name_of(rc);
    if (rc == Recompute::full) {
      EXPECT_EQ(act[0], 235'143'168u);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Stage parameters fold back to the model.

Count stage_sum(const MemoryReport& r) {
  Count c;
  for (const auto& s : r.stages) c += s.params.non_expert + s.params.expert;
  return c;
}

// Totals of paper-method.md §2 (without MTP and without the router bias the paper profile
// leaves out), for the presets that exist.
const std::map<std::string, std::uint64_t> kReferenceTotals = {
    {"deepseek-v3", 671'026'404'352},     {"deepseek-v2", 235'741'434'880},
    {"deepseek-v2-lite", 15'706'484'224}, {"mixtral-8x7b", 46'702'792'704},
    {"llama-3.1-70b", 70'553'706'496},    {"qwen3-30b-a3b", 30'532'122'624},
};

TEST(StageParamsProperty, OneDeviceHoldsTheReferenceTotal) {
  for (const char* name : {"deepseek-v3", "deepseek-v2", "deepseek-v2-lite"}) {
    const auto r = run(model_without_mtp(name), layout(1, 1, 1, 1), paper_training());
    EXPECT_EQ(stage_sum(r).value(), kReferenceTotals.at(name)) << name;
    EXPECT_EQ(r.total_params.value(), kReferenceTotals.at(name)) << name;
  }
  // Further presets, where the library has them.
  const auto presets = preset_names();
  for (const auto& [name, total] : kReferenceTotals) {
    if (std::find(presets.begin(), presets.end(), name) == presets.end()) continue;
    const auto r = run(model_without_mtp(name), layout(1, 1, 1, 1), paper_training());
    EXPECT_EQ(stage_sum(r).value(), total) << name;
  }
}

TEST(StageParamsProperty, StagesPartitionTheAccountedInventoryForEveryPreset) {
  for (const auto& name : preset_names()) {
    const ModelSpec m = model_without_mtp(name);
    if (m.has_indexer()) continue;  // DSA: analysis refused by name (test_model_types_dsa.cpp)
    if (m.is_hybrid()) continue;    // Qwen3-Next, Nemotron-H: analysis refused (test_model_types_qwen3_next.cpp, _nemotron_h.cpp)
    if (m.has_swa_dims() || !m.nas_blocks.empty()) continue;  // MiMo-V2-Flash, Nemotron-NAS: analysis refused (test_model_types_mimo_v2.cpp)
    if (m.has_vision()) continue;  // Gemma-3's multimodal presets: analysis refused (test_model_types_gemma3.cpp)
    const Inventory inv = build_inventory(m);
    Count accounted;
    for (const auto& t : inv.tensors) {
      EXPECT_NE(t.placement, Placement::mtp) << name << " " << t.name;
      if (t.role != Role::router_bias) accounted += t.params();
    }
    // However the layers are spread over stages, every tensor is on exactly one of them.
    for (const std::int64_t pp : {1, 2, 3, 5}) {
      if (pp > m.num_layers) continue;
      ParallelConfig p = layout(1, pp, 1, 1);
      // An explicit split with an empty first stage (embedding alone) and the rest after it.
      if (pp == 2) p.layers_per_stage = {0, m.num_layers};
      if (pp == 3) p.layers_per_stage = {1, m.num_layers - 1, 0};
      if (pp == 5 && (m.num_layers + 4) / 5 * 4 > m.num_layers) continue;  // no default split
      const auto r = run(m, p, paper_training());
      EXPECT_EQ(stage_sum(r), accounted) << name << " pp " << pp;
      EXPECT_EQ(r.total_params, accounted) << name << " pp " << pp;
    }
  }
}

// DeepSeek-V3 over 16 stages without TP or EP (paper-method.md §3): stage 0 = embedding
// 926,679,040 + three dense layers of 583,483,392 (MLA 187,105,280, norms 16,384, FFN
// 396,361,728) + one MoE layer of 11,507,286,016; stages 1-14 four MoE layers; stage 15 one MoE
// layer + final norm 7168 + head 926,679,040.
TEST(StageParamsProperty, DeepSeekV3SixteenStagesByHand) {
  const auto r = run(model_without_mtp("deepseek-v3"), layout(1, 16, 1, 1), paper_training());
  ASSERT_EQ(r.stages.size(), 16u);
  const std::uint64_t dense = 187'105'280 + 16'384 + 396'361'728, moe = 11'507'286'016;
  const auto total = [](const StageReport& s) { return (s.params.non_expert + s.params.expert).value(); };
  EXPECT_EQ(total(r.stages[0]), 926'679'040 + 3 * dense + moe);
  for (std::size_t s = 1; s < 15; ++s) EXPECT_EQ(total(r.stages[s]), 4 * moe) << "stage " << s;
  EXPECT_EQ(total(r.stages[1]), 46'029'144'064u);
  EXPECT_EQ(total(r.stages[15]), moe + 7'168 + 926'679'040);
}

// With MTP requested, its depth sits on the last stage. Its embedding and head copies are the
// main model's tensors when they sit on the same stage (pp = 1); with pp > 1 the last stage
// needs its own embedding. MTP depth = MoE layer 11,507,286,016 + enorm/hnorm 2*7168 + eh_proj
// 7168*14336 + head norm 7168 (+ embedding 926,679,040 when not shared).
TEST(StageParamsProperty, MtpDepthOnTheLastStage) {
  ModelSpec m = load_model("deepseek-v3");
  set_mtp_layers(m, 1);
  const std::uint64_t mtp = 11'507'286'016 + 2 * 7'168 + 7'168ull * 14'336 + 7'168;
  const auto one = run(m, layout(1, 1, 1, 1), paper_training());
  EXPECT_EQ(stage_sum(one).value(), 671'026'404'352 + mtp);
  const auto sixteen = run(m, layout(1, 16, 1, 1), paper_training());
  EXPECT_EQ(stage_sum(sixteen).value(), 671'026'404'352 + mtp + 926'679'040);
  EXPECT_EQ(sixteen.stages.back().mtp_depths, 1);
  EXPECT_EQ(sixteen.stages.front().mtp_depths, 0);
}

// Expert parallelism spreads only the routed experts: with tp = 1, routed-expert parameters per
// device times ep*etp, plus everything else once, is the model total.
TEST(StageParamsProperty, ExpertReplicationConsistentForEveryMoePreset) {
  for (const auto& name : preset_names()) {
    const ModelSpec m = model_without_mtp(name);
    if (!m.is_moe() || m.has_indexer()) continue;  // DSA: analysis refused (test_model_types_dsa.cpp)
    if (m.is_hybrid()) continue;                   // Qwen3-Next, Nemotron-H: analysis refused (test_model_types_qwen3_next.cpp, _nemotron_h.cpp)
    if (m.has_swa_dims() || !m.nas_blocks.empty()) continue;  // MiMo-V2-Flash, Nemotron-NAS: analysis refused (test_model_types_mimo_v2.cpp)
    const auto whole = run(m, layout(1, 1, 1, 1), paper_training());
    // gpt-oss's expert down-projection biases are whole on every etp rank (see above).
    std::uint64_t down_bias = 0;
    for (const auto& t : build_inventory(m).tensors) {
      if (t.role == Role::expert_down_bias) down_bias += t.params().value();
    }
    const auto routed_index = static_cast<std::size_t>(Module::routed_experts);
    for (const Degrees d : {Degrees{1, 2, 1}, Degrees{1, 4, 2}, Degrees{1, 8, 1}}) {
      if (m.moe.num_routed_experts % d.ep != 0 || m.moe.expert_ffn % d.etp != 0) continue;
      const auto r = run(m, layout(1, 1, d.ep * d.etp, d.ep, false, 1, d.etp), paper_training());
      const auto& s = r.stages[0];
      const std::uint64_t routed = s.params_by_module[routed_index].value();
      const std::uint64_t rest = (s.params.non_expert + s.params.expert).value() - routed;
      const std::uint64_t replicated = down_bias * u(d.etp - 1);
      EXPECT_EQ(routed * u(d.ep * d.etp), whole.stages[0].params_by_module[routed_index].value() + replicated) << name;
      EXPECT_EQ(rest + routed * u(d.ep * d.etp), stage_sum(whole).value() + replicated) << name << " ep " << d.ep;
    }
  }
}

// The paper profile's TP rules restated by hand from paper-method.md §4 (W_UQ, W_UK, W_UV, W_O
// split; embedding and head vocab-parallel; everything else whole; routed experts over ep):
// every stage of a DeepSeek layout holds exactly that.
std::uint64_t hand_device_params(const Tensor& t, std::int64_t tp, std::int64_t ep) {
  if (t.is_routed_expert) return t.params().value() / u(ep);
  switch (t.role) {
    case Role::q_up:
    case Role::k_up:
    case Role::v_up:
    case Role::o_proj:
    case Role::embedding:
    case Role::output_head:
    case Role::mtp_embedding:
    case Role::mtp_output_head: return t.params().value() / u(tp);
    default: return t.params().value();
  }
}

TEST(StageParamsProperty, TensorParallelReplicationMatchesThePaperRules) {
  for (const NamedLayout& nl : {NamedLayout{"deepseek-v3", paper_layout()}, NamedLayout{"deepseek-v2", layout(4, 4, 2, 8)},
                                NamedLayout{"deepseek-v2-lite", layout(2, 3, 4, 4)},
                                NamedLayout{"deepseek-v2-lite", layout(8, 1, 1, 8)}}) {
    const ModelSpec m = model_without_mtp(nl.model);
    const Inventory inv = build_inventory(m);
    const auto r = run(m, nl.p, paper_training());
    std::vector<std::uint64_t> expected(r.stages.size(), 0);
    for (const auto& t : inv.tensors) {
      if (t.role == Role::router_bias) continue;
      std::size_t stage = 0;
      if (t.placement == Placement::head) stage = r.stages.size() - 1;
      if (t.placement == Placement::decoder) {
        while (t.layer > r.stages[stage].layers.last_layer()) ++stage;
      }
      expected[stage] += hand_device_params(t, nl.p.tp, nl.p.ep);
    }
    for (std::size_t s = 0; s < r.stages.size(); ++s) {
      EXPECT_EQ((r.stages[s].params.non_expert + r.stages[s].params.expert).value(), expected[s])
          << nl.model << " tp " << nl.p.tp << " stage " << s;
    }
  }
  // paper-method.md §4: 6,250,364,928 per device of stage 1 = 46,029,144,064 less half of the
  // TP-split attention (4 layers x 159,383,552 / 2) less 7/8 of the routed experts
  // (4 x 256 x 44,040,192 x 7/8).
  const auto r = run(model_without_mtp("deepseek-v3"), paper_layout(), paper_training());
  EXPECT_EQ((r.stages[1].params.non_expert + r.stages[1].params.expert).value(),
            46'029'144'064ull - 4ull * 159'383'552 / 2 - 4ull * 256 * 44'040'192 / 8 * 7);
  EXPECT_EQ((r.stages[1].params.non_expert + r.stages[1].params.expert).value(), 6'250'364'928u);
}

// ---------------------------------------------------------------------------------------------
// Default pipeline split.

TEST(LayerSplitProperty, DeepSeekV3OverSixteenStages) {
  std::vector<std::int64_t> expected(15, 4);
  expected.push_back(1);
  EXPECT_EQ(default_layer_split(61, 16), expected);
}

TEST(LayerSplitProperty, HandExamples) {
  EXPECT_EQ(default_layer_split(27, 3), (std::vector<std::int64_t>{9, 9, 9}));
  EXPECT_EQ(default_layer_split(10, 4), (std::vector<std::int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(default_layer_split(7, 1), (std::vector<std::int64_t>{7}));
  // ceil(60/16) = 4 on 15 stages is all 60 layers: the last stage is left empty.
  std::vector<std::int64_t> sixty(15, 4);
  sixty.push_back(0);
  EXPECT_EQ(default_layer_split(60, 16), sixty);
  // ceil(10/7) = 2 on 6 stages is 12 > 10 layers: no such split.
  EXPECT_THROW((void)default_layer_split(10, 7), InputError);
}

TEST(LayerSplitProperty, SumsToTheLayerCountWheneverValid) {
  int valid = 0, invalid = 0;
  for (std::int64_t layers = 1; layers <= 130; ++layers) {
    for (std::int64_t pp = 1; pp <= layers; ++pp) {
      SCOPED_TRACE("L " + std::to_string(layers) + " pp " + std::to_string(pp));
      const std::int64_t per = (layers + pp - 1) / pp;
      if (per * (pp - 1) > layers) {
        ++invalid;
        EXPECT_THROW((void)default_layer_split(layers, pp), InputError);
        continue;
      }
      ++valid;
      const auto split = default_layer_split(layers, pp);
      ASSERT_EQ(split.size(), idx(pp));
      std::int64_t sum = 0;
      for (std::size_t i = 0; i + 1 < split.size(); ++i) EXPECT_EQ(split[i], per);
      EXPECT_GE(split.back(), 0);
      EXPECT_LE(split.back(), per);
      for (const auto n : split) sum += n;
      EXPECT_EQ(sum, layers);
    }
  }
  // Both branches are exercised.
  EXPECT_GT(valid, 1000);
  EXPECT_GT(invalid, 100);
}

TEST(LayerSplitProperty, ResolvedStagesAreContiguous) {
  const ModelSpec m = model_without_mtp("deepseek-v3");
  for (const std::int64_t pp : {1, 2, 4, 8, 16, 31, 61}) {
    const Layout l = resolve_layout(m, layout(1, pp, 1, 1));
    ASSERT_EQ(l.stages.size(), idx(pp));
    std::int64_t next = 0;
    for (const auto& s : l.stages) {
      EXPECT_EQ(s.first_layer, next) << "pp " << pp;
      next += s.num_layers;
    }
    EXPECT_EQ(next, 61) << "pp " << pp;
  }
}

}  // namespace
