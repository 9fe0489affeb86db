// --torchtitan-version (issue 12): up to torchtitan 0.2.0 the pipeline schedule's step() returns
// every micro-batch's output, so the stage holding the loss keeps each micro-batch's bf16 logits
// until the step ends (torch.distributed.pipelining output_chunks); from e5ef99aab (0.2.1)
// torchtitan passes return_outputs=False and nothing is kept; from 0.2.2 K and V are not repeated. Sizes by hand from Llama-3.1-8B's
// vocabulary (128256, untied) and one micro-batch's tokens, not from running moemem.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "cli/run_cli.hpp"

namespace {

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::run_cli;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::items_of;
using moemem::test::activations_cli::stage_bytes;

// Two pipeline stages over two FSDP ranks (releases up to 0.2.2 apply no FSDP, so no mixed
// precision, without one): global batch 8 is 4 micro-batches of 1 x 4096 per rank.
Args piped(const Args& extra) {
  return concat({"--model", "llama-3.1-8b", "--profile", "torchtitan", "--pp", "2", "--dp", "2", "--seq-len", "4096",
                 "--micro-batch", "1", "--global-batch", "8", "--recompute", "none"},
                extra);
}

// One micro-batch's bf16 logits: 4096 tokens x 128256 x 2 bytes.
constexpr std::uint64_t kLogits = 4096ull * 128256 * 2;
constexpr const char* kItem = "earlier micro-batches' logits";

TEST(TorchtitanVersion, UpToZeroTwoTheLastStageKeepsEveryMicroBatchsLogits) {
  static_assert(kLogits == 1'050'673'152);
  const auto old = items_of(explain_json(piped({"--torchtitan-version", "0.2.0"}), 1), "activations");
  const auto now = items_of(explain_json(piped({}), 1), "activations");
  // At the last micro-batch's loss: the three earlier micro-batches' logits.
  EXPECT_EQ(old.at(kItem), 3 * kLogits);
  EXPECT_FALSE(now.contains(kItem));
  EXPECT_EQ(items_of(explain_json(piped({"--torchtitan-version", "0.1.0"}), 1), "activations").at(kItem), 3 * kLogits);
  const auto a_old = analyze_json(piped({"--torchtitan-version", "0.2.0"}));
  const auto a_now = analyze_json(piped({"--torchtitan-version", "0.2.1"}));
  EXPECT_EQ(stage_bytes(a_old, 1, "activations") - stage_bytes(a_now, 1, "activations"), 3 * kLogits);
  // The first stage has no loss: the same activations either way.
  EXPECT_EQ(stage_bytes(a_old, 0, "activations"), stage_bytes(a_now, 0, "activations"));
}

// From 0.2.2 (ff0829c10, "GQA without kv repeats") SDPA takes K and V with Llama-3.1-8B's 8 KV
// heads and enable_gqa; 0.2.1 repeat_kv'd them to 32 heads, and SDPA saved those copies. Stage 0
// of two, no checkpointing: 16 layers x 2 micro-batches in flight, 4096 tokens x heads x 128 x 2
// bytes each.
TEST(TorchtitanVersion, FromZeroTwoTwoSdpaKeepsTheKvHeadsUnrepeated) {
  const auto old = items_of(explain_json(piped({"--torchtitan-version", "0.2.1"}), 0), "activations");
  const auto now = items_of(explain_json(piped({}), 0), "activations");
  constexpr std::uint64_t kRepeated = 4096ull * 32 * 128 * 2 * 16 * 2;
  static_assert(kRepeated == 1'073'741'824);
  EXPECT_EQ(old.at("sdpa.k_repeated"), kRepeated);
  EXPECT_EQ(old.at("sdpa.v_repeated"), kRepeated);
  EXPECT_FALSE(now.contains("sdpa.k_repeated"));
  EXPECT_EQ(now.at("sdpa.k"), kRepeated / 4);
  EXPECT_EQ(now.at("sdpa.v"), kRepeated / 4);
  EXPECT_EQ(items_of(explain_json(piped({"--torchtitan-version", "0.2.2"}), 0), "activations").at("sdpa.v"), kRepeated / 4);
  EXPECT_EQ(stage_bytes(analyze_json(piped({"--torchtitan-version", "0.2.1"})), 0, "activations") -
                stage_bytes(analyze_json(piped({})), 0, "activations"),
            2 * (kRepeated - kRepeated / 4));
}

TEST(TorchtitanVersion, BadValuesAndOtherProfilesAreRefused) {
  const auto bad = run_cli(concat({"analyze"}, piped({"--torchtitan-version", "0.3"})));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--torchtitan-version: '0.3' is not accepted"), std::string::npos) << bad.err;
  for (const char* release : {"0.2.0", "0.2.1"}) {
    const auto megatron = run_cli({"analyze", "--model", "llama-3.1-8b", "--torchtitan-version", release});
    EXPECT_EQ(megatron.code, 2);
    EXPECT_NE(megatron.err.find("--torchtitan-version"), std::string::npos) << megatron.err;
  }
  EXPECT_EQ(run_cli({"analyze", "--model", "llama-3.1-8b", "--torchtitan-version", "current"}).code, 0);
}

// A search result's command as analyze arguments (a layout string comes single-quoted for the shell).
Args command_args(const std::string& cmd) {
  Args args;
  std::istringstream in(cmd);
  for (std::string w; in >> w;) {
    if (w.size() >= 2 && w.front() == '\'' && w.back() == '\'') w = w.substr(1, w.size() - 2);
    args.push_back(w);
  }
  return args;
}

// The layouts of a torchtitan search of Llama-3.1-8B on H100s with `extra` (empty on an error).
nlohmann::json search_layouts(const Args& extra) {
  const auto r = run_cli(concat({"search", "--model", "llama-3.1-8b", "--profile", "torchtitan", "--gpu", "h100-80g", "--threads",
                                 "2", "--format", "json"},
                                extra));
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out).at("layouts") : nlohmann::json::array();
}

// search passes the release and torchtitan's settings on: each result's command, run through
// analyze, gives the peak search reported.
TEST(TorchtitanVersion, SearchCommandsCarryTheReleaseAndSettings) {
  const auto layouts = search_layouts({"--gpus", "16", "--global-batch", "256", "--torchtitan-version", "0.2.0", "--compile",
                                       "--loss", "upcast", "--top", "3"});
  ASSERT_FALSE(layouts.empty());
  for (const auto& l : layouts) {
    const std::string cmd = l.at("command").get<std::string>();
    EXPECT_NE(cmd.find("--torchtitan-version 0.2.0"), std::string::npos) << cmd;
    EXPECT_NE(cmd.find("--compile"), std::string::npos) << cmd;
    const Args args = command_args(cmd);
    EXPECT_EQ(analyze_json(args).at("peak").at("total_bytes"), l.at("peak_bytes")) << cmd;
  }
}

// Up to 0.2.2 torchtitan's default checkpointing is layer SAC (every 2nd block whole); a search
// row labelled "full" checkpoints every block, as its printed `--recompute full` does in analyze
// (search had priced those rows at the release default, up to twice the peak).
TEST(TorchtitanVersion, SearchFullRowsUnderLayerSacReleasesAreFull) {
  const auto layouts = search_layouts({"--gpus", "8", "--global-batch", "32", "--seq-len", "8192", "--torchtitan-version", "0.2.2",
                                       "--recompute", "full", "--top", "4"});
  ASSERT_FALSE(layouts.empty());
  for (const auto& l : layouts) {
    const std::string cmd = l.at("command").get<std::string>();
    EXPECT_NE(cmd.find("--recompute full"), std::string::npos) << cmd;
    const Args args = command_args(cmd);
    const auto full = analyze_json(args);
    EXPECT_EQ(full.at("peak").at("total_bytes"), l.at("peak_bytes")) << cmd;
    // Every block checkpointed keeps less than the release default (every second block).
    Args defaulted;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--recompute") {
        ++i;
        continue;
      }
      defaulted.push_back(args[i]);
    }
    EXPECT_LT(full.at("peak").at("total_bytes").get<std::uint64_t>(),
              analyze_json(defaulted).at("peak").at("total_bytes").get<std::uint64_t>())
        << cmd;
  }
}

// What torchtitan itself refuses: torch.distributed.pipelining has no bidirectional DualPipe and no
// single-stage ZB-H1 (DualPipeV it has), and parallel_dims.seq_len_divisor asks seq_len to divide
// by tp x 2 cp (sequence parallelism, context parallelism's load-balanced halves).
TEST(TorchtitanVersion, SchedulesAndSequenceLengthsTorchtitanRefusesAreRefused) {
  const Args base = {"analyze", "--model", "llama-3.1-8b", "--profile", "torchtitan", "--dp", "2", "--global-batch", "32"};
  for (const char* sched : {"dualpipe", "zb-h1"}) {
    const auto r = run_cli(concat(base, {"--pp", "4", "--schedule", sched}));
    EXPECT_EQ(r.code, 2) << sched;
    EXPECT_NE(r.err.find("--schedule"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(sched), std::string::npos) << r.err;
  }
  EXPECT_EQ(run_cli(concat(base, {"--pp", "4", "--schedule", "dualpipev"})).code, 0);
  // 4098 = 2 x 2049: even, a multiple of cp 2 but not of 2 x cp 2 = 4.
  const auto cp = run_cli(concat(base, {"--cp", "2", "--seq-len", "4098"}));
  EXPECT_EQ(cp.code, 2);
  EXPECT_NE(cp.err.find("--seq-len: '4098'"), std::string::npos) << cp.err;
  EXPECT_NE(cp.err.find("2 x tp x cp = 4"), std::string::npos) << cp.err;
  const auto tp = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "torchtitan", "--tp", "2", "--dp", "2",
                           "--seq-len", "4098"});  // even, but not a multiple of 2 x tp 2
  EXPECT_EQ(tp.code, 2);
  EXPECT_NE(tp.err.find("2 x tp x cp = 4"), std::string::npos) << tp.err;
  EXPECT_EQ(run_cli(concat(base, {"--cp", "2", "--seq-len", "4096"})).code, 0);
  // The divisor came with 6204cdff9 (2025-07-14): 0.1.0 asserted nothing.
  EXPECT_EQ(run_cli(concat(base, {"--cp", "2", "--seq-len", "4098", "--torchtitan-version", "0.1.0"})).code, 0);
}

// From 28483d0eb (`current`) Decoder.Config.update_from_config raises when training.seq_len exceeds
// the flavor's RoPE max_seq_len (models/*/__init__.py at c5d93d109): 4096 for the dense Qwen3
// flavors and 235B-A22B, 262144 for 30B-A3B, 4 x 4096 for DeepSeek-V3's, 131072 for Llama 3's.
// 0.2.2 and earlier resized RoPE to seq_len without a check.
TEST(TorchtitanVersion, SequencesBeyondTheFlavorsRopeLengthAreRefusedAtCurrent) {
  const auto code = [](const std::string& model, const std::string& seq, const Args& extra = {}) {
    const auto r = run_cli(concat({"analyze", "--model", model, "--profile", "torchtitan", "--dp", "8", "--seq-len", seq,
                                   "--recompute", "full"},
                                  extra));
    if (r.code == 2) {
      EXPECT_NE(r.err.find("--seq-len: '" + seq + "'"), std::string::npos) << r.err;
    }
    return r.code;
  };
  EXPECT_EQ(code("qwen3-8b", "4096"), 0);
  EXPECT_EQ(code("qwen3-8b", "8192"), 2);
  EXPECT_EQ(code("qwen3-8b", "8192", {"--torchtitan-version", "0.2.2"}), 0);
  EXPECT_EQ(code("qwen3-30b-a3b", "32768"), 0);
  EXPECT_EQ(code("deepseek-v3", "16384", {"--ep", "8"}), 0);
  EXPECT_EQ(code("deepseek-v3", "32768", {"--ep", "8"}), 2);
  EXPECT_EQ(code("llama-3.1-8b", "262144"), 2);
  const auto r = run_cli({"analyze", "--model", "qwen3-8b", "--profile", "torchtitan", "--dp", "8", "--seq-len", "8192",
                          "--recompute", "full"});
  EXPECT_NE(r.err.find("at most 4096 with --torchtitan-version current"), std::string::npos) << r.err;
}

// Up to 0.2.2 torchtitan applies fully_shard, and with it bf16 mixed precision, only when
// dp_shard > 1 or cp > 1 (ParallelDims.fsdp_enabled); otherwise maybe_enable_amp trains TP/PP in
// fp32 and a single device or DDP under autocast: refused by name for those releases (moemem had
// costed FSDP2's bf16 copies), costed from 00b7f5693 (`current`), where fully_shard always applies.
TEST(TorchtitanVersion, ReleasesWithoutFsdpAtShardDegreeOneAreRefused) {
  const Args tp8 = {"analyze", "--model", "llama-3.1-8b", "--profile", "torchtitan", "--tp", "8", "--seq-len", "8192"};
  for (const char* v : {"0.1.0", "0.2.0", "0.2.1", "0.2.2"}) {
    const auto r = run_cli(concat(tp8, {"--torchtitan-version", v}));
    EXPECT_EQ(r.code, 2) << v;
    EXPECT_NE(r.err.find("--dp: '1'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("TP/PP in fp32"), std::string::npos) << r.err;
  }
  EXPECT_EQ(run_cli(tp8).code, 0);  // current
  // HSDP with one shard per replica is no FSDP either; a context-parallel group is.
  const auto hsdp = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "torchtitan", "--dp", "4", "--dp-replicate", "4",
                             "--torchtitan-version", "0.2.2"});
  EXPECT_EQ(hsdp.code, 2);
  EXPECT_NE(hsdp.err.find("autocast"), std::string::npos) << hsdp.err;
  EXPECT_EQ(run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "torchtitan", "--cp", "2", "--seq-len", "8192",
                     "--torchtitan-version", "0.2.2"})
                .code,
            0);
}

// torchtitan's default split (pipeline_parallel_first/last_stage_less_layers = 1): the embedding
// and the output count as a layer each, floor(units / chunks) per chunk and one more for the first
// units % chunks. Llama-3.1-70B on 8 stages: 82 units, 10 each, 2 extra -> 10 11 10 10 10 10 10 9;
// Llama-3.1-8B on 4: 34 units -> 8 9 8 7; on 4 ranks x 2 interleaved chunks: 4 5 4 4 4 4 4 3
// (generate_llm_fqn_per_model_part, checked by hand). A split given is kept.
std::vector<std::int64_t> chunk_layers(const nlohmann::json& j) {
  std::vector<std::pair<std::int64_t, std::int64_t>> by_chunk;
  for (const auto& st : j.at("stages")) {
    for (const auto& c : st.at("chunks")) by_chunk.emplace_back(c.at("chunk").get<std::int64_t>(), c.at("num_layers").get<std::int64_t>());
  }
  std::sort(by_chunk.begin(), by_chunk.end());
  std::vector<std::int64_t> out;
  for (const auto& [chunk, n] : by_chunk) out.push_back(n);
  return out;
}

TEST(TorchtitanSplit, TheDefaultSplitIsTorchtitans) {
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(chunk_layers(analyze_json({"--model", "llama-3.1-70b", "--profile", "torchtitan", "--dp", "8", "--pp", "8",
                                       "--global-batch", "64", "--recompute", "full"})),
            (V{10, 11, 10, 10, 10, 10, 10, 9}));
  EXPECT_EQ(chunk_layers(analyze_json({"--model", "llama-3.1-8b", "--profile", "torchtitan", "--dp", "2", "--pp", "4",
                                       "--global-batch", "8"})),
            (V{8, 9, 8, 7}));
  EXPECT_EQ(chunk_layers(analyze_json({"--model", "llama-3.1-8b", "--profile", "torchtitan", "--dp", "2", "--pp", "4",
                                       "--vpp", "2", "--global-batch", "8"})),
            (V{4, 5, 4, 4, 4, 4, 4, 3}));
  EXPECT_EQ(chunk_layers(analyze_json({"--model", "llama-3.1-8b", "--profile", "torchtitan", "--dp", "2", "--pp", "4",
                                       "--layers-per-stage", "8,8,8,8", "--global-batch", "8"})),
            (V{8, 8, 8, 8}));
}

}  // namespace
