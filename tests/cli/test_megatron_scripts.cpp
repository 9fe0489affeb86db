// Issue 13, launch scripts: shell structure real scripts use, what a script must give, the
// vocabulary, the flags that change memory, --model against the script, and bounded expansion.
#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::run_cli;
using nlohmann::json;

const std::string kDir = std::string(MOEMEM_TEST_DATA_DIR) + "/megatron/";

std::string write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

// A small GQA model in Megatron's flags, and a layout.
const std::string kModel =
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --swiglu --disable-bias-linear "
    "--position-embedding-type rope --normalization RMSNorm --untie-embeddings-and-output-weights ";

json analyze_json(std::vector<std::string> args) {
  args.insert(args.begin(), "analyze");
  args.insert(args.end(), {"--format", "json"});
  const auto r = run_cli(args);
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? json::parse(r.out) : json();
}

bool has_assumption(const json& j, const std::string& part) {
  const auto& a = j.at("assumptions");
  return std::any_of(a.begin(), a.end(), [&](const json& s) { return s.get<std::string>().find(part) != std::string::npos; });
}

// Megatron's README style: the flags in quoted variables, expanded unquoted with word splitting.
// Before, these yielded no flags and moemem analysed DeepSeek-V3 at TP1 without a word.
TEST(MegatronScripts, QuotedFlagBlocksAreSplitIntoFlags) {
  const std::string path = write("blocks.sh",
                                 "#!/bin/bash\nGPUS=8\nNODES=2\nTP=$((GPUS / 4))\n"
                                 "GPT_ARGS=\"" + kModel + "--vocab-size 32000 --seq-length 2048\"\n"
                                 "PAR=\"--tensor-model-parallel-size ${TP} --sequence-parallel\"\n"
                                 "export EXTRA=${EXTRA:---micro-batch-size 2}\n"
                                 "torchrun --nproc_per_node $GPUS --nnodes $NODES pretrain_gpt.py $GPT_ARGS $PAR $EXTRA\n");
  const json j = analyze_json({"--megatron-args", path});
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j.at("parallel").at("tp"), 2);
  EXPECT_EQ(j.at("parallel").at("dp"), 8);
  EXPECT_EQ(j.at("parallel").at("sp"), true);
  EXPECT_EQ(j.at("training").at("micro_batch"), 2);
  EXPECT_NE(j.at("model").at("name").get<std::string>().find("megatron-args:"), std::string::npos);
}

TEST(MegatronScripts, NoModelOrNoLayoutIsAnError) {
  const std::string layout_only = write("layout_only.sh", "torchrun --nproc-per-node 8 train.py --tensor-model-parallel-size 2\n");
  const auto r = run_cli({"analyze", "--megatron-args", layout_only});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("'no model'"), std::string::npos) << r.err;
  EXPECT_EQ(run_cli({"analyze", "--megatron-args", layout_only, "--model", "llama-3.1-8b"}).code, 0);
  const std::string model_only = write("model_only.sh", "python train.py " + kModel + "--vocab-size 32000\n");
  const auto m = run_cli({"analyze", "--megatron-args", model_only});
  EXPECT_EQ(m.code, 2);
  EXPECT_NE(m.err.find("'no layout'"), std::string::npos) << m.err;
  EXPECT_EQ(run_cli({"analyze", "--megatron-args", model_only, "--dp", "8"}).code, 0);
  // Nothing read at all (a script whose flags are all behind variables it never sets).
  const auto empty = run_cli({"analyze", "--megatron-args", write("empty.sh", "torchrun train.py $ARGS\n")});
  EXPECT_EQ(empty.code, 2);
}

// The vocabulary: from --model when given, else from the tokenizer table, else a named error.
TEST(MegatronScripts, VocabularyFromModelOrTokenizer) {
  const std::string llama = write("llama_novocab.args",
                                  "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64\n"
                                  "--group-query-attention --num-query-groups 8 --kv-channels 128 --swiglu\n"
                                  "--disable-bias-linear --untie-embeddings-and-output-weights --normalization RMSNorm\n"
                                  "--position-embedding-type rope --tensor-model-parallel-size 8\n");
  EXPECT_EQ(run_cli({"analyze", "--megatron-args", llama}).code, 2);
  const json named = analyze_json({"--megatron-args", llama, "--model", "llama-3.1-70b"});
  ASSERT_FALSE(named.is_null());
  EXPECT_EQ(named.at("model").at("total_params").get<std::int64_t>(), 70553706496);
  // From the tokenizer the script names: meta-llama/Llama-3.1-70B's config.json, vocab_size 128256.
  std::ifstream in(llama);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const json table =
      analyze_json({"--megatron-args", write("llama_tok.args", text + "--tokenizer-model meta-llama/Llama-3.1-70B\n")});
  ASSERT_FALSE(table.is_null());
  EXPECT_EQ(table.at("model").at("total_params").get<std::int64_t>(), 70553706496);
}

TEST(MegatronScripts, TokenizerTableGivesTheVocabularyAndSaysSo) {
  const std::string qwen = write("qwen_tok.sh", "torchrun --nproc-per-node 8 train.py " + kModel +
                                                     "--tokenizer-type HuggingFaceTokenizer --tokenizer-model "
                                                     "Qwen/Qwen3-235B-A22B --seq-length 1024\n");
  const json j = analyze_json({"--megatron-args", qwen});
  ASSERT_FALSE(j.is_null());
  EXPECT_TRUE(has_assumption(j, "vocabulary 151936 from --tokenizer-model Qwen/Qwen3-235B-A22B")) << j.at("assumptions");
}

// Every architecture flag is compared with --model, not 7 of them.
TEST(MegatronScripts, ModelMustAgreeOnEveryArchitectureFlag) {
  const std::string args = kDir + "llama3_70b_tp8_pp4.args";
  std::ifstream in(args);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::pair<std::string, std::string> edits[] = {
      {"--num-query-groups 8", "--num-query-groups"},
      {"--swiglu ", "--swiglu"},
      {"--untie-embeddings-and-output-weights ", "--untie-embeddings-and-output-weights"},
      {"--kv-channels 128", "--kv-channels"},
  };
  for (const auto& [from, flag] : edits) {
    std::string t = text;
    const auto at = t.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    t.replace(at, from.size(), from == "--num-query-groups 8" ? "--num-query-groups 4"
                               : from == "--kv-channels 128"  ? "--kv-channels 64"
                                                              : "");
    const auto r = run_cli({"analyze", "--megatron-args", write("edited.args", t), "--dp", "4", "--model", "llama-3.1-70b"});
    EXPECT_EQ(r.code, 2) << flag;
    EXPECT_NE(r.err.find("--megatron-args " + flag), std::string::npos) << r.err;
  }
}

TEST(MegatronScripts, SecondScriptIsAnError) {
  const std::string s = kDir + "llama3_70b_tp8_pp4.args";
  const auto r = run_cli({"analyze", "--megatron-args", s, "--megatron-args", s, "--dp", "4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("given twice"), std::string::npos) << r.err;
}

// Inline flags written --dp=32 win like --dp 32 (the issue: ignored for dp, a world size of 4,096
// from a 1,024-GPU script).
TEST(MegatronScripts, InlineEqualsFormWinsForEveryDegree) {
  const std::string s = kDir + "deepseek_v3_tp2_pp8_vpp4_ep64.sh";
  for (const auto& dp : {std::vector<std::string>{"--dp=32"}, std::vector<std::string>{"--dp", "32"}}) {
    std::vector<std::string> args{"--megatron-args", s};
    args.insert(args.end(), dp.begin(), dp.end());
    const json j = analyze_json(args);
    ASSERT_FALSE(j.is_null());
    EXPECT_EQ(j.at("parallel").at("dp"), 32);
    EXPECT_EQ(j.at("parallel").at("tp"), 2);
  }
}

// An inline --zero wins over the script's --use-distributed-optimizer (it was dropped: ZeRO 1
// whatever was asked).
TEST(MegatronScripts, InlineZeroWinsOverTheScriptsDistributedOptimizer) {
  const std::string s = write("dist-opt.sh", "pretrain_gpt.py " + kModel + "--vocab-size 32000 --seq-length 512 --use-distributed-optimizer --bf16\n");
  EXPECT_EQ(analyze_json({"--megatron-args", s, "--dp", "8"}).at("training").at("zero"), 1);
  EXPECT_EQ(analyze_json({"--megatron-args", s, "--dp", "8", "--zero", "0"}).at("training").at("zero"), 0);
  EXPECT_EQ(analyze_json({"--megatron-args", s, "--dp", "8", "--zero", "1"}).at("training").at("zero"), 1);
}

// Precision as Megatron's validate_args sets it: --fp16 keeps fp16 main gradients unless
// --accumulate-allreduce-grads-in-fp32 (only --bf16 turns that on); without --bf16 or --fp16 the
// launch would train in fp32, which is said. MoE: the allgather dispatcher (Megatron's default) is
// costed, named or by omission.
TEST(MegatronScripts, PrecisionAndDispatcherAsMegatronDefaultsThem) {
  const std::string launch = "pretrain_gpt.py " + kModel + "--vocab-size 32000 --seq-length 512 --micro-batch-size 1 ";
  const auto grads = [&](const std::string& name, const std::string& flags) {
    const json j = analyze_json({"--megatron-args", write(name, launch + flags + "\n"), "--dp", "8"});
    return j.is_null() ? std::string() : j.at("training").at("dtypes").at("gradients").get<std::string>();
  };
  EXPECT_EQ(grads("p-bf16.sh", "--bf16"), "fp32");
  EXPECT_EQ(grads("p-fp16.sh", "--fp16"), "fp16");
  EXPECT_EQ(grads("p-fp16-acc.sh", "--fp16 --accumulate-allreduce-grads-in-fp32"), "fp32");
  const auto none = run_cli({"analyze", "--megatron-args", write("p-none.sh", launch + "\n"), "--dp", "8"});
  EXPECT_EQ(none.code, 0) << none.err;
  EXPECT_NE(none.err.find("neither --bf16 nor --fp16: Megatron would train this launch in fp32"), std::string::npos) << none.err;
  const std::string moe = launch + "--bf16 --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 8 ";
  const auto dispatcher = [&](const std::string& flags) {
    const json j = analyze_json({"--megatron-args", write("p-moe.sh", moe + flags + "\n"), "--dp", "8"});
    return j.is_null() ? std::string() : j.at("training").at("moe_token_dispatcher").get<std::string>();
  };
  EXPECT_EQ(dispatcher(""), "allgather");
  EXPECT_EQ(dispatcher("--moe-token-dispatcher-type allgather"), "allgather");
  EXPECT_EQ(dispatcher("--moe-token-dispatcher-type alltoall"), "alltoall");
}

// count reads the model of a launch script (--megatron-args is a model flag): Llama-3.1-70B's
// published total, 70,553,706,496; a --model given too must agree with it.
TEST(MegatronScripts, CountReadsTheScriptsModel) {
  const auto r = run_cli({"count", "--megatron-args", kDir + "llama3_70b_tp8_pp4.args", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("total_params"), 70'553'706'496LL);
  EXPECT_EQ(run_cli({"count", "--megatron-args", kDir + "llama3_70b_tp8_pp4.args", "--model", "llama-3.1-70b"}).code, 0);
  const auto other = run_cli({"count", "--megatron-args", kDir + "llama3_70b_tp8_pp4.args", "--model", "llama-3.1-8b"});
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.err.find("--num-layers"), std::string::npos) << other.err;
  const auto none = run_cli({"count", "--megatron-args", write("no-model.sh", "--tensor-model-parallel-size 2\n")});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("no model"), std::string::npos) << none.err;
}

TEST(MegatronScripts, AssumedSequenceLengthIsNamed) {
  const std::string path = write("noseq.args", kModel + "--vocab-size 32000 --tensor-model-parallel-size 1\n");
  const json j = analyze_json({"--megatron-args", path});
  ASSERT_FALSE(j.is_null());
  EXPECT_TRUE(has_assumption(j, "the script gives no --seq-length: assumed 4096")) << j.at("assumptions");
  const json given = analyze_json({"--megatron-args", path, "--seq-len", "2048"});
  ASSERT_FALSE(given.is_null());
  EXPECT_FALSE(has_assumption(given, "--seq-length"));
}

// Issue 13's list of flags that change memory: each refused by name, or modelled.
TEST(MegatronScripts, MemoryFlagsAreRefusedByName) {
  for (const std::string flags :
       {"--fp8-param-gather", "--tp-comm-overlap-cfg ub.yaml",
        "--reuse-grad-buf-for-mxfp8-param-ag", "--cuda-graph-impl full_iteration", "--cuda-graph-retain-backward-graph",
        "--moe-pad-expert-input-to-capacity", "--optimizer sgd", "--optimizer muon"}) {
    const std::string path = write("refused.args", kModel + "--vocab-size 32000 --tensor-model-parallel-size 1 " + flags + "\n");
    const auto r = run_cli({"analyze", "--megatron-args", path});
    EXPECT_EQ(r.code, 2) << flags;
    const std::string flag = flags.substr(0, flags.find(' '));
    EXPECT_NE(r.err.find(": " + flag + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("not modelled yet"), std::string::npos) << r.err;
  }
}

// Launches Megatron refuses at start-up are refused, naming the flag (arguments.py validate_args,
// TransformerConfig.__post_init__, OptimizerConfig.__post_init__).
TEST(MegatronScripts, LaunchesMegatronRefusesAreRefused) {
  const std::string base = kModel + "--vocab-size 32000 --tensor-model-parallel-size 1 ";
  for (const auto& [flags, field] : std::vector<std::pair<std::string, std::string>>{
           {"--bf16 --fp16", "--fp16"},
           {"--fp8-format e5m2", "--fp8-format"},
           {"--recompute-granularity full --recompute-num-layers 1", "--recompute-method"},
           {"--recompute-granularity full --recompute-method uniform", "--recompute-num-layers"},
           {"--exp-avg-dtype bf16", "--exp-avg-dtype"},
           {"--main-params-dtype fp16", "--main-params-dtype"},
           {"--optimizer-cpu-offload", "--optimizer-cpu-offload"},
           // get_megatron_optimizer: precision-aware only with the distributed optimizer.
           {"--use-precision-aware-optimizer --exp-avg-dtype bf16", "--use-precision-aware-optimizer"},
           // TransformerConfig.__post_init__: not with full granularity.
           {"--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --moe-layer-recompute",
            "--moe-layer-recompute"}}) {
    // File names of its own: ctest runs each test as its own process, in parallel.
    const auto r = run_cli({"analyze", "--megatron-args", write("launch_refused.args", base + flags + "\n")});
    EXPECT_EQ(r.code, 2) << flags;
    EXPECT_NE(r.err.find(field), std::string::npos) << flags << ": " << r.err;
  }
  // 4 layers over pp 3 without an uneven split; with the embedding and loss accounted (6 units) it divides.
  const auto pp3 = run_cli({"analyze", "--megatron-args", write("launch_pp3.args", base + "--pipeline-model-parallel-size 3\n")});
  EXPECT_EQ(pp3.code, 2);
  EXPECT_NE(pp3.err.find("--num-layers"), std::string::npos) << pp3.err;
  EXPECT_EQ(run_cli({"analyze", "--megatron-args",
                     write("launch_pp3el.args", base + "--pipeline-model-parallel-size 3 --account-for-embedding-in-pipeline-split "
                                                "--account-for-loss-in-pipeline-split\n")})
                .code,
            0);
  // The same settings in the form Megatron accepts.
  for (const std::string ok : {"--bf16", "--fp8-format hybrid", "--recompute-granularity full --recompute-method uniform "
                               "--recompute-num-layers 1",
                               "--use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype bf16"}) {
    EXPECT_EQ(run_cli({"analyze", "--megatron-args", write("launch_accepted.args", base + ok + "\n")}).code, 0) << ok;
  }
}

// Flags a script reads into a variable with `read` (from a here-document), `mapfile` or
// `printf -v` are not evaluated: a launch that expands such a variable is refused, naming the
// line, rather than costed without those flags.
TEST(MegatronScripts, VariablesSetFromUnreadInputAreRefusedWhereUsed) {
  const std::string launch = "torchrun --nproc_per_node 8 pretrain_gpt.py " + kModel + "--vocab-size 32000 --seq-length 2048 "
                             "--micro-batch-size 1 --global-batch-size 8 --bf16 ";
  for (const std::string head : {"read -r -d '' MEM <<'EOT'\n--recompute-granularity selective\nEOT\n",
                                 "mapfile -t MEM < <(printf '%s\\n' --use-distributed-optimizer)\n",
                                 "printf -v MEM '%s' \"$(cat extra_args.txt)\"\n"}) {
    const auto r = run_cli({"analyze", "--megatron-args", write("unread.sh", head + launch + "$MEM\n")});
    EXPECT_EQ(r.code, 2) << head;
    EXPECT_NE(r.err.find("line "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("does not evaluate"), std::string::npos) << r.err;
  }
  // A variable read but never expanded into the launch changes nothing.
  EXPECT_EQ(run_cli({"analyze", "--megatron-args", write("unused.sh", "read -r HOSTS < hostfile\n" + launch + "\n")}).code, 0);
}

// Among the arguments, the output of a command moemem does not run (`$(cat extra_args.txt)`,
// directly or through a variable) could be any flags: refused, naming the line. The same output
// as a flag's value (torchrun's --nproc_per_node $(nvidia-smi -L | wc -l)) is only not read.
TEST(MegatronScripts, CommandOutputAmongTheArgumentsIsRefused) {
  const std::string launch = "torchrun --nproc_per_node 8 pretrain_gpt.py " + kModel + "--vocab-size 32000 --seq-length 2048 "
                             "--micro-batch-size 1 --global-batch-size 8 --bf16 ";
  for (const auto& [name, text] : {std::pair{"cmdout-direct.sh", launch + "$(cat extra_args.txt)\n"},
                                   std::pair{"cmdout-variable.sh", "EXTRA=$(cat extra_args.txt)\n" + launch + "$EXTRA\n"},
                                   std::pair{"cmdout-backticks.sh", launch + "`cat extra_args.txt`\n"}}) {
    const auto r = run_cli({"analyze", "--megatron-args", write(name, text)});
    EXPECT_EQ(r.code, 2) << name;
    EXPECT_NE(r.err.find("line "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("the output of `cat`"), std::string::npos) << r.err;
  }
  const auto nproc = run_cli({"analyze", "--megatron-args",
                              write("cmdout-value.sh", "torchrun --nproc_per_node $(nvidia-smi -L | wc -l) pretrain_gpt.py " + kModel +
                                                           "--vocab-size 32000 --seq-length 2048 --micro-batch-size 1 "
                                                           "--global-batch-size 8 --bf16 --tensor-model-parallel-size 2\n")});
  EXPECT_EQ(nproc.code, 0) << nproc.err;
  EXPECT_NE(nproc.err.find("not read"), std::string::npos) << nproc.err;
}

TEST(MegatronScripts, MemoryFlagsWithAMechanismAreModelled) {
  const std::string base = kModel + "--vocab-size 32000 --tensor-model-parallel-size 1 ";
  const json legacy = analyze_json({"--megatron-args", write("ra.args", base + "--recompute-activations\n")});
  ASSERT_FALSE(legacy.is_null());
  EXPECT_EQ(legacy.at("training").at("recompute"), "selective");
  // --optimizer-cpu-offload with its fraction: that share of the optimizer shard on the host.
  const json offload =
      analyze_json({"--megatron-args", write("of.args", base + "--use-distributed-optimizer --use-precision-aware-optimizer --optimizer-cpu-offload "
                                                              "--optimizer-offload-fraction 0.5\n")});
  ASSERT_FALSE(offload.is_null());
  EXPECT_GT(offload.at("stages").at(0).at("bytes").at("host").get<std::uint64_t>(), 0u);
  const json bf16 = analyze_json({"--megatron-args", write("gr.args", base + "--grad-reduce-in-bf16\n")});
  ASSERT_FALSE(bf16.is_null());
  EXPECT_EQ(bf16.at("training").at("dtypes").at("gradients"), "bf16");
  const std::string moe = base + "--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 8 ";
  for (const std::string d : {"--moe-token-dispatcher-type flex", "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep"}) {
    const json j = analyze_json({"--megatron-args", write("flex.args", moe + d + "\n"), "--dp", "8"});
    ASSERT_FALSE(j.is_null());
    EXPECT_EQ(j.at("training").at("moe_token_dispatcher"), "deepep") << d;
  }
  const json adam = analyze_json({"--megatron-args", write("adam.args", base + "--optimizer adam --cuda-graph-impl none "
                                                                               "--cross-entropy-loss-fusion\n")});
  ASSERT_FALSE(adam.is_null());
  EXPECT_TRUE(has_assumption(adam, "--cross-entropy-loss-fusion (native)")) << adam.at("assumptions");
  // Flags Megatron's source shows change no memory are ignored, and listed in the output.
  const json ignored = analyze_json({"--megatron-args", write("lr.args", base + "--lr 1e-4 --weird-flag 3\n")});
  ASSERT_FALSE(ignored.is_null());
  EXPECT_TRUE(has_assumption(ignored, "flags ignored (Megatron's source shows they change no GPU memory): --lr 1e-4"));
  EXPECT_TRUE(has_assumption(ignored, "flags not recognised (assumed not to change memory; check them): --weird-flag 3"));
}

// A memory-relevant flag that depends on what the script cannot know is refused, naming it.
TEST(MegatronScripts, FlagsDependingOnTheEnvironmentAreRefused) {
  const std::string path = write("env.sh", "TP=$(nvidia-smi -L | wc -l)\ntorchrun train.py " + kModel +
                                               "--vocab-size 32000 --tensor-model-parallel-size $TP\n");
  const auto r = run_cli({"analyze", "--megatron-args", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tensor-model-parallel-size"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the output of `nvidia-smi`"), std::string::npos) << r.err;
}

// A 700-byte script whose variable doubles on every line took 2.6 GB; now a named error.
TEST(MegatronScripts, DoublingVariablesHitANamedLimit) {
  std::string s = "A=--lr\n";
  for (int i = 0; i < 40; ++i) s += "A=\"$A $A\"\n";
  const auto r = run_cli({"analyze", "--megatron-args", write("double.sh", s + "python train.py $A\n")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("shell expansion limit"), std::string::npos) << r.err;
}

TEST(MegatronScripts, ZeroWidthsAndEmptyLayerListsAreNamed) {
  const std::string moe = "--num-experts 4 --moe-router-topk 2 --moe-shared-expert-intermediate-size 64 ";
  const auto zero = run_cli({"analyze", "--megatron-args",
                             write("ffn0.args", kModel + moe + "--vocab-size 128 --ffn-hidden-size 0 --tensor-model-parallel-size 1\n")});
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.err.find("--ffn-hidden-size"), std::string::npos) << zero.err;
  const auto freq = run_cli({"analyze", "--megatron-args",
                             write("freq.args", kModel + moe + "--moe-ffn-hidden-size 32 --vocab-size 128 "
                                                               "--moe-layer-freq '[]*2147483648+[1]*4' --tensor-model-parallel-size 1\n")});
  EXPECT_EQ(freq.code, 2);
  EXPECT_NE(freq.err.find("--moe-layer-freq"), std::string::npos) << freq.err;
}

// A ModelZoo YAML recipe given directly: its MODEL_ARGS are the flags; a ${VAR} the recipe leaves
// to its launcher is refused by name for a memory-relevant flag.
TEST(MegatronScripts, ModelZooRecipeReadsItsModelArgs) {
  const std::string recipe = kDir + "modelzoo/model_configs/benchmarking/DeepSeek-V3.yaml";
  const auto r = run_cli({"analyze", "--megatron-args", recipe});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tensor-model-parallel-size"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("$TP, which the script does not set"), std::string::npos) << r.err;
  const std::string fixed = write("recipe.yaml",
                                  "ENV_VARS:\n  NCCL_DEBUG: VERSION\nMODEL_ARGS:\n  --num-layers: 4\n  --hidden-size: 1024\n"
                                  "  --num-attention-heads: 8\n  --swiglu: true\n  --disable-bias-linear: true\n"
                                  "  --position-embedding-type: rope\n  --vocab-size: 32000\n  --qk-layernorm: false\n"
                                  "  --tensor-model-parallel-size: 2\n  --sequence-parallel: true\n");
  const json j = analyze_json({"--megatron-args", fixed, "--dp", "4"});
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j.at("parallel").at("tp"), 2);
  EXPECT_EQ(j.at("parallel").at("sp"), true);
  const auto bad = run_cli({"analyze", "--megatron-args", write("bad.yaml", "MODEL_ARGS:\n  - [unclosed\n")});
  EXPECT_EQ(bad.code, 2);
}

}  // namespace

namespace {

// Routed experts follow Megatron's gated_linear_unit (--swiglu, --quick-geglu): TEGroupedMLP's
// fc1 is 2 ffn wide only then (moe/experts.py); with biased linear layers each expert's fc1 and
// fc2 carry biases. Counted by hand for 4 layers of 8 experts, h 1024, ffn 4096.
TEST(MegatronScripts, ExpertGatingAndBiasesFollowTheScript) {
  const std::string moe =
      "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --position-embedding-type rope "
      "--normalization RMSNorm --untie-embeddings-and-output-weights --vocab-size 32000 --num-experts 8 "
      "--tensor-model-parallel-size 1 ";
  const auto params = [&](const std::string& name, const std::string& extra) {
    const json j = analyze_json({"--megatron-args", write(name, moe + extra + "\n"), "--dp", "8", "--ep", "8"});
    return j.is_null() ? std::uint64_t{0} : j.at("model").at("total_params").get<std::uint64_t>();
  };
  const std::uint64_t ungated = params("gelu.args", "--disable-bias-linear");
  const std::uint64_t swiglu = params("swiglu.args", "--disable-bias-linear --swiglu");
  const std::uint64_t geglu = params("geglu.args", "--disable-bias-linear --quick-geglu");
  const std::uint64_t biased = params("bias.args", "");
  ASSERT_GT(ungated, 0u);
  // The gate half of fc1: 4 layers x 8 experts x 4096 x 1024.
  EXPECT_EQ(swiglu - ungated, 4ull * 8 * 4096 * 1024);
  EXPECT_EQ(geglu, swiglu);
  // Per layer: qkv bias 3 x 1024, proj bias 1024, 8 experts' fc1 bias 4096 and fc2 bias 1024.
  EXPECT_EQ(biased - ungated, 4ull * (3 * 1024 + 1024 + 8 * 4096 + 8 * 1024));
}

// --moe-layer-recompute (TransformerConfig.__post_init__): selective, with moe added to the modules.
TEST(MegatronScripts, MoeLayerRecomputeIsSelectiveRecomputationOfTheMoeLayer) {
  const std::string moe = kModel + "--vocab-size 32000 --num-experts 8 --tensor-model-parallel-size 1 ";
  const json flag = analyze_json({"--megatron-args", write("mlr.args", moe + "--moe-layer-recompute\n"), "--dp", "8", "--ep", "8"});
  const json inline_modules = analyze_json({"--megatron-args", write("mlr2.args", moe + "\n"), "--dp", "8", "--ep", "8",
                                            "--recompute", "selective", "--recompute-modules", "core_attn,moe"});
  ASSERT_FALSE(flag.is_null());
  ASSERT_FALSE(inline_modules.is_null());
  EXPECT_EQ(flag.at("training").at("recompute"), "selective");
  EXPECT_EQ(flag.at("peak").at("total_bytes"), inline_modules.at("peak").at("total_bytes"));
  const json none = analyze_json({"--megatron-args", write("mlr3.args", moe + "\n"), "--dp", "8", "--ep", "8"});
  ASSERT_FALSE(none.is_null());
  EXPECT_LT(flag.at("stages").at(0).at("bytes").at("activations").get<std::uint64_t>(),
            none.at("stages").at(0).at("bytes").at("activations").get<std::uint64_t>());
}

}  // namespace

namespace {

// A hybrid layer pattern replaces Megatron's GPT layers (and derives --num-layers): refused by
// name before the script is read as a GPT stack (it was costed as one, about twice the memory).
TEST(MegatronScripts, HybridPatternsAndCustomSpecsAreRefusedByName) {
  for (const auto& [name, flags] : std::vector<std::pair<std::string, std::string>>{
           {"hy1.sh", "--hidden-size 1024 --num-attention-heads 8 --hybrid-layer-pattern M-M-*-"},
           {"hy2.sh", "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --is-hybrid-model "
                      "--hybrid-override-pattern M-*-"},
           {"hy3.sh", "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --spec pkg.models get_spec"}}) {
    const auto r = run_cli({"analyze", "--megatron-args", write(name, "torchrun pretrain_gpt.py " + flags +
                                                                          " --vocab-size 32000 --tensor-model-parallel-size 1\n")});
    EXPECT_EQ(r.code, 2) << flags;
    EXPECT_NE(r.err.find("not modelled yet"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
  }
}

}  // namespace

namespace {

// slime's model files (scripts/models/*.sh) build --moe-layer-freq with a C-style loop and
// printf -v, and their run scripts source them from "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")"
// && pwd)": each evaluated as bash does ("${arr[*]}" joined with IFS's first character).
TEST(MegatronScripts, SlimeStyleModelFilesAreEvaluated) {
  const std::string dir = ::testing::TempDir() + "/slime_style";
  std::filesystem::create_directories(dir + "/models");
  {
    std::ofstream m(dir + "/models/moe.sh");
    m << "NLAYERS=6\nFIRST_K_DENSE_REPLACE=2\narr=()\nfor ((i=0; i<NLAYERS; i++)); do\n"
         "  if (( i < FIRST_K_DENSE_REPLACE )); then\n    arr+=(0)\n  else\n    arr+=(1)\n  fi\ndone\n"
         "printf -v MOE_LAYER_FREQ \"[%s]\" \"$(IFS=', '; echo \"${arr[*]}\")\"\n"
         "MODEL_ARGS=(--num-layers 6 --hidden-size 1024 --ffn-hidden-size 2048 --num-attention-heads 8 --swiglu "
         "--disable-bias-linear --position-embedding-type rope --vocab-size 32000 --num-experts 8 "
         "--moe-layer-freq $MOE_LAYER_FREQ)\n";
  }
  {
    std::ofstream r(dir + "/run.sh");
    r << "SCRIPT_DIR=\"$(cd -- \"$(dirname -- \"${BASH_SOURCE[0]}\")\" &>/dev/null && pwd)\"\n"
         "source \"${SCRIPT_DIR}/models/moe.sh\"\n"
         "torchrun pretrain_gpt.py ${MODEL_ARGS[@]} --tensor-model-parallel-size 1 --expert-model-parallel-size 8\n";
  }
  const json j = analyze_json({"--megatron-args", dir + "/run.sh", "--dp", "8"});
  ASSERT_FALSE(j.is_null());
  // 2 dense layers (fc1 2 x 2048, fc2) and 4 MoE layers of 8 such experts and a router, by hand:
  // the embedding 32000 x 1024 (tied to the head: Megatron's default), final LayerNorm (weight and
  // bias: Megatron's default normalization); per layer qkv 3 x 1024^2, proj 1024^2, two LayerNorms.
  const std::uint64_t h = 1024, f = 2048, mlp = 3 * h * f;
  const std::uint64_t per_layer = 4 * h * h + 4 * h;
  const std::uint64_t expected = 32000 * h + 2 * h + 6 * per_layer + 2 * mlp + 4 * (8 * mlp + 8 * h);
  EXPECT_EQ(j.at("model").at("total_params").get<std::uint64_t>(), expected);
  EXPECT_EQ(j.at("training").at("zero"), 0);
  // slime's train.py (its rollout and actor flags) turns the distributed optimizer on, so its
  // precision-aware optimizer without --use-distributed-optimizer is a launch slime runs.
  {
    std::ofstream r(dir + "/slime.sh");
    r << "source \"$(dirname \"${BASH_SOURCE[0]}\")/models/moe.sh\"\n"
         "ray job submit -- python3 train.py ${MODEL_ARGS[@]} --tensor-model-parallel-size 1 "
         "--expert-model-parallel-size 8 --actor-num-nodes 1 --actor-num-gpus-per-node 8 --rollout-batch-size 32 "
         "--use-precision-aware-optimizer\n";
  }
  const json slime = analyze_json({"--megatron-args", dir + "/slime.sh", "--dp", "8"});
  ASSERT_FALSE(slime.is_null());
  EXPECT_EQ(slime.at("training").at("zero"), 1);
  EXPECT_TRUE(has_assumption(slime, "marks a slime launch")) << slime.at("assumptions");
}

}  // namespace

namespace {

// A script that stops before its launch (an exit on a variable its environment would set) gives no
// Megatron flag: refused, with the line it stopped at, even with --model (it was costed at tp 1 pp 1).
TEST(MegatronScripts, AScriptThatExitsBeforeItsLaunchIsRefused) {
  const std::string path = write("exits.sh", "if [ -z \"$BASE_FOLDER\" ]; then\n  echo need BASE_FOLDER\n  exit 1\nfi\n"
                                             "torchrun pretrain_gpt.py " + kModel +
                                                 "--vocab-size 32000 --tensor-model-parallel-size 4\n");
  const auto r = run_cli({"analyze", "--megatron-args", path, "--model", "llama-3.1-8b", "--dp", "2"});
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("no Megatron flags"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("line 3: exit"), std::string::npos) << r.err;
}

}  // namespace

namespace {

// A diff review's findings on the evaluator, each a silent wrong figure before its fix.
TEST(MegatronScripts, ShellLoopsAndJoinsStayHonest) {
  const std::string launch = "torchrun pretrain_gpt.py --hidden-size 256 --num-attention-heads 4 --vocab-size 1000 "
                             "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 "
                             "--tensor-model-parallel-size 1 --bf16 ";
  // A loop whose bound is not known taints what it sets: refused, not costed with the value before it.
  const auto unknown = run_cli({"analyze", "--megatron-args",
                                write("cfor_unknown.sh", "N=$(nproc)\nNL=1\nfor ((i=0; i<N; i++)); do NL=$((NL+1)); done\n" +
                                                             launch + "--num-layers $NL\n"),
                                "--dp", "8"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("for loop on line 3"), std::string::npos) << unknown.err;
  // IFS saved and restored around a join: bash's default IFS comes back, the flags split as words.
  const json restored = analyze_json({"--megatron-args",
                                      write("ifs_restore.sh", "OLDIFS=\"$IFS\"\nIFS=,\nIFS=\"$OLDIFS\"\n"
                                                              "R=\"--recompute-granularity full --recompute-method uniform "
                                                              "--recompute-num-layers 1\"\n" +
                                                                  launch + "--num-layers 2 $R\n"),
                                      "--dp", "8"});
  ASSERT_FALSE(restored.is_null());
  EXPECT_EQ(restored.at("training").at("recompute"), "full");
  // printf -v NAME -- FORMAT ARGS: the -- ends the options.
  const json dashdash = analyze_json(
      {"--megatron-args", write("printf_dd.sh", "printf -v L -- '%s' 3\n" + launch + "--num-layers $L\n"), "--dp", "8"});
  ASSERT_FALSE(dashdash.is_null());
  const json three = analyze_json({"--megatron-args", write("three.sh", launch + "--num-layers 3\n"), "--dp", "8"});
  EXPECT_EQ(dashdash.at("model").at("total_params"), three.at("model").at("total_params"));
}

// --quick-geglu is gated, but the 2/3 default width is --swiglu's alone (validate_args).
TEST(MegatronScripts, QuickGegluKeepsMegatronsDefaultWidth) {
  const std::string base = "--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --disable-bias-linear "
                           "--position-embedding-type rope --vocab-size 32000 --tensor-model-parallel-size 1 ";
  const json geglu = analyze_json({"--megatron-args", write("qg.args", base + "--quick-geglu\n")});
  const json explicit_ffn = analyze_json({"--megatron-args", write("qg4h.args", base + "--quick-geglu --ffn-hidden-size 4096\n")});
  ASSERT_FALSE(geglu.is_null());
  EXPECT_EQ(geglu.at("model").at("total_params"), explicit_ffn.at("model").at("total_params"));
}

// Launches Megatron refuses or moemem cannot cost: refused by name.
TEST(MegatronScripts, BiasedSharedExpertsAndHybridRatiosAreRefused) {
  const std::string moe = "--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --swiglu --vocab-size 32000 "
                          "--position-embedding-type rope --num-experts 8 --moe-shared-expert-intermediate-size 1024 "
                          "--tensor-model-parallel-size 1\n";
  const auto shared = run_cli({"analyze", "--megatron-args", write("shared_bias.args", moe)});
  EXPECT_EQ(shared.code, 2);
  EXPECT_NE(shared.err.find("--disable-bias-linear"), std::string::npos) << shared.err;
  const auto ratio = run_cli({"analyze", "--megatron-args",
                              write("mamba_ratio.sh", "torchrun pretrain_mamba.py --num-layers 4 --hidden-size 256 "
                                                      "--num-attention-heads 4 --hybrid-attention-ratio 0.25 "
                                                      "--vocab-size 1000 --tensor-model-parallel-size 1\n")});
  EXPECT_EQ(ratio.code, 2);
  EXPECT_NE(ratio.err.find("--hybrid-attention-ratio"), std::string::npos) << ratio.err;
}

}  // namespace
