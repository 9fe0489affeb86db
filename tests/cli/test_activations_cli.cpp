// What each micro-batch keeps (issue 4), through `moemem analyze` and `moemem explain`:
// explain adds up to analyze on every stage of many configurations; each recompute module
// frees exactly the tensors it names; per-stage orderings (none >= selective >= full, flash <
// eager, FP8 < BF16, bf16 moments < fp32); FP8 tensors and scales; routing imbalance and
// capacity; context parallelism's ring buffers; the runtime overhead terms; the deepseek-v3
// recipe. The base configuration is DeepSeek-V3 (megatron profile, MTP included) with
// TP2 PP16 DP32 EP8, sequence parallelism, b = 1, s = 4096, the distributed optimizer and a
// global batch of 1024 (m = 32 micro-batches per step).
// Expected values are derived by hand from the rules (the issue, docs/formulas.md,
// Megatron-Core) and from relations between runs, never copied from moemem's output.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::CliResult;
using moemem::test::run_cli;
using nlohmann::json;

using Args = std::vector<std::string>;
using Names = std::set<std::string>;

std::string joined(const Args& args) {
  std::string s = "moemem";
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

Args concat(Args a, const Args& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// DeepSeek-V3 with the base layout; `pp`/`dp` overridable for schedules that need another one.
Args dsv3(const Args& extra = {}, const std::string& pp = "16", const std::string& dp = "32", bool distopt = true) {
  Args a = {"--model", "deepseek-v3", "--tp", "2", "--pp", pp, "--dp", dp, "--ep", "8", "--sp",
            "--micro-batch", "1", "--seq-len", "4096", "--global-batch", "1024"};
  if (distopt) a.emplace_back("--distributed-optimizer");
  return concat(a, extra);
}

// Runs a command with --format json; a null json (and a test failure) when it does not succeed.
json run_json(const Args& args) {
  const Args full = concat(args, {"--format", "json"});
  const CliResult r = run_cli(full);
  EXPECT_EQ(r.code, 0) << joined(full) << "\n" << r.err;
  if (r.code != 0) return json();
  return json::parse(r.out);
}

json analyze_json(const Args& args) { return run_json(concat({"analyze"}, args)); }
json explain_json(const Args& args, std::int64_t stage) {
  return run_json(concat({"explain", "--stage", std::to_string(stage)}, args));
}

std::uint64_t u64(const json& j) { return j.get<std::uint64_t>(); }
std::int64_t i64(const json& j) { return j.get<std::int64_t>(); }

// Bytes of each item of one category (items of the same name, e.g. of two chunks, summed).
std::map<std::string, std::uint64_t> items_of(const json& explain, const std::string& category) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& i : explain.at("items")) {
    if (i.at("category") == category) out[i.at("item").get<std::string>()] += u64(i.at("bytes"));
  }
  return out;
}

// The saved-tensor items of a stage, without the recomputation transient (which only appears
// under recomputation).
std::map<std::string, std::uint64_t> saved_tensors(const json& explain) {
  auto out = items_of(explain, "activations");
  out.erase("recomputation transient");
  return out;
}

std::uint64_t stage_bytes(const json& report, std::size_t stage, const char* field) {
  return u64(report.at("stages").at(stage).at("bytes").at(field));
}

// Exit 2, nothing on stdout, and an error naming every word of `words`.
void expect_exit_2(const Args& args, std::initializer_list<const char*> words) {
  SCOPED_TRACE(joined(args));
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  for (const char* w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
}

// Bytes::from_gib: 2^30 bytes per GiB, rounded up to a whole byte.
std::uint64_t gib(double x) { return static_cast<std::uint64_t>(std::ceil(x * 1073741824.0)); }

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// DeepSeek-V3 dimensions (data/models/deepseek-v3.json) and the base layout's derived sizes.
constexpr std::uint64_t kHidden = 7168;
constexpr std::uint64_t kTopK = 8;
// Tokens on one TP rank with sequence parallelism: b * s / tp = 4096 / 2.
constexpr std::uint64_t kTokensSp = 4096 / 2;
// Routed rows on an expert rank under balanced routing: tokens_sp x top_k x etp 1.
constexpr std::uint64_t kRouted = kTokensSp * kTopK * 1;
// Stage 1 of the base layout: ceil(61 / 16) = 4 decoder layers (4-7, all MoE), and 1F1B keeps
// min(pp - 1, m) = min(15, 32) = 15 micro-batches in flight.
constexpr std::uint64_t kStage1Layers = 4;
constexpr std::uint64_t kStage1InFlight = 15;
constexpr std::uint64_t kStage1Copies = kStage1Layers * kStage1InFlight;

// ---------------------------------------------------------------------------------------------
// 1. explain adds up: items sum to total_bytes, which is analyze's stage total, on every stage.

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
  const char* categories[] = {"weights", "gradients", "optimizer", "activations", "buffers", "fragmentation", "runtime"};
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
        sum += u64(i.at("bytes"));
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

// ---------------------------------------------------------------------------------------------
// 2. Each recompute module changes exactly the tensors it names (explain of a MoE stage,
// selective X against none; the recomputation transient ignored).

// Names whose bytes differ between the two runs; every one must shrink or disappear, and no item
// may appear that the run without recomputation lacks.
Names changed_items(const std::map<std::string, std::uint64_t>& none, const std::map<std::string, std::uint64_t>& sel) {
  Names out;
  for (const auto& [name, bytes] : none) {
    const auto it = sel.find(name);
    const std::uint64_t now = it == sel.end() ? 0 : it->second;
    if (now != bytes) {
      out.insert(name);
      EXPECT_LT(now, bytes) << name << " grew under recomputation";
    }
  }
  for (const auto& [name, bytes] : sel) {
    EXPECT_TRUE(none.contains(name)) << name << " appears only under recomputation";
  }
  return out;
}

Names changed_by(const std::string& modules, std::int64_t stage, const Args& extra = {}) {
  SCOPED_TRACE("--recompute-modules " + modules + " on stage " + std::to_string(stage));
  const json none = explain_json(dsv3(concat({"--recompute", "none"}, extra)), stage);
  const json sel = explain_json(dsv3(concat({"--recompute", "selective", "--recompute-modules", modules}, extra)), stage);
  if (none.is_null() || sel.is_null()) return {"<run failed>"};
  // Recomputation frees activations only: weights, gradients and optimizer states are unchanged.
  for (const char* cat : {"weights", "gradients", "optimizer", "runtime"}) {
    EXPECT_EQ(items_of(none, cat), items_of(sel, cat)) << cat;
  }
  return changed_items(saved_tensors(none), saved_tensors(sel));
}

TEST(RecomputeCli, LayernormFreesTheTwoNormOutputs) {
  EXPECT_EQ(changed_by("layernorm", 1), (Names{"attn.norm_output (q/kv input)", "mlp.norm_output (router input)"}));
}

TEST(RecomputeCli, MlaUpProjFreesTheUpProjectionInputsAndQKV) {
  EXPECT_EQ(changed_by("mla_up_proj", 1), (Names{"attn.q_compressed_norm (q_up input)", "attn.kv_compressed_norm (kv_up input)",
                                                 "attn.q", "attn.k", "attn.v"}));
}

TEST(RecomputeCli, MoeActFreesOnlyTheExpertActivationOutput) {
  EXPECT_EQ(changed_by("moe_act", 1), (Names{"experts.act_output (fc2 input)"}));
}

TEST(RecomputeCli, MoeFreesEveryRouterExpertAndSharedExpertTensor) {
  const json none = explain_json(dsv3({"--recompute", "none"}), 1);
  ASSERT_FALSE(none.is_null());
  Names expected;
  for (const auto& [name, bytes] : saved_tensors(none)) {
    if (name.starts_with("router.") || name.starts_with("experts.") || name.starts_with("shared.")) expected.insert(name);
  }
  // The MoE block's tensors as the megatron profile names them (docs/formulas.md): router scores
  // and map, four routed-expert tensors (fc1 input and output, activation output, probabilities),
  // two shared-expert tensors.
  EXPECT_EQ(expected.size(), 2u + 4u + 2u);
  EXPECT_EQ(changed_by("moe", 1), expected);
}

TEST(RecomputeCli, SharedExpertsFreesTheSharedMlpIntermediates) {
  EXPECT_EQ(changed_by("shared_experts", 1), (Names{"shared.fc1_output", "shared.act_output (fc2 input)"}));
}

TEST(RecomputeCli, CoreAttnFreesWhatTheKernelSavesBeyondItsInputs) {
  // Flash keeps the log-sum-exp; eager the score and softmax matrices.
  EXPECT_EQ(changed_by("core_attn", 1), (Names{"attn.softmax_lse"}));
  EXPECT_EQ(changed_by("core_attn", 1, {"--attention", "eager"}), (Names{"attn.scores", "attn.softmax"}));
}

TEST(RecomputeCli, MlpFreesNothingOnAMoeStageAndTheDenseMlpOnStageZero) {
  EXPECT_EQ(changed_by("mlp", 1), Names{});
  // Stage 0 holds layers 0-3: three dense layers (first_k_dense_replace 3) and one MoE layer.
  EXPECT_EQ(changed_by("mlp", 0), (Names{"mlp.fc1_output", "mlp.act_output (fc2 input)"}));
}

TEST(RecomputeCli, ModulesCombineAsTheUnionOfWhatEachFrees) {
  Names both = changed_by("layernorm", 1);
  for (const auto& n : changed_by("moe_act", 1)) both.insert(n);
  for (const auto& n : changed_by("mla_up_proj", 1)) both.insert(n);
  EXPECT_EQ(changed_by("layernorm,mla_up_proj,moe_act", 1), both);
}

TEST(RecomputeCli, UnknownModuleAndModulesWithFullExitTwo) {
  expect_exit_2(concat({"analyze"}, dsv3({"--recompute-modules", "layernorm,bogus"})), {"--recompute-modules", "bogus"});
  expect_exit_2(concat({"analyze"}, dsv3({"--recompute", "full", "--recompute-modules", "moe"})), {"--recompute-modules"});
  expect_exit_2(concat({"analyze"}, dsv3({"--recompute", "partial"})), {"--recompute", "partial"});
}

// ---------------------------------------------------------------------------------------------
// 3. Orderings on every stage of the base configuration.

std::vector<std::uint64_t> activations(const json& report) {
  std::vector<std::uint64_t> out;
  for (const auto& s : report.at("stages")) out.push_back(u64(s.at("bytes").at("activations")));
  return out;
}

TEST(ActivationsCli, NoneAtLeastSelectiveAtLeastFullOnEveryStage) {
  const json none = analyze_json(dsv3({"--recompute", "none"}));
  ASSERT_FALSE(none.is_null());
  const auto n = activations(none);
  ASSERT_EQ(n.size(), 16u);
  for (const char* mod : {"core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe", "shared_experts"}) {
    SCOPED_TRACE(mod);
    const auto s = activations(analyze_json(dsv3({"--recompute", "selective", "--recompute-modules", mod})));
    ASSERT_EQ(s.size(), 16u);
    for (std::size_t p = 0; p < 16; ++p) {
      SCOPED_TRACE("stage " + std::to_string(p));
      EXPECT_GE(n[p], s[p]);
      // Every stage has MoE layers with norms, MLA, experts and attention: all but mlp free
      // something there; mlp only frees the dense MLP of stage 0.
      if (std::string(mod) != "mlp" || p == 0) EXPECT_GT(n[p], s[p]);
      else EXPECT_EQ(n[p], s[p]);
    }
  }
  const auto sel = activations(analyze_json(dsv3({"--recompute", "selective", "--recompute-modules", "layernorm,mla_up_proj,moe_act"})));
  const auto full = activations(analyze_json(dsv3({"--recompute", "full"})));
  ASSERT_EQ(sel.size(), 16u);
  ASSERT_EQ(full.size(), 16u);
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    EXPECT_GT(n[p], sel[p]);
    EXPECT_GE(sel[p], full[p]);
    EXPECT_GT(n[p], full[p]);
  }
}

TEST(ActivationsCli, FlashKeepsLessThanEagerOnEveryStageWithLayers) {
  const json flash = analyze_json(dsv3({"--attention", "flash"}));
  const json eager = analyze_json(dsv3({"--attention", "eager"}));
  ASSERT_FALSE(flash.is_null());
  ASSERT_FALSE(eager.is_null());
  EXPECT_EQ(flash.at("training").at("attention"), "flash");
  EXPECT_EQ(eager.at("training").at("attention"), "eager");
  // The megatron profile's default is flash.
  EXPECT_EQ(analyze_json(dsv3()).at("training").at("attention"), "flash");
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    ASSERT_GT(i64(flash.at("stages")[p].at("num_layers")), 0);
    EXPECT_LT(stage_bytes(flash, p, "activations"), stage_bytes(eager, p, "activations"));
  }
  // On stage 1 the difference is exactly the score and softmax matrices (bf16, b x heads/tp x
  // s x s each) minus flash's fp32 log-sum-exp (b x heads/tp x s), per layer and micro-batch.
  const std::uint64_t heads = 128 / 2, s = 4096;
  const std::uint64_t per_layer = 2 * heads * s * s * 2 - heads * s * 4;
  EXPECT_EQ(stage_bytes(eager, 1, "activations") - stage_bytes(flash, 1, "activations"), per_layer * kStage1Copies);
}

TEST(ActivationsCli, Fp8KeepsLessThanBf16OnEveryStage) {
  const auto bf16 = activations(analyze_json(dsv3()));
  ASSERT_EQ(bf16.size(), 16u);
  for (const char* recipe : {"tensorwise", "delayed", "blockwise", "mxfp8"}) {
    SCOPED_TRACE(recipe);
    const json fp8 = analyze_json(dsv3({"--fp8", recipe}));
    ASSERT_FALSE(fp8.is_null());
    EXPECT_EQ(fp8.at("training").at("fp8"), recipe);
    const auto a = activations(fp8);
    ASSERT_EQ(a.size(), 16u);
    for (std::size_t p = 0; p < 16; ++p) EXPECT_LT(a[p], bf16[p]) << "stage " << p;
  }
}

TEST(ActivationsCli, Bf16MomentsAreTwoThirdsOfFp32OptimizerBytes) {
  const json fp32 = analyze_json(dsv3());
  const json bf16 = analyze_json(dsv3({"--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"}));
  ASSERT_FALSE(fp32.is_null());
  ASSERT_FALSE(bf16.is_null());
  EXPECT_EQ(fp32.at("training").at("dtypes").at("exp_avg"), "fp32");
  EXPECT_EQ(bf16.at("training").at("dtypes").at("exp_avg"), "bf16");
  EXPECT_EQ(bf16.at("training").at("dtypes").at("exp_avg_sq"), "bf16");
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    const std::uint64_t a = stage_bytes(fp32, p, "optimizer"), b = stage_bytes(bf16, p, "optimizer");
    EXPECT_LT(b, a);
    // master fp32 4 + moments 2 + 2 = 8 bytes against 4 + 4 + 4 = 12 per sharded element.
    EXPECT_EQ(b * 3, a * 2);
    // Nothing else moves but the allocator's share.
    for (const char* f : {"weights", "gradients", "activations", "runtime"}) {
      EXPECT_EQ(stage_bytes(fp32, p, f), stage_bytes(bf16, p, f)) << f;
    }
  }
  // --main-grads-dtype bf16 halves the main gradients.
  const json g = analyze_json(dsv3({"--main-grads-dtype", "bf16"}));
  for (std::size_t p = 0; p < 16; ++p) EXPECT_EQ(stage_bytes(g, p, "gradients") * 2, stage_bytes(fp32, p, "gradients"));
}

// ---------------------------------------------------------------------------------------------
// 4. FP8 tensors, scales and weight copies.

TEST(Fp8Cli, BlockwiseCachesDispatchedTokensInFp8WithOneFp32ScalePer128) {
  const json e = explain_json(dsv3({"--fp8", "blockwise"}), 1);
  ASSERT_FALSE(e.is_null());
  const auto a = saved_tensors(e);
  const std::uint64_t rh = kRouted * kHidden;
  ASSERT_TRUE(a.contains("experts.fc1_input (dispatched tokens)"));
  ASSERT_TRUE(a.contains("experts.fc1_input.scales"));
  EXPECT_EQ(a.at("experts.fc1_input (dispatched tokens)"), rh * 1 * kStage1Copies);
  EXPECT_EQ(a.at("experts.fc1_input.scales"), ceil_div(rh, 128) * 4 * kStage1Copies);
  // The fc2 input too (R x ffn 2048), and the attention's linear inputs.
  EXPECT_EQ(a.at("experts.act_output (fc2 input)"), kRouted * 2048 * 1 * kStage1Copies);
  EXPECT_EQ(a.at("experts.act_output.scales"), ceil_div(kRouted * 2048, 128) * 4 * kStage1Copies);
  EXPECT_FALSE(a.contains("experts.fc2_output (unpermute input)"));  // probabilities applied in the activation
  EXPECT_EQ(a.at("attn.norm_output (q/kv input)"), kTokensSp * kHidden * kStage1Copies);
  EXPECT_EQ(a.at("attn.norm_output.scales"), ceil_div(kTokensSp * kHidden, 128) * 4 * kStage1Copies);
}

TEST(Fp8Cli, Mxfp8KeepsOneE8m0BytePer32) {
  const json e = explain_json(dsv3({"--fp8", "mxfp8"}), 1);
  ASSERT_FALSE(e.is_null());
  const auto a = saved_tensors(e);
  const std::uint64_t rh = kRouted * kHidden;
  EXPECT_EQ(a.at("experts.fc1_input (dispatched tokens)"), rh * kStage1Copies);
  EXPECT_EQ(a.at("experts.fc1_input.scales"), ceil_div(rh, 32) * 1 * kStage1Copies);
}

TEST(Fp8Cli, TensorwiseKeepsOneFp32ScalePerTensor) {
  const json e = explain_json(dsv3({"--fp8", "tensorwise"}), 1);
  ASSERT_FALSE(e.is_null());
  const auto a = saved_tensors(e);
  EXPECT_EQ(a.at("experts.fc1_input (dispatched tokens)"), kRouted * kHidden * kStage1Copies);
  EXPECT_EQ(a.at("experts.fc1_input.scales"), 4 * kStage1Copies);
}

TEST(Fp8Cli, Bf16HasNoScalesAndNoWeightCopies) {
  const json e = explain_json(dsv3(), 1);
  ASSERT_FALSE(e.is_null());
  for (const auto& [name, bytes] : saved_tensors(e)) EXPECT_FALSE(name.ends_with(".scales")) << name;
  EXPECT_FALSE(items_of(e, "weights").contains("FP8 weight copies"));
  EXPECT_EQ(saved_tensors(e).at("experts.fc1_input (dispatched tokens)"), kRouted * kHidden * 2 * kStage1Copies);
  EXPECT_EQ(u64(analyze_json(dsv3()).at("stages")[1].at("fp8_weight_copies")), 0u);
}

TEST(Fp8Cli, WeightCopiesAreTwoFp8BytesPerGemmParameterPlusScales) {
  for (const char* recipe : {"blockwise", "mxfp8"}) {
    SCOPED_TRACE(recipe);
    const Args args = dsv3({"--fp8", recipe});
    const json e = explain_json(args, 1);
    const json r = analyze_json(args);
    ASSERT_FALSE(e.is_null());
    ASSERT_FALSE(r.is_null());
    // FP8-GEMM parameters of stage 1: every decoder linear layer (attention projections, routed
    // and shared experts), not norms nor router, read from the bf16 weight items (2 bytes each).
    std::uint64_t gemm_bytes = 0;
    bool copies_seen = false;
    for (const auto& i : e.at("items")) {
      if (i.at("category") != "weights") continue;
      const auto mod = i.at("module").get<std::string>();
      if (i.at("item") == "FP8 weight copies") {
        copies_seen = true;
        EXPECT_EQ(mod, "fp8");
        continue;
      }
      if (mod == "attention" || mod == "routed_experts" || mod == "shared_experts") gemm_bytes += u64(i.at("bytes"));
    }
    ASSERT_TRUE(copies_seen);
    ASSERT_EQ(gemm_bytes % 2, 0u);
    const std::uint64_t copies = 2 * (gemm_bytes / 2);  // row- and column-wise, 1 byte each
    const std::uint64_t scales = std::string(recipe) == "blockwise" ? ceil_div(copies, 128 * 128) * 4 : ceil_div(copies, 32);
    EXPECT_EQ(items_of(e, "weights").at("FP8 weight copies"), copies + scales);
    EXPECT_EQ(u64(r.at("stages")[1].at("fp8_weight_copies")), copies + scales);
  }
}

// ---------------------------------------------------------------------------------------------
// 5. Routing: imbalance and capacity size the hottest expert rank.

// Every saved tensor of stage 1 under `extra`, against the balanced run: "experts.*" items must
// be the balanced bytes scaled from R rows to `rows`, everything else unchanged.
void expect_routed_rows(const Args& extra, std::uint64_t rows) {
  SCOPED_TRACE(joined(extra) + " -> " + std::to_string(rows) + " rows");
  const json b = explain_json(dsv3(), 1);
  const json x = explain_json(dsv3(extra), 1);
  ASSERT_FALSE(b.is_null());
  ASSERT_FALSE(x.is_null());
  const auto base = saved_tensors(b), now = saved_tensors(x);
  ASSERT_EQ(base.size(), now.size());
  int experts = 0;
  for (const auto& [name, bytes] : base) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(now.contains(name));
    if (name.starts_with("experts.")) {
      ++experts;
      // Each is R rows x a per-row width: bytes scale with the rows exactly.
      ASSERT_EQ(bytes % kRouted, 0u);
      EXPECT_EQ(now.at(name), bytes / kRouted * rows);
    } else {
      EXPECT_EQ(now.at(name), bytes);
    }
  }
  EXPECT_EQ(experts, 4);
}

TEST(RoutingCli, ImbalanceTwoDoublesExactlyTheExpertTensors) { expect_routed_rows({"--moe-imbalance", "2"}, 2 * kRouted); }

TEST(RoutingCli, CapacityFactorCapsTheImbalance) {
  // min(2, 1.25) x 16384 = 20480 rows.
  expect_routed_rows({"--moe-imbalance", "2", "--moe-capacity-factor", "1.25"}, 20480);
  // Balanced routing never exceeds a capacity above 1.
  expect_routed_rows({"--moe-capacity-factor", "1.25"}, kRouted);
}

TEST(RoutingCli, FractionalImbalanceRoundsTheRowsUp) {
  // ceil(16384 x 1.3) = ceil(21299.2) = 21300 rows.
  expect_routed_rows({"--moe-imbalance", "1.3"}, 21300);
}

TEST(RoutingCli, BadFactorsExitTwoNamingTheFlag) {
  expect_exit_2(concat({"analyze"}, dsv3({"--moe-imbalance", "0.5"})), {"--moe-imbalance", "0.5"});
  expect_exit_2(concat({"analyze"}, dsv3({"--moe-capacity-factor=-1"})), {"--moe-capacity-factor", "-1"});
  expect_exit_2(concat({"analyze"}, dsv3({"--moe-capacity-factor", "0"})), {"--moe-capacity-factor"});
  expect_exit_2(concat({"analyze"}, dsv3({"--moe-imbalance", "lots"})), {"--moe-imbalance", "lots"});
  expect_exit_2(concat({"analyze"}, dsv3({"--moe-token-dispatcher", "nccl"})), {"--moe-token-dispatcher", "nccl"});
}

// ---------------------------------------------------------------------------------------------
// 6. Context parallelism.

TEST(ActivationsCli, ContextParallelHalvesPerTokenTensorsAndAddsRingBuffers) {
  // dp halved to keep the same world size and expert data-parallel degree; 1F1B still holds 15
  // micro-batches on stage 1 (m = 1024 / 16 = 64 >= 15).
  const Args cp2 = dsv3({"--cp", "2"}, "16", "16");
  const json b = explain_json(dsv3(), 1);
  const json c = explain_json(cp2, 1);
  ASSERT_FALSE(b.is_null());
  ASSERT_FALSE(c.is_null());
  const auto base = saved_tensors(b);
  auto now = saved_tensors(c);
  const std::string ring = "context-parallel ring buffers";
  ASSERT_TRUE(now.contains(ring));
  // 2 x one layer's local K and V: (4096 / cp 2) tokens x (128 / tp 2) heads x (K 128 + 64
  // RoPE + V 128) x bf16.
  const std::uint64_t ring_bytes = 2ull * (4096 / 2) * (128 / 2) * (128 + 64 + 128) * 2;
  EXPECT_EQ(now.at(ring), ring_bytes);
  EXPECT_FALSE(base.contains(ring));
  now.erase(ring);
  ASSERT_EQ(now.size(), base.size());
  EXPECT_EQ(now.at("attn.input (layer input)"), kTokensSp / 2 * kHidden * 2 * kStage1Copies);
  for (const auto& [name, bytes] : base) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(now.contains(name));
    // Every saved tensor of a layer is per token (s/cp), the score-free flash kernel included.
    EXPECT_EQ(now.at(name) * 2, bytes);
  }
  const json r = analyze_json(cp2);
  ASSERT_FALSE(r.is_null());
  for (const auto& s : r.at("stages")) EXPECT_EQ(u64(s.at("cp_ring_buffers")), ring_bytes);
  EXPECT_EQ(u64(analyze_json(dsv3()).at("stages")[1].at("cp_ring_buffers")), 0u);
}

TEST(ActivationsCli, ContextParallelRingBuffersOfGqaUseTheKvHeads) {
  // Mixtral-8x7B: 8 KV heads of 128 (4096 / 32), tp 2: 4 per rank; K and V 128 each.
  const Args args = {"--model", "mixtral-8x7b", "--tp", "2", "--pp", "4", "--dp", "4", "--cp", "2", "--ep", "4", "--sp",
                     "--global-batch", "64", "--seq-len", "8192"};
  const json r = analyze_json(args);
  ASSERT_FALSE(r.is_null());
  const std::uint64_t ring_bytes = 2ull * (8192 / 2) * (8 / 2) * (128 + 128) * 2;
  for (const auto& s : r.at("stages")) EXPECT_EQ(u64(s.at("cp_ring_buffers")), ring_bytes);
}

TEST(ActivationsCli, SequenceMustSplitOverCpAndTp) {
  // 4098 is not a multiple of cp 2 x tp 2.
  expect_exit_2({"analyze", "--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--dp", "16", "--cp", "2", "--ep", "8", "--sp",
                 "--seq-len", "4098"},
                {"--seq-len", "4098"});
}

// ---------------------------------------------------------------------------------------------
// 7. Runtime overhead, fragmentation and the DeepEP buffer.

TEST(OverheadCli, RuntimeIsCudaContextNcclWorldAndOnePerProcessGroup) {
  const json r = analyze_json(dsv3());
  ASSERT_FALSE(r.is_null());
  // Groups of size > 1 among tp 2, pp 16, dp 32, cp 1, ep 8, etp 1, edp 8: five; tp > 1 adds the
  // fitted 5.7 GiB residual (docs/formulas.md, fitted constants).
  EXPECT_EQ(i64(r.at("parallel").at("edp")), 8);
  const std::uint64_t runtime = gib(0.52) + gib(0.39) + 5 * gib(0.4) + gib(5.7);
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    const auto& b = r.at("stages")[p].at("bytes");
    EXPECT_EQ(u64(b.at("runtime")), runtime);
    const std::uint64_t allocated = u64(b.at("weights")) + u64(b.at("gradients")) + u64(b.at("optimizer")) +
                                    u64(b.at("activations")) + u64(b.at("buffers"));
    EXPECT_EQ(u64(b.at("allocated")), allocated);
    EXPECT_EQ(u64(b.at("buffers")), 0u);  // the megatron profile's allowance is 0 without DeepEP
    EXPECT_EQ(u64(b.at("fragmentation")), ceil_div(allocated * 5, 100));
    EXPECT_EQ(u64(b.at("reserved")), allocated + u64(b.at("fragmentation")));
    EXPECT_EQ(u64(b.at("total")), u64(b.at("reserved")) + runtime);
  }
}

TEST(OverheadCli, EachFurtherGroupDimensionAddsOneCommunicator) {
  // cp 2 (dp 16): tp, pp, dp, cp, ep, edp 8 -> six groups.
  const json cp = analyze_json(dsv3({"--cp", "2"}, "16", "16"));
  ASSERT_FALSE(cp.is_null());
  EXPECT_EQ(stage_bytes(cp, 0, "runtime"), gib(0.52) + gib(0.39) + 6 * gib(0.4) + gib(5.7));
  // etp 2: edp = tp*cp*dp / (ep*etp) = 64 / 16 = 4; tp, pp, dp, ep, etp, edp -> six.
  const json etp = analyze_json(dsv3({"--etp", "2"}));
  ASSERT_FALSE(etp.is_null());
  EXPECT_EQ(i64(etp.at("parallel").at("edp")), 4);
  EXPECT_EQ(stage_bytes(etp, 0, "runtime"), gib(0.52) + gib(0.39) + 6 * gib(0.4) + gib(5.7));
  // One GPU: no communicator at all, only the CUDA context.
  const json one = analyze_json({"--model", "deepseek-v2-lite", "--micro-batch", "1", "--seq-len", "1024"});
  ASSERT_FALSE(one.is_null());
  EXPECT_EQ(i64(one.at("parallel").at("world_size")), 1);
  EXPECT_EQ(stage_bytes(one, 0, "runtime"), gib(0.52));
}

TEST(OverheadCli, FragmentationPercentOverridesTheDefault) {
  const json five = analyze_json(dsv3());
  const json ten = analyze_json(dsv3({"--fragmentation-pct", "10"}));
  const json zero = analyze_json(dsv3({"--fragmentation-pct", "0"}));
  ASSERT_FALSE(ten.is_null());
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    const std::uint64_t alloc = stage_bytes(five, p, "allocated");
    EXPECT_EQ(stage_bytes(ten, p, "allocated"), alloc);
    const std::uint64_t f5 = stage_bytes(five, p, "fragmentation"), f10 = stage_bytes(ten, p, "fragmentation");
    EXPECT_EQ(f10, ceil_div(alloc * 10, 100));
    // Double, up to the rounding of each.
    EXPECT_LE(f10, 2 * f5);
    EXPECT_GE(f10 + 1, 2 * f5);
    EXPECT_EQ(stage_bytes(zero, p, "fragmentation"), 0u);
    EXPECT_EQ(stage_bytes(zero, p, "total"), alloc + stage_bytes(five, p, "runtime"));
  }
  expect_exit_2(concat({"analyze"}, dsv3({"--fragmentation-pct", "101"})), {"--fragmentation-pct", "101"});
  expect_exit_2(concat({"analyze"}, dsv3({"--fragmentation-pct=-5"})), {"--fragmentation-pct"});
}

TEST(OverheadCli, DeepEpAddsItsBufferToBuffers) {
  const json a2a = analyze_json(dsv3());
  const json deepep = analyze_json(dsv3({"--moe-token-dispatcher", "deepep"}));
  ASSERT_FALSE(deepep.is_null());
  EXPECT_EQ(deepep.at("training").at("moe_token_dispatcher"), "deepep");
  for (std::size_t p = 0; p < 16; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    // DeepEP's buffer: 3.1 GB = 3.1e9 bytes.
    EXPECT_EQ(stage_bytes(deepep, p, "buffers"), stage_bytes(a2a, p, "buffers") + 3100000000ull);
    EXPECT_EQ(stage_bytes(deepep, p, "allocated"), stage_bytes(a2a, p, "allocated") + 3100000000ull);
    for (const char* f : {"weights", "gradients", "optimizer", "activations", "runtime"}) {
      EXPECT_EQ(stage_bytes(deepep, p, f), stage_bytes(a2a, p, f)) << f;
    }
  }
}

TEST(OverheadCli, PaperProfileHasNoRuntimeTerm) {
  const json r = analyze_json(dsv3({"--profile", "paper"}));
  ASSERT_FALSE(r.is_null());
  for (const auto& s : r.at("stages")) {
    EXPECT_EQ(u64(s.at("bytes").at("runtime")), 0u);
    EXPECT_EQ(u64(s.at("bytes").at("total")), u64(s.at("bytes").at("reserved")));
    // The paper's own allowance: 0.8 GiB of buffers, 5% fragmentation at the low point.
    EXPECT_EQ(u64(s.at("bytes").at("buffers")), gib(0.8));
    EXPECT_EQ(u64(s.at("bytes").at("fragmentation")), ceil_div(u64(s.at("bytes").at("allocated")) * 5, 100));
  }
  const json e = explain_json(dsv3({"--profile", "paper"}), 0);
  EXPECT_TRUE(items_of(e, "runtime").empty());
}

// ---------------------------------------------------------------------------------------------
// 8. --recipe deepseek-v3, and what the paper profile refuses.

Args recipe_args(const Args& extra = {}) {
  return concat({"--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--dp", "32", "--ep", "8", "--sp", "--global-batch",
                 "1024", "--recipe", "deepseek-v3"},
                extra);
}

TEST(ActivationsCli, RecipeDeepSeekV3SetsWhatTheReportDescribes) {
  const json r = analyze_json(recipe_args());
  ASSERT_FALSE(r.is_null());
  const auto& t = r.at("training");
  EXPECT_EQ(t.at("fp8"), "blockwise");
  EXPECT_EQ(t.at("dtypes").at("exp_avg"), "bf16");
  EXPECT_EQ(t.at("dtypes").at("exp_avg_sq"), "bf16");
  EXPECT_EQ(t.at("dtypes").at("master"), "fp32");
  EXPECT_EQ(t.at("dtypes").at("gradients"), "fp32");
  EXPECT_EQ(t.at("recompute"), "selective");
  ASSERT_TRUE(t.at("recompute_modules").is_string());
  const auto mods = t.at("recompute_modules").get<std::string>();
  for (const char* m : {"layernorm", "mla_up_proj", "moe_act"}) EXPECT_NE(mods.find(m), std::string::npos) << m;
  EXPECT_EQ(i64(t.at("zero")), 1);
  // The experts' SwiGLU input is cached in FP8 too (the report's §3.3): R x 2 ffn bytes.
  const json e = explain_json(recipe_args(), 1);
  ASSERT_FALSE(e.is_null());
  const auto a = saved_tensors(e);
  EXPECT_EQ(a.at("experts.fc1_output (SwiGLU input)"), kRouted * 2 * 2048 * 1 * kStage1Copies);
  EXPECT_TRUE(a.contains("experts.fc1_output.scales"));
  EXPECT_FALSE(a.contains("experts.act_output (fc2 input)"));  // recomputed (moe_act)
}

TEST(ActivationsCli, ExplicitFlagsOverrideTheRecipe) {
  const json r = analyze_json(recipe_args({"--exp-avg-dtype", "fp32"}));
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r.at("training").at("dtypes").at("exp_avg"), "fp32");
  EXPECT_EQ(r.at("training").at("dtypes").at("exp_avg_sq"), "bf16");
  const json none = analyze_json(recipe_args({"--recompute", "none", "--fp8", "none"}));
  ASSERT_FALSE(none.is_null());
  EXPECT_EQ(none.at("training").at("recompute"), "none");
  EXPECT_EQ(none.at("training").at("fp8"), "none");
  const json core = analyze_json(recipe_args({"--recompute-modules", "core_attn"}));
  ASSERT_FALSE(core.is_null());
  EXPECT_EQ(core.at("training").at("recompute_modules"), "core_attn");
  const json z2 = analyze_json(recipe_args({"--zero", "2"}));
  ASSERT_FALSE(z2.is_null());
  EXPECT_EQ(i64(z2.at("training").at("zero")), 2);
}

TEST(ActivationsCli, ExplicitZeroZeroOverridesTheRecipe) {
  const json r = analyze_json(recipe_args({"--zero", "0"}));
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(i64(r.at("training").at("zero")), 0);
}

TEST(ActivationsCli, RecipeBogusAndPaperRefusalsExitTwo) {
  expect_exit_2(concat({"analyze"}, dsv3({"--recipe", "bogus"})), {"--recipe", "bogus"});
  expect_exit_2(concat({"analyze"}, dsv3({"--recipe", "llama"})), {"--recipe", "llama"});
  expect_exit_2(concat({"analyze"}, dsv3({"--profile", "paper", "--fp8", "blockwise"})), {"--fp8", "blockwise"});
  expect_exit_2(concat({"analyze"}, dsv3({"--profile", "paper", "--moe-imbalance", "2"})), {"--moe-imbalance"});
  expect_exit_2(concat({"explain", "--stage", "0"}, dsv3({"--profile", "paper", "--fp8", "mxfp8"})), {"--fp8"});
  expect_exit_2(concat({"analyze"}, dsv3({"--fp8", "fp4"})), {"--fp8", "fp4"});
}

// The acceptance run: --recipe deepseek-v3 with PP16, EP64, DP128 (2,048 GPUs, ZeRO-1),
// DualPipe, no TP, s = 4096, b = 1 fits on an 80 GB GPU on every stage, as it did in reality. The
// ends of the pipeline carry fewer layers (3 with the embedding, 2 with the head and MTP), the
// even split's 4 + 4 ... + 1 overloading the first stage; DeepSeek's own split is not published.
TEST(ActivationsCli, RecipeDeepSeekV3FitsOnEighty) {
  const json r = analyze_json({"--model", "deepseek-v3", "--pp", "16", "--ep", "64", "--dp", "128", "--schedule", "dualpipe",
                               "--recipe", "deepseek-v3", "--seq-len", "4096", "--micro-batch", "1", "--gpu", "h800-80g",
                               "--decoder-first-pipeline-num-layers", "3", "--decoder-last-pipeline-num-layers", "2"});
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(i64(r.at("parallel").at("world_size")), 2048);
  EXPECT_EQ(i64(r.at("training").at("zero")), 1);
  for (const auto& s : r.at("stages")) {
    EXPECT_TRUE(s.at("fits").get<bool>()) << "stage " << i64(s.at("stage")) << ": " << u64(s.at("bytes").at("total"))
                                          << " bytes";
  }
  EXPECT_TRUE(r.at("gpu").at("all_fit").get<bool>());
}

}  // namespace
