// `moemem explain` adds up (issue 4): its items sum to total_bytes, which is analyze's stage
// total, category by category, on every stage of many configurations; --stage out of range; and
// `analyze --explain N` is `explain --stage N`. Base configuration: activations_cli_helpers.hpp.
// Expected values are derived by hand from the rules (the issue, docs/formulas.md,
// Megatron-Core) and from relations between runs, never copied from moemem's output.
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"

namespace {

using moemem::test::CliResult;
using moemem::test::run_cli;
using nlohmann::json;
using moemem::test::activations_cli::Args;
using moemem::test::activations_cli::joined;
using moemem::test::activations_cli::concat;
using moemem::test::activations_cli::dsv3;
using moemem::test::activations_cli::run_json;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::u64;
using moemem::test::activations_cli::i64;
using moemem::test::activations_cli::expect_exit_2;

struct Case {
  std::string name;
  Args args;
};

std::vector<Case> explain_cases() {
  return {
      {"recompute none", dsv3({"--recompute", "none"})},
      {"selective default (core_attn)", dsv3({"--recompute", "selective"})},
      {"selective layernorm,mla_up_proj,moe_act", dsv3({"--recompute", "selective", "--recompute-modules", "layernorm,mla_up_proj,moe_act"})},
      {"selective moe,shared_experts", dsv3({"--recompute", "selective", "--recompute-modules", "moe,shared_experts"})},
      {"selective mlp,core_attn", dsv3({"--recompute", "selective", "--recompute-modules", "mlp,core_attn"})},
      {"full uniform 1", dsv3({"--recompute", "full"})},
      {"full uniform 2", dsv3({"--recompute", "full", "--recompute-method", "uniform", "--recompute-num-layers", "2"})},
      {"full block 2", dsv3({"--recompute", "full", "--recompute-method", "block", "--recompute-num-layers", "2"})},
      {"1f1b eager", dsv3({"--schedule", "1f1b", "--attention", "eager"})},
      {"interleaved", dsv3({"--vpp", "2", "--schedule", "interleaved"}, "8", "64")},
      {"interleaved full block 1", dsv3({"--vpp", "2", "--schedule", "interleaved", "--recompute", "full", "--recompute-method", "block"}, "8", "64")},
      {"dualpipe", dsv3({"--schedule", "dualpipe"})},
      {"dualpipe selective", dsv3({"--schedule", "dualpipe", "--recompute-modules", "layernorm,moe_act"})},
      {"dualpipev", dsv3({"--schedule", "dualpipev"}, "8", "64")},
      {"gpipe", dsv3({"--schedule", "gpipe"})},
      {"zero 0", dsv3({"--zero", "0"}, "16", "32", false)},
      {"zero 1", dsv3({"--zero", "1"}, "16", "32", false)},
      {"zero 2", dsv3({"--zero", "2"}, "16", "32", false)},
      {"zero 3", dsv3({"--zero", "3"}, "16", "32", false)},
      {"zero 3 fp8 tensorwise", dsv3({"--zero", "3", "--fp8", "tensorwise"}, "16", "32", false)},
      {"fp8 blockwise", dsv3({"--fp8", "blockwise"})},
      {"fp8 mxfp8", dsv3({"--fp8", "mxfp8"})},
      {"fp8 blockwise full", dsv3({"--fp8", "blockwise", "--recompute", "full"})},
      {"cp 2", dsv3({"--cp", "2"}, "16", "16")},
      {"cp 2 eager selective", dsv3({"--cp", "2", "--attention", "eager", "--recompute", "selective"}, "16", "16")},
      {"moe imbalance 1.5", dsv3({"--moe-imbalance", "1.5"})},
      {"moe imbalance 3 capacity 1.1", dsv3({"--moe-imbalance", "3", "--moe-capacity-factor", "1.1"})},
      {"deepep", dsv3({"--moe-token-dispatcher", "deepep"})},
      {"bf16 moments, fragmentation 12.5", dsv3({"--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16", "--fragmentation-pct", "12.5"})},
      {"recipe deepseek-v3", dsv3({"--recipe", "deepseek-v3"}, "16", "32", false)},
      {"paper", dsv3({"--profile", "paper"})},
      {"paper full", dsv3({"--profile", "paper", "--recompute", "full"})},
      {"paper zero 3 high overhead", dsv3({"--profile", "paper", "--zero", "3", "--overhead", "high"}, "16", "32", false)},
      {"mixtral-8x7b", {"--model", "mixtral-8x7b", "--tp", "2", "--pp", "4", "--dp", "8", "--ep", "4", "--sp", "--global-batch", "64", "--distributed-optimizer"}},
      {"mixtral-8x7b selective cp 2 etp 2 fp8",
       {"--model", "mixtral-8x7b", "--tp", "2", "--pp", "4", "--dp", "4", "--cp", "2", "--ep", "4", "--etp", "2", "--sp",
        "--global-batch", "64", "--zero", "2", "--fp8", "blockwise", "--recompute-modules", "core_attn,moe_act,layernorm"}},
      {"llama-3.1-70b full", {"--model", "llama-3.1-70b", "--tp", "8", "--pp", "4", "--dp", "4", "--sp", "--global-batch", "64", "--distributed-optimizer", "--recompute", "full"}},
      {"llama-3.1-70b interleaved selective mlp",
       {"--model", "llama-3.1-70b", "--tp", "8", "--pp", "4", "--vpp", "5", "--dp", "4", "--sp", "--global-batch", "64",
        "--distributed-optimizer", "--recompute-modules", "mlp,layernorm"}},
  };
}

TEST(ExplainCli, ItemsAddUpToAnalyzeTotalOnEveryStageOfManyConfigurations) {
  const char* categories[] = {"weights", "gradients", "optimizer", "activations", "buffers", "fragmentation", "runtime", "host"};
  for (const auto& c : explain_cases()) {
    SCOPED_TRACE(c.name + ": " + joined(c.args));
    const json report = analyze_json(c.args);
    ASSERT_FALSE(report.is_null());
    const auto& stages = report.at("stages");
    ASSERT_GT(stages.size(), 0u);
    for (std::size_t s = 0; s < stages.size(); ++s) {
      SCOPED_TRACE("stage " + std::to_string(s));
      const json e = explain_json(c.args, static_cast<std::int64_t>(s));
      ASSERT_FALSE(e.is_null());
      EXPECT_EQ(e.at("schema"), "moemem.explain/1");
      EXPECT_EQ(i64(e.at("stage")), static_cast<std::int64_t>(s));
      std::uint64_t sum = 0;
      std::map<std::string, std::uint64_t> by_category;
      for (const auto& i : e.at("items")) {
        if (i.at("category") != "host") sum += u64(i.at("bytes"));  // host memory is listed, not on the device
        by_category[i.at("category").get<std::string>()] += u64(i.at("bytes"));
        EXPECT_FALSE(i.at("item").get<std::string>().empty());
        EXPECT_FALSE(i.at("detail").get<std::string>().empty());
      }
      EXPECT_EQ(sum, u64(e.at("total_bytes")));
      EXPECT_EQ(u64(e.at("total_bytes")), u64(stages[s].at("bytes").at("total")));
      // Stronger: every category adds up to analyze's field of the same name.
      for (const char* cat : categories) {
        EXPECT_EQ(by_category[cat], u64(stages[s].at("bytes").at(cat))) << cat;
      }
      EXPECT_LE(by_category.size(), std::size(categories)) << "unknown category in explain";
    }
  }
}

TEST(ExplainCli, StageOutOfRangeExitsTwoNamingStage) {
  expect_exit_2(concat({"explain", "--stage", "16"}, dsv3()), {"--stage", "16"});
  expect_exit_2(concat({"explain", "--stage", "-1"}, dsv3()), {"--stage"});
  expect_exit_2(concat({"analyze", "--explain", "99"}, dsv3()), {"--stage", "99"});
  // explain requires --stage.
  const CliResult r = run_cli(concat({"explain"}, dsv3()));
  EXPECT_NE(r.code, 0);
}

TEST(ExplainCli, AnalyzeExplainIsTheSameAsExplainStage) {
  const json a = run_json(concat({"analyze", "--explain", "3"}, dsv3({"--fp8", "mxfp8"})));
  const json b = explain_json(dsv3({"--fp8", "mxfp8"}), 3);
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(a, b);
}

// The megatron profile's line on optimizer sharding names the ZeRO stage analysed, and what that
// stage shards matches the bytes (Llama-3.1-8B, dp 4: ZeRO 0 keeps 12 bytes of master weights and
// moments per parameter whole, ZeRO 1 a quarter of them).
TEST(ExplainCli, OptimizerAssumptionFollowsTheZeroStage) {
  const std::vector<std::pair<std::string, std::string>> lines = {
      {"0", "no distributed optimizer (--zero 0)"},
      {"1", "distributed optimizer (--distributed-optimizer, = --zero 1)"},
      {"2", "ZeRO-2 (--zero 2): master weights, moments and main gradients over dp*cp"},
      {"3", "ZeRO-3 (--zero 3): working weights too"}};
  std::uint64_t optimizer_zero0 = 0;
  for (const auto& [zero, line] : lines) {
    const json j = run_json({"analyze", "--model", "llama-3.1-8b", "--dp", "4", "--zero", zero});
    const std::string all = j.at("assumptions").dump();
    EXPECT_NE(all.find(line), std::string::npos) << zero << ": " << all;
    for (const auto& [other, other_line] : lines) {
      if (other != zero) {
        EXPECT_EQ(all.find(other_line), std::string::npos) << zero << " also says " << other_line;
      }
    }
    const auto optimizer = j.at("stages")[0].at("bytes").at("optimizer").get<std::uint64_t>();
    if (zero == "0") optimizer_zero0 = optimizer;
    if (zero == "1") {
      EXPECT_EQ(optimizer * 4, optimizer_zero0);
    }
  }
}

// --no-rope-fusion (Megatron's unfused _apply_rotary_pos_emb_bshd): each attention layer keeps
// cos and sin, [s/cp, 1, 1, head_dim] bf16, for q and for k. Mixtral 8x7B (head_dim 128, seq 4096)
// at TP2 PP4 (8 layers a stage): 8 x 4 x 4096 x 128 x 2 B = 32 MiB a micro-batch, on the last stage
// (one micro-batch in flight under 1F1B) and 4 x that on the first (four in flight); the same flag
// read from a launch script; refused by the torchtitan profile.
TEST(ExplainCli, UnfusedRopeKeepsCosAndSin) {
  const Args base = {"analyze", "--model", "mixtral-8x7b", "--tp", "2", "--pp", "4", "--ep", "4", "--dp", "16", "--sp"};
  const json fused = run_json(base);
  const json unfused = run_json(concat(base, {"--no-rope-fusion"}));
  const auto acts = [](const json& j, std::size_t s) { return j.at("stages")[s].at("bytes").at("activations").get<std::uint64_t>(); };
  constexpr std::uint64_t kPerMicroBatch = 8ull * 4 * 4096 * 128 * 2;
  EXPECT_EQ(acts(unfused, 3) - acts(fused, 3), kPerMicroBatch);
  EXPECT_EQ(acts(unfused, 0) - acts(fused, 0), 4 * kPerMicroBatch);
  const std::string script = ::testing::TempDir() + "/no_rope_fusion.args";
  {
    std::ofstream f(script);
    f << "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --expert-model-parallel-size 4 "
         "--sequence-parallel --no-rope-fusion\n";
  }
  const json from_script = run_json({"analyze", "--model", "mixtral-8x7b", "--dp", "16", "--megatron-args", script});
  EXPECT_EQ(acts(from_script, 3), acts(unfused, 3));
  const CliResult titan = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "torchtitan", "--dp", "8", "--no-rope-fusion"});
  EXPECT_EQ(titan.code, 2);
  EXPECT_NE(titan.err.find("--no-rope-fusion"), std::string::npos) << titan.err;
}

}  // namespace

namespace {

// CSV is for machines: exact bytes, and a header that says so (explain's GiB column, bytes in CSV,
// would repeat its bytes column and is left out; paper's "bf16 GiB" reads "bf16 bytes").
TEST(ExplainCsv, HeadersNameBytesNotGiB) {
  const auto e = moemem::test::run_cli({"explain", "--stage", "1", "--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--dp",
                                        "64", "--ep", "8", "--format", "csv"});
  ASSERT_EQ(e.code, 0) << e.err;
  const std::string head = e.out.substr(0, e.out.find('\n'));
  EXPECT_EQ(head, "category,module,item,how,bytes");
  const auto p = moemem::test::run_cli({"paper", "--format", "csv"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("stage,layers,params,bf16 bytes\n"), std::string::npos);
  EXPECT_NE(p.out.find("(reference §5), GiB (sizes here in exact bytes)\n"), std::string::npos);
}

}  // namespace
