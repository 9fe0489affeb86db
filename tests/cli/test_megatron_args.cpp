// `analyze --megatron-args FILE`: a Megatron-LM launch script gives the same report as moemem's
// own flags for the same run (issue 5), lists what it does not model, and refuses what would
// change memory unmodelled.
#include <algorithm>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::run_cli;
using nlohmann::json;

const std::string kDir = std::string(MOEMEM_TEST_DATA_DIR) + "/megatron/";

json analyze_json(std::vector<std::string> args) {
  args.insert(args.begin(), "analyze");
  args.push_back("--format");
  args.push_back("json");
  const auto r = run_cli(args);
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? json::parse(r.out) : json();
}

// NVIDIA's published DeepSeek-V3 recipe (TP2 PP8 VPP4 EP64 ETP1 on 1,024 GPUs, layout Et|(tt|)*30mL,
// MTP 1, recompute mla_up_proj and mlp) written as a launch script, against the same run in
// moemem's flags (the script's --expert-tensor-parallel-size 1 is --etp 1).
TEST(MegatronArgs, DeepSeekV3RecipeMatchesEquivalentFlags) {
  const json script = analyze_json({"--megatron-args", kDir + "deepseek_v3_tp2_pp8_vpp4_ep64.sh"});
  const json flags = analyze_json({"--model", "deepseek-v3", "--tp", "2", "--pp", "8", "--vpp", "4", "--ep", "64",
                                   "--etp", "1", "--dp", "64", "--sp", "--pipeline-model-parallel-layout", "Et|(tt|)*30mL", "--mtp",
                                   "1", "--recompute", "selective", "--recompute-modules", "mla_up_proj,mlp",
                                   "--distributed-optimizer", "--micro-batch", "1", "--global-batch", "8192",
                                   "--seq-len", "4096", "--main-grads-dtype", "bf16", "--exp-avg-dtype", "bf16",
                                   "--exp-avg-sq-dtype", "bf16"});
  ASSERT_FALSE(script.is_null());
  ASSERT_FALSE(flags.is_null());
  EXPECT_EQ(script.at("model").at("total_params"), flags.at("model").at("total_params"));
  EXPECT_EQ(script.at("parallel"), flags.at("parallel"));
  EXPECT_EQ(script.at("training"), flags.at("training"));
  EXPECT_EQ(script.at("stages"), flags.at("stages"));
  // The script's world size (torchrun 128 nodes x 8) gives dp = 1024 / (2 x 8) = 64.
  EXPECT_EQ(script.at("parallel").at("dp"), 64);
  EXPECT_EQ(script.at("parallel").at("num_chunks"), 32);
  // DeepSeek-V3 with MTP and the router bias (paper-method.md §2): 684,489,845,504.
  EXPECT_EQ(script.at("model").at("total_params").get<std::int64_t>(), 684489845504);
}

TEST(MegatronArgs, UnknownFlagsAreListedNotDropped) {
  const auto r = run_cli({"analyze", "--megatron-args", kDir + "deepseek_v3_tp2_pp8_vpp4_ep64.sh"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* flag : {"--lr 3.9e-6", "--overlap-grad-reduce", "--moe-aux-loss-coeff 1e-4"}) {
    EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
  }
}

TEST(MegatronArgs, InlineFlagsOverrideTheScript) {
  const json k = analyze_json({"--megatron-args", kDir + "deepseek_v3_tp2_pp8_vpp4_ep64.sh", "--global-batch", "1024"});
  ASSERT_FALSE(k.is_null());
  EXPECT_EQ(k.at("training").at("global_batch"), 1024);
  EXPECT_EQ(k.at("training").at("microbatches_per_step"), 1024 / 64);
}

// Llama-3.1-70B in Megatron's flags describes the same tensors as its Hugging Face config
// (70,553,706,496 parameters, paper-method.md §2), and full recomputation comes through.
TEST(MegatronArgs, LlamaArgumentFileDescribesTheSameModel) {
  const json script = analyze_json({"--megatron-args", kDir + "llama3_70b_tp8_pp4.args", "--dp", "4"});
  ASSERT_FALSE(script.is_null());
  EXPECT_EQ(script.at("model").at("total_params").get<std::int64_t>(), 70553706496);
  EXPECT_EQ(script.at("training").at("recompute"), "full");
  const json preset = analyze_json({"--megatron-args", kDir + "llama3_70b_tp8_pp4.args", "--dp", "4", "--model",
                                    "llama-3.1-70b"});
  ASSERT_FALSE(preset.is_null());
  EXPECT_EQ(script.at("stages"), preset.at("stages"));
}

TEST(MegatronArgs, ScriptContradictingTheNamedModelIsRefused) {
  const auto r = run_cli({"analyze", "--megatron-args", kDir + "llama3_70b_tp8_pp4.args", "--model", "mixtral-8x7b"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--num-layers"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mixtral-8x7b"), std::string::npos) << r.err;
}

TEST(MegatronArgs, UnmodelledMemoryFlagsAreErrors) {
  // A file of its own: ctest runs tests in parallel, and Fp8FlagsMapToTheRecipe writes fp8.args.
  const std::string path = ::testing::TempDir() + "unmodelled.args";
  {
    std::ofstream f(path);
    f << "--tensor-model-parallel-size 2 --use-torch-fsdp2 --fp4-format e2m1\n";
  }
  const auto r = run_cli({"analyze", "--megatron-args", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--use-torch-fsdp2"), std::string::npos) << r.err;
}

// Megatron reads --recompute-method and --recompute-num-layers only with a recompute granularity:
// a script that gives them without one runs without recomputation (noted), and one that gives them
// with selective recomputation fails Megatron's assertion, so moemem refuses it too.
TEST(MegatronArgs, RecomputeMethodFollowsTheScriptsGranularity) {
  const std::string base = ::testing::TempDir() + "recompute_method";
  const std::string arch =
      "--tensor-model-parallel-size 1 --num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
      "--max-position-embeddings 512 --micro-batch-size 1 --vocab-size 32000 ";
  const auto write = [&](const std::string& name, const std::string& extra) {
    const std::string path = base + name + ".args";
    std::ofstream(path) << arch << extra << "\n";
    return path;
  };
  const std::string none = write("none", "--recompute-method block --recompute-num-layers 2");
  const auto r = run_cli({"analyze", "--megatron-args", none, "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("training").at("recompute"), "none");
  EXPECT_NE(r.err.find("read by Megatron only with --recompute-granularity full"), std::string::npos) << r.err;
  // Given full inline, the script's method and group size apply.
  const json full = analyze_json({"--megatron-args", none, "--recompute", "full"});
  ASSERT_FALSE(full.is_null());
  EXPECT_EQ(full.at("training").at("recompute_method"), "block");
  EXPECT_EQ(full.at("training").at("recompute_num_layers"), 2);
  // Selective with a method: Megatron's validate_args asserts; moemem exits 2 naming the flag.
  const std::string selective = write("selective", "--recompute-granularity selective --recompute-method uniform");
  const auto s = run_cli({"analyze", "--megatron-args", selective});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("--recompute-method"), std::string::npos) << s.err;
  // Selective given inline replaces a full script's granularity and its method with it.
  const std::string full_script = write("full", "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1");
  const json inline_selective = analyze_json({"--megatron-args", full_script, "--recompute", "selective"});
  ASSERT_FALSE(inline_selective.is_null());
  EXPECT_EQ(inline_selective.at("training").at("recompute"), "selective");
}

TEST(MegatronArgs, Fp8FlagsMapToTheRecipe) {
  const std::string path = ::testing::TempDir() + "fp8.args";
  {
    std::ofstream f(path);
    f << "--fp8-format hybrid --fp8-recipe blockwise --moe-expert-capacity-factor 1.5\n";
  }
  const json j = analyze_json({"--megatron-args", path, "--model", "deepseek-v3", "--ep", "8", "--dp", "8"});
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j.at("training").at("fp8"), "blockwise");
  EXPECT_EQ(j.at("training").at("moe_capacity_factor"), 1.5);
}

TEST(MegatronArgs, MissingVocabularyIsNamed) {
  const std::string path = ::testing::TempDir() + "novocab.args";
  {
    std::ofstream f(path);
    f << "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --swiglu --disable-bias-linear "
         "--position-embedding-type rope --tensor-model-parallel-size 1 --tokenizer-model /data/my-own-tokenizer\n";
  }
  const auto r = run_cli({"analyze", "--megatron-args", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "moemem: error: " + path +
                       ": --vocab-size: 'missing' is not accepted; expected the vocabulary size (--tokenizer-model "
                       "/data/my-own-tokenizer is not a tokenizer moemem knows; Megatron reads it from the "
                       "tokenizer): add --vocab-size N to the script, or give --model\n");
}

// A zero expert width with a shared expert divided by zero (SIGFPE); zero sizes are named errors.
TEST(MegatronArgs, ZeroExpertSizesAreNamedErrors) {
  const std::string path = ::testing::TempDir() + "zero_expert.args";
  const std::string base =
      "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --swiglu --disable-bias-linear --vocab-size 128 "
      "--position-embedding-type rope --num-experts 4 --moe-router-topk 2 ";
  for (const std::string flag : {"--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size"}) {
    {
      std::ofstream f(path);
      f << base << (flag == "--moe-ffn-hidden-size" ? "--moe-shared-expert-intermediate-size 64 " : "--moe-ffn-hidden-size 32 ")
        << flag << " 0\n";
    }
    const auto r = run_cli({"analyze", "--megatron-args", path});
    EXPECT_EQ(r.code, 2) << flag;
    EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("'0' is not accepted; expected a positive integer"), std::string::npos) << r.err;
  }
}

TEST(MegatronArgs, MissingFileIsNamed) {
  const auto r = run_cli({"analyze", "--megatron-args", "/no/such/file.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/no/such/file.sh"), std::string::npos) << r.err;
}

}  // namespace

namespace {

TEST(OverheadFlags, CudaContextAndNcclOverridesReplaceTheDefaults) {
  const json j = analyze_json({"--tp", "2", "--pp", "16", "--dp", "32", "--ep", "8", "--sp", "--cuda-context", "1GiB",
                               "--nccl-per-group", "0"});
  ASSERT_FALSE(j.is_null());
  // 1 GiB of context and every communicator replaced by 0 bytes.
  EXPECT_EQ(j.at("stages")[0].at("bytes").at("runtime").get<std::uint64_t>(), 1073741824ull);
  const auto bad = run_cli({"analyze", "--cuda-context", "lots"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--cuda-context"), std::string::npos);
}

}  // namespace

namespace {

// Megatron's defaults describe a GPT: GeLU MLP of 4h, biases on every linear layer, LayerNorm
// (weight and bias), learned absolute positions, tied embeddings. GPT-2 small and medium have
// 124,439,808 and 354,823,168 parameters (the published checkpoints' counts).
TEST(MegatronArgs, MegatronDefaultsDescribeGpt2) {
  const std::pair<std::string, std::int64_t> cases[] = {
      {"--num-layers 12 --hidden-size 768 --num-attention-heads 12", 124439808},
      {"--num-layers 24 --hidden-size 1024 --num-attention-heads 16", 354823168},
  };
  for (const auto& [arch, expected] : cases) {
    const std::string path = ::testing::TempDir() + "gpt2.args";
    {
      std::ofstream f(path);
      f << arch << " --seq-length 1024 --max-position-embeddings 1024 --vocab-size 50257\n";
    }
    const json j = analyze_json({"--megatron-args", path, "--dp", "1"});
    ASSERT_FALSE(j.is_null());
    EXPECT_EQ(j.at("model").at("total_params").get<std::int64_t>(), expected) << arch;
  }
}

}  // namespace

namespace {

// The script is read after the command line is parsed (issue 11): the settings given inline win
// in any of their spellings, and dp comes from the world size with the inline degrees.
TEST(MegatronArgs, InlineFlagsWinInEverySpelling) {
  // --recompute-granularity is --recompute: the inline one wins over the script's full.
  const json k = analyze_json({"--megatron-args", kDir + "llama3_70b_tp8_pp4.args", "--dp", "4",
                               "--recompute-granularity", "selective", "--sequence-parallel"});
  ASSERT_FALSE(k.is_null());
  EXPECT_EQ(k.at("training").at("recompute"), "selective");
  EXPECT_EQ(k.at("parallel").at("sp"), true);
  // --tp=4 as --tp 4: dp = 1024 / (4 x 8).
  for (const auto& tp : {std::vector<std::string>{"--tp=4"}, std::vector<std::string>{"--tp", "4"}}) {
    std::vector<std::string> args{"--megatron-args", kDir + "deepseek_v3_tp2_pp8_vpp4_ep64.sh"};
    args.insert(args.end(), tp.begin(), tp.end());
    const json t = analyze_json(args);
    ASSERT_FALSE(t.is_null());
    EXPECT_EQ(t.at("parallel").at("tp"), 4);
    EXPECT_EQ(t.at("parallel").at("dp"), 32);
  }
}

// The notes on stderr, word for word.
TEST(MegatronArgs, NotesAreWordForWord) {
  const std::string script = kDir + "deepseek_v3_tp2_pp8_vpp4_ep64.sh";
  const auto r = run_cli({"analyze", "--megatron-args", script});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "note: --megatron-args " + script +
                       ": flags ignored (Megatron's source shows they change no GPU memory): --rotary-scaling-factor 40; "
                       "--mtp-loss-scaling-factor 0.1; --moe-router-score-function sigmoid; "
                       "--moe-router-topk-scaling-factor 2.5; --moe-router-load-balancing-type seq_aux_loss; "
                       "--moe-aux-loss-coeff 1e-4; --overlap-grad-reduce; --overlap-param-gather; --lr 3.9e-6\n");
  const auto l = run_cli({"explain", "--megatron-args", kDir + "llama3_70b_tp8_pp4.args", "--stage", "3"});
  ASSERT_EQ(l.code, 0) << l.err;
  EXPECT_EQ(l.err, "note: --megatron-args: the script does not give the world size; pass --dp (using 1)\n");
  EXPECT_NE(l.out.find("megatron-args:" + kDir + "llama3_70b_tp8_pp4.args"), std::string::npos) << l.out;
}

// A script flag given twice is refused as moemem refuses a flag given twice, unless the setting
// is given inline.
// Megatron's argparse keeps a repeated flag's last value (BASE_ARGS + OVERRIDES is a common
// pattern): so does moemem, with a note; a value given inline still wins.
TEST(MegatronArgs, RepeatedScriptFlagKeepsTheLastAsArgparseDoes) {
  const std::string path = ::testing::TempDir() + "twice.args";
  {
    std::ofstream f(path);
    f << "--tensor-model-parallel-size 2\n--tensor-model-parallel-size 4\n";
  }
  const auto r = run_cli({"analyze", "--megatron-args", path, "--model", "deepseek-v3", "--dp", "2", "--format", "json"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("parallel").at("tp"), 4);
  EXPECT_NE(r.err.find("the last value is read"), std::string::npos) << r.err;
  const json j = analyze_json({"--megatron-args", path, "--model", "deepseek-v3", "--tp", "2"});
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j.at("parallel").at("tp"), 2);
}

TEST(MegatronArgs, ScriptErrorsAreWordForWord) {
  const auto missing = run_cli({"analyze", "--megatron-args"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.err, "moemem: error: --megatron-args: 'missing' is not accepted; expected a file path\n");
  const auto world = run_cli({"analyze", "--megatron-args", kDir + "deepseek_v3_tp2_pp8_vpp4_ep64.sh", "--tp", "3"});
  EXPECT_EQ(world.code, 2);
  EXPECT_EQ(world.err,
            "moemem: error: --megatron-args world size: '1024' is not accepted; expected a multiple of tp*pp*cp = 24\n");
  const auto model = run_cli({"analyze", "--megatron-args", kDir + "llama3_70b_tp8_pp4.args", "--dp", "4", "--model",
                              "mixtral-8x7b"});
  EXPECT_EQ(model.code, 2);
  EXPECT_EQ(model.err,
            "moemem: error: --megatron-args --num-layers: '80' is not accepted; expected 32 as in --model mixtral-8x7b\n");
}

// Megatron's default etp is tp (megatron/training/arguments.py validate_args), and analyze says
// so among its assumptions. DeepSeek-V3 at tp 2, pp 16, dp 32, ep 8: etp 2 gives
// edp = tp*cp*dp / (ep*etp) = 64 / 16 = 4; --etp 1 gives 64 / 8 = 8 and no such line.
TEST(EtpDefault, IsTpAndIsNamedAmongTheAssumptions) {
  const std::vector<std::string> layout = {"--tp", "2", "--pp", "16", "--dp", "32", "--ep", "8", "--sp"};
  const json unset = analyze_json(layout);
  ASSERT_FALSE(unset.is_null());
  EXPECT_EQ(unset.at("parallel").at("etp"), 2);
  EXPECT_EQ(unset.at("parallel").at("edp"), 4);
  const std::string note = "expert tensor parallel = tp = 2 (Megatron's default when --etp is not given)";
  const auto& assumptions = unset.at("assumptions");
  EXPECT_NE(std::find(assumptions.begin(), assumptions.end(), note), assumptions.end()) << assumptions.dump();
  std::vector<std::string> table = layout;
  table.insert(table.begin(), "analyze");
  EXPECT_NE(run_cli(table).out.find("- " + note + "\n"), std::string::npos);

  std::vector<std::string> pinned = layout;
  pinned.insert(pinned.end(), {"--etp", "1"});
  const json one = analyze_json(pinned);
  ASSERT_FALSE(one.is_null());
  EXPECT_EQ(one.at("parallel").at("etp"), 1);
  EXPECT_EQ(one.at("parallel").at("edp"), 8);
  EXPECT_EQ(one.at("assumptions").dump().find("expert tensor parallel"), std::string::npos);
}

}  // namespace
