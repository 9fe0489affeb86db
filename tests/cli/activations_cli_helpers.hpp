// Helpers shared by the CLI tests of what each micro-batch keeps (issue 4): explain sums,
// recompute modules, orderings, FP8, routing, context parallelism, overheads and the
// deepseek-v3 recipe (tests/cli/test_{explain,recompute,orderings,fp8,routing,
// context_parallel,overheads,recipe}_cli.cpp). The base configuration is DeepSeek-V3 (megatron
// profile, MTP included) with TP2 PP16 DP32 EP8 ETP1 (the reference analysis's layout, §4:
// EDP = 32 x 2 / 8 = 8; Megatron's own default would be etp = tp), sequence parallelism, b = 1, s = 4096, the
// distributed optimizer and a global batch of 1024 (m = 32 micro-batches per step).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace moemem::test::activations_cli {

using nlohmann::json;

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::joined;

// DeepSeek-V3 with the base layout; `pp`/`dp` overridable for schedules that need another one,
// etp by an --etp in `extra`.
inline Args dsv3(const Args& extra = {}, const std::string& pp = "16", const std::string& dp = "32", bool distopt = true) {
  Args a = {"--model", "deepseek-v3", "--tp", "2", "--pp", pp, "--dp", dp, "--ep", "8", "--sp",
            "--micro-batch", "1", "--seq-len", "4096", "--global-batch", "1024"};
  if (std::find(extra.begin(), extra.end(), "--etp") == extra.end()) {
    a.emplace_back("--etp");
    a.emplace_back("1");
  }
  if (distopt) a.emplace_back("--distributed-optimizer");
  return concat(a, extra);
}

// Runs a command with --format json; a null json (and a test failure) when it does not succeed.
inline json run_json(const Args& args) {
  const Args full = concat(args, {"--format", "json"});
  const CliResult r = run_cli(full);
  EXPECT_EQ(r.code, 0) << joined(full) << "\n" << r.err;
  if (r.code != 0) return json();
  return json::parse(r.out);
}

inline json analyze_json(const Args& args) { return run_json(concat({"analyze"}, args)); }
inline json explain_json(const Args& args, std::int64_t stage) {
  return run_json(concat({"explain", "--stage", std::to_string(stage)}, args));
}

inline std::uint64_t u64(const json& j) { return j.get<std::uint64_t>(); }
inline std::int64_t i64(const json& j) { return j.get<std::int64_t>(); }

// Bytes of each item of one category (items of the same name, e.g. of two chunks, summed).
inline std::map<std::string, std::uint64_t> items_of(const json& explain, const std::string& category) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& i : explain.at("items")) {
    if (i.at("category") == category) out[i.at("item").get<std::string>()] += u64(i.at("bytes"));
  }
  return out;
}

// The saved-tensor items of a stage, without the layer transient: the recomputation transient
// (under recomputation) and the tensors one layer's forward holds unsaved ("... (transient)").
inline std::map<std::string, std::uint64_t> saved_tensors(const json& explain) {
  auto out = items_of(explain, "activations");
  out.erase("recomputation transient");
  std::erase_if(out, [](const auto& item) { return item.first.ends_with("(transient)"); });
  return out;
}

inline std::uint64_t stage_bytes(const json& report, std::size_t stage, const char* field) {
  return u64(report.at("stages").at(stage).at("bytes").at(field));
}

// Exit 2, nothing on stdout, and an error naming every word of `words`.
inline void expect_exit_2(const Args& args, std::initializer_list<const char*> words) {
  SCOPED_TRACE(joined(args));
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  for (const char* w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
}

inline std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// DeepSeek-V3 dimensions (data/models/deepseek-v3.json) and the base layout's derived sizes.
inline constexpr std::uint64_t kHidden = 7168;
inline constexpr std::uint64_t kTopK = 8;
// Tokens on one TP rank with sequence parallelism: b * s / tp = 4096 / 2.
inline constexpr std::uint64_t kTokensSp = 4096 / 2;
// Routed rows on an expert rank under balanced routing: tokens_sp x top_k x etp 1.
inline constexpr std::uint64_t kRouted = kTokensSp * kTopK * 1;
// The MoE dispatch transient (docs/formulas.md) of one layer on the base layout: 256 / ep 8 = 32
// experts per rank, so permuted S + all-to-all output R + fc2 output R + unsorted R, bf16, with
// S = tokens_sp x top_k = R: 2 x 7168 x (16384 + 3 x 16384) = 939,524,096 bytes.
inline constexpr std::uint64_t kDispatchTransient = 2 * kHidden * (kTokensSp * kTopK + 3 * kRouted);
// Stage 1 of the base layout: ceil(61 / 16) = 4 decoder layers (4-7, all MoE), and 1F1B keeps
// min(pp - 1, m) = min(15, 32) = 15 micro-batches in flight.
inline constexpr std::uint64_t kStage1Layers = 4;
inline constexpr std::uint64_t kStage1InFlight = 15;
inline constexpr std::uint64_t kStage1Copies = kStage1Layers * kStage1InFlight;

}  // namespace moemem::test::activations_cli
