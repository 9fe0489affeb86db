// Helpers shared by the CLI tests of pipeline schedules and layouts (issue 3): the reference
// DeepSeek-V3 layout, analyze's JSON report, and refusals that exit 2
// (tests/cli/test_{pipeline_schedules,dualpipe,interleaved_layout,pipeline_splits,logits}_cli.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace moemem::test::pipeline_cli {

using nlohmann::json;

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::joined;

// DeepSeek-V3 (its MTP depth included, as the megatron profile does by default) with the
// reference layout TP2 PP16 EP8 DP32 and sequence parallelism.
inline Args dsv3(const Args& extra = {}) {
  return concat({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--ep", "8", "--dp", "32", "--sp"},
                extra);
}

// Runs analyze with --format json; a null json (and a test failure) when it does not succeed.
inline json analyze_json(const Args& args) {
  const Args full = concat(args, {"--format", "json"});
  const CliResult r = run_cli(full);
  EXPECT_EQ(r.code, 0) << joined(full) << "\n" << r.err;
  if (r.code != 0) return json();
  return json::parse(r.out);
}

inline std::uint64_t u64(const json& j) { return j.get<std::uint64_t>(); }
inline std::int64_t i64(const json& j) { return j.get<std::int64_t>(); }
// What a stage holds at its peak beyond its micro-batches' saved activations: the largest of the
// layer transient (a layer computing or recomputed: MoE dispatch copies, recomputed tensors), the
// loss's backward transient and a forward beside the data loader's batch (no EP overlap).
inline std::uint64_t stage_transient(const json& stage) {
  return std::max({u64(stage.at("recompute_transient")), u64(stage.at("loss_transient")),
                   u64(stage.at("input_batch_transient"))});
}

// Exit 2, nothing on stdout, and an error naming every word of `words`.
inline void expect_exit_2(const Args& args, std::initializer_list<const char*> words) {
  SCOPED_TRACE(joined(args));
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("moemem: error: ", 0), 0u) << r.err;
  for (const char* w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
}

}  // namespace moemem::test::pipeline_cli
