// torchtitan's activation checkpointing defaults and its layer SAC (issue 14's review: the profile
// defaulted to no checkpointing, which no torchtitan release does). Up to 0.2.2 the default is
// mode "selective" with selective_ac_option "2" (torchtitan/config/job_config.py
// ActivationCheckpoint); _apply_layer_sac (torchtitan/distributed/activation_checkpoint.py)
// increments one process-wide counter before each block and checkpoints the block when the counter
// is a multiple of the option. From c5d93d109 (2026-06-15) the Trainer's default policy is
// SelectiveAC, per-op SAC. Expected counts are worked from that rule, not from running moemem.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "cli/run_cli.hpp"
#include "moemem/analyze.hpp"
#include "moemem/config.hpp"
#include "moemem/parallel.hpp"
#include "moemem/training.hpp"

namespace {

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::run_cli;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::stage_bytes;

// Llama-3.1-8B (32 identical layers) split 7, 9, 7, 9 over PP 2 x VPP 2: rank 0 holds chunks 0
// (layers 0-6) and 2 (layers 16-22), rank 1 chunks 1 (7-15) and 3 (23-31).
TEST(TorchtitanLayerSac, OneBlockCounterRunsAcrossARanksChunks) {
  using namespace moemem;
  const ModelSpec m = load_model("llama-3.1-8b");
  ParallelConfig p;
  p.pp = 2;
  p.vpp = 2;
  p.schedule = Schedule::interleaved;
  p.layers_per_stage = {7, 9, 7, 9};
  const Layout layout = resolve_layout(m, p);
  EXPECT_EQ(blocks_before_chunk(layout, 0), 0);
  EXPECT_EQ(blocks_before_chunk(layout, 1), 0);
  EXPECT_EQ(blocks_before_chunk(layout, 2), 7);
  EXPECT_EQ(blocks_before_chunk(layout, 3), 9);
  TrainingConfig t;
  t.recompute = Recompute::full;
  t.recompute_method = RecomputeMethod::every;
  t.recompute_num_layers = 2;
  const std::size_t k = m.class_at(0);
  // Chunk 0: counters 1..7, checkpointed at 2, 4, 6.
  const auto c0 = chunk_layer_counts(m, layout.chunks[0], t, 0);
  EXPECT_EQ(c0.input[k], 3);
  EXPECT_EQ(c0.whole[k], 4);
  // Chunk 2 continues rank 0's counter: 8..14, checkpointed at 8, 10, 12, 14.
  const auto c2 = chunk_layer_counts(m, layout.chunks[2], t, 7);
  EXPECT_EQ(c2.input[k], 4);
  EXPECT_EQ(c2.whole[k], 3);
  // Every third block: chunk 3 of rank 1 counts 10..18, checkpointed at 12, 15, 18.
  t.recompute_num_layers = 3;
  const auto c3 = chunk_layer_counts(m, layout.chunks[3], t, 9);
  EXPECT_EQ(c3.input[k], 3);
  EXPECT_EQ(c3.whole[k], 6);
}

Args llama(const Args& extra) {
  return concat({"--model", "llama-3.1-8b", "--profile", "torchtitan", "--dp", "8", "--seq-len", "4096"}, extra);
}

TEST(TorchtitanLayerSac, WithoutRecomputeEachReleaseUsesItsOwnDefault) {
  const auto current = analyze_json(llama({}));
  const auto op = analyze_json(llama({"--recompute", "selective"}));
  ASSERT_FALSE(current.is_null());
  EXPECT_EQ(stage_bytes(current, 0, "activations"), stage_bytes(op, 0, "activations"));
  const auto old = analyze_json(llama({"--torchtitan-version", "0.2.2"}));
  const auto layer2 = analyze_json(llama({"--torchtitan-version", "0.2.2", "--selective-ac-option", "2"}));
  ASSERT_FALSE(old.is_null());
  EXPECT_EQ(stage_bytes(old, 0, "activations"), stage_bytes(layer2, 0, "activations"));
  // Half the blocks checkpointed: between none and full.
  const auto none = analyze_json(llama({"--torchtitan-version", "0.2.2", "--recompute", "none"}));
  const auto full = analyze_json(llama({"--torchtitan-version", "0.2.2", "--recompute", "full"}));
  EXPECT_LT(stage_bytes(full, 0, "activations"), stage_bytes(layer2, 0, "activations"));
  EXPECT_LT(stage_bytes(layer2, 0, "activations"), stage_bytes(none, 0, "activations"));
  // Option 1 (and 0) checkpoints every block: full AC.
  EXPECT_EQ(stage_bytes(analyze_json(llama({"--torchtitan-version", "0.2.2", "--selective-ac-option", "1"})), 0, "activations"),
            stage_bytes(full, 0, "activations"));
  EXPECT_EQ(stage_bytes(analyze_json(llama({"--torchtitan-version", "0.2.2", "--selective-ac-option", "0"})), 0, "activations"),
            stage_bytes(full, 0, "activations"));
  const auto says = [](const nlohmann::json& j, const std::string& text) {
    const auto& a = j.at("assumptions");
    return std::any_of(a.begin(), a.end(), [&](const nlohmann::json& s) { return s.get<std::string>().find(text) != std::string::npos; });
  };
  EXPECT_TRUE(says(current, "torchtitan's default, per-op SAC"));
  EXPECT_TRUE(says(old, "selective_ac_option 2"));
  EXPECT_FALSE(says(op, "torchtitan's default"));
}

TEST(TorchtitanLayerSac, RefusesWhatTorchtitanCannotRun) {
  const auto refused = [](const Args& args, const std::string& field) {
    const auto r = run_cli(concat({"analyze"}, args));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.err.find(field), std::string::npos) << r.err;
  };
  // Layer SAC went with the policy classes (current); a frequency is a number or op.
  refused(llama({"--selective-ac-option", "2"}), "--selective-ac-option");
  refused(llama({"--torchtitan-version", "0.2.2", "--selective-ac-option", "x"}), "--selective-ac-option");
  refused(llama({"--torchtitan-version", "0.2.2", "--selective-ac-option", "2", "--recompute", "full"}), "--selective-ac-option");
  // Megatron's checkpointing groups are not torchtitan's.
  refused(llama({"--recompute", "full", "--recompute-method", "block", "--recompute-num-layers", "4"}), "--recompute-method");
  refused(llama({"--recompute", "full", "--recompute-num-layers", "2"}), "--recompute-num-layers");
  // Another profile has no such option.
  refused({"--model", "llama-3.1-8b", "--dp", "8", "--selective-ac-option", "op"}, "--selective-ac-option");
}

}  // namespace
