// Bad input through the CLI: every mistake a user can make exits with code 2, prints nothing on
// stdout, and explains itself on stderr with a line starting "moemem: error: " that names the
// flag or config key and the value given. Nothing may escape run() as an exception (in the real
// executable that is exit 3, "internal error").
#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "cli/run_cli.hpp"
#include "moemem/config.hpp"

namespace {

using moemem::test::CliResult;

std::string bad_file(const char* name) { return std::string(MOEMEM_TEST_DATA_DIR) + "/bad/" + name; }

std::string joined(const std::vector<std::string>& args) {
  std::string s = "moemem";
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

// Runs the CLI in-process; an exception escaping run() is a crash of the real executable.
CliResult run(const std::vector<std::string>& args) {
  try {
    return moemem::test::run_cli(args);
  } catch (const std::exception& e) {
    ADD_FAILURE() << joined(args) << " threw out of run(): " << e.what();
  } catch (...) {
    ADD_FAILURE() << joined(args) << " threw a non-standard exception out of run()";
  }
  return {};
}

// Exit code 2, empty stdout, and an error line on stderr containing every word of `words`.
CliResult expect_bad_input(const std::vector<std::string>& args, std::initializer_list<std::string_view> words) {
  SCOPED_TRACE(joined(args));
  const CliResult r = run(args);
  EXPECT_EQ(r.code, 2) << "stderr: " << r.err;
  EXPECT_EQ(r.err.rfind("moemem: error: ", 0), 0u) << "stderr: " << r.err;
  EXPECT_EQ(r.out, "") << "a failed run must not print a partial report";
  for (const auto w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Model configs.

TEST(BadConfig, MalformedJsonNamesFileAndPosition) {
  // The second comma of `"hidden_size": 7168,,` is byte 56 of the file: 2 bytes for "{\n",
  // 31 for the model_type line, and it is the 23rd character of the third line.
  expect_bad_input({"count", "--model", bad_file("malformed.config.json")},
                   {"malformed.config.json", "malformed JSON", "byte 56"});
}

TEST(BadConfig, TruncatedFile) {
  expect_bad_input({"analyze", "--model", bad_file("truncated.config.json")}, {"truncated.config.json", "malformed JSON"});
}

TEST(BadConfig, EmptyFile) {
  expect_bad_input({"count", "--model", bad_file("empty.config.json")}, {"empty.config.json", "malformed JSON"});
}

TEST(BadConfig, ArrayInsteadOfObject) {
  expect_bad_input({"count", "--model", bad_file("array.config.json")}, {"array.config.json", "array", "JSON object"});
}

TEST(BadConfig, UnsupportedModelTypeListsSupportedOnes) {
  expect_bad_input({"count", "--model", bad_file("unsupported_model_type.config.json")},
                   {"unsupported_model_type.config.json", "model_type", "no_such_model_type", "deepseek_v2", "deepseek_v3"});
}

TEST(BadConfig, KeyOfWrongType) {
  expect_bad_input({"count", "--model", bad_file("hidden_size_string.config.json")}, {"hidden_size", "big", "integer"});
}

TEST(BadConfig, NegativeSize) {
  expect_bad_input({"analyze", "--model", bad_file("hidden_size_negative.config.json")}, {"hidden_size", "-2048"});
}

TEST(BadConfig, ZeroHeads) {
  expect_bad_input({"count", "--model", bad_file("heads_zero.config.json")}, {"num_attention_heads", "'0'"});
}

TEST(BadConfig, MissingHiddenSize) {
  expect_bad_input({"count", "--model", bad_file("missing_hidden_size.config.json")}, {"hidden_size", "missing"});
}

TEST(BadConfig, UnknownPresetListsPresets) {
  const auto r = expect_bad_input({"analyze", "--model", "deepseek-v4"}, {"--model", "deepseek-v4"});
  const auto presets = moemem::preset_names();
  ASSERT_FALSE(presets.empty());
  for (const auto& p : presets) EXPECT_NE(r.err.find(p), std::string::npos) << "preset " << p << " not listed: " << r.err;
}

TEST(BadConfig, NonexistentPath) {
  const std::string path = bad_file("does-not-exist.config.json");
  expect_bad_input({"count", "--model", path}, {"--model", path});
}

// Every dimension is inside the per-key limit (2^31) but the routed experts of one layer would
// hold 2^31 * 2^31 * 2^31 = 2^93 elements: refused, not wrapped and not a crash.
TEST(BadConfig, SizesWhoseProductOverflowsAreRefused) {
  expect_bad_input({"count", "--model", bad_file("overflow_sizes.config.json")}, {});
}

TEST(BadConfig, OverflowMessageNamesTheConfig) {
  const auto r = expect_bad_input({"count", "--model", bad_file("overflow_sizes.config.json")},
                                  {"overflow_sizes.config.json"});
  const bool names_key = r.err.find("hidden_size") != std::string::npos ||
                         r.err.find("moe_intermediate_size") != std::string::npos ||
                         r.err.find("n_routed_experts") != std::string::npos;
  EXPECT_TRUE(names_key) << r.err;
}

TEST(BadConfig, AbsurdLayerCountIsRefusedNotAllocated) {
  expect_bad_input({"count", "--model", bad_file("huge_layers.config.json")}, {"num_hidden_layers", "2147483648"});
}

// ---------------------------------------------------------------------------------------------
// Parallel degrees and layouts (default model deepseek-v3: 61 layers, 128 heads, 256 experts).

TEST(BadLayout, TpZero) { expect_bad_input({"analyze", "--tp", "0"}, {"--tp", "'0'"}); }
TEST(BadLayout, TpNegative) { expect_bad_input({"analyze", "--tp", "-1"}, {"--tp", "-1"}); }
TEST(BadLayout, TpTwoToTheForty) { expect_bad_input({"analyze", "--tp", "1099511627776"}, {"--tp", "1099511627776"}); }
TEST(BadLayout, DpZero) { expect_bad_input({"analyze", "--dp", "0"}, {"--dp", "'0'"}); }
TEST(BadLayout, CpZero) { expect_bad_input({"analyze", "--cp", "0"}, {"--cp", "'0'"}); }
TEST(BadLayout, EtpZero) { expect_bad_input({"analyze", "--etp", "0"}, {"--etp", "'0'"}); }

TEST(BadLayout, PpAboveLayerCount) { expect_bad_input({"analyze", "--pp", "62"}, {"--pp", "62", "61"}); }

TEST(BadLayout, PpWhoseDefaultSplitLeavesNothing) {
  // ceil(61/40) = 2 layers on 39 stages is 78 > 61: no default split; the message points at --pp.
  expect_bad_input({"analyze", "--pp", "40"}, {"--pp", "40"});
}

TEST(BadLayout, TpNotDividingHeads) { expect_bad_input({"analyze", "--tp", "3"}, {"--tp", "'3'", "128"}); }
TEST(BadLayout, EpNotDividingExperts) { expect_bad_input({"analyze", "--ep", "7"}, {"--ep", "'7'", "256"}); }
TEST(BadLayout, EtpNotDividingExpertFfn) { expect_bad_input({"analyze", "--etp", "3"}, {"--etp", "'3'", "2048"}); }

TEST(BadLayout, ExpertGroupsNotDividingStageRanks) {
  // tp*cp*dp = 4 ranks per stage cannot form whole groups of ep*etp = 8.
  expect_bad_input({"analyze", "--tp", "1", "--dp", "4", "--ep", "8"}, {"--ep", "8", "4"});
}

TEST(BadLayout, DefaultedEtpSaysItFollowsTp) {
  // Megatron's etp defaults to tp (arguments.py validate_args): tp 2, ep 8 make expert groups of
  // ep*etp = 16 ranks, which tp*cp*dp = 2*1*4 = 8 cannot hold; the error says etp was not given.
  const CliResult r = expect_bad_input({"analyze", "--tp", "2", "--dp", "4", "--ep", "8"}, {"--ep/--etp", "'ep*etp = 16'"});
  EXPECT_EQ(r.err,
            "moemem: error: --ep/--etp: 'ep*etp = 16' is not accepted; expected a divisor of tp*cp*dp = 8 (every stage's "
            "ranks must form whole expert groups); etp was not given and is tp = 2, Megatron's default (--etp sets it)\n");
}

TEST(BadLayout, EpNotDividingExpertsOfV2Lite) {
  // deepseek-v2-lite has 64 experts: 128 does not divide it.
  expect_bad_input({"analyze", "--model", "deepseek-v2-lite", "--ep", "128", "--dp", "128"}, {"--ep", "128", "64"});
}

TEST(BadLayout, WorldSizeTooLarge) {
  // 128 * 1 * 1 * 1048576 = 2^27 GPUs, above the 2^24 limit.
  expect_bad_input({"analyze", "--tp", "128", "--dp", "1048576"}, {"world size", "134217728"});
}

TEST(BadLayout, WorldSizeOverflowNamesTheFlags) {
  expect_bad_input({"analyze", "--tp", "1048576", "--pp", "1048576", "--cp", "1048576", "--dp", "1048576"},
                   {"tp*pp*cp*dp"});
}

TEST(BadLayout, LayersPerStageSumWrong) {
  expect_bad_input({"analyze", "--pp", "2", "--layers-per-stage", "30,30"}, {"--layers-per-stage", "30,30", "61"});
}

TEST(BadLayout, LayersPerStageWrongCount) {
  expect_bad_input({"analyze", "--pp", "16", "--layers-per-stage", "4,4"}, {"--layers-per-stage", "4,4", "16"});
}

TEST(BadLayout, LayersPerStageGarbage) {
  expect_bad_input({"analyze", "--pp", "3", "--layers-per-stage", "4,x,4"}, {"--layers-per-stage", "4,x,4"});
}

TEST(BadLayout, LayersPerStageTrailingComma) {
  expect_bad_input({"analyze", "--pp", "2", "--layers-per-stage", "30,31,"}, {"--layers-per-stage", "30,31,"});
}

TEST(BadLayout, LayersPerStageNegativeEntry) {
  expect_bad_input({"analyze", "--pp", "2", "--layers-per-stage", "-1,62"}, {"--layers-per-stage", "-1,62"});
}

TEST(BadLayout, LayersPerStageEntryOverflowingInt64) {
  expect_bad_input({"analyze", "--pp", "2", "--layers-per-stage", "99999999999999999999,1"},
                   {"--layers-per-stage", "99999999999999999999,1"});
}

TEST(BadLayout, PaperSubcommandChecksTheSameRules) {
  expect_bad_input({"paper", "--tp", "3"}, {"--tp", "'3'", "128"});
  expect_bad_input({"paper", "--ep", "7"}, {"--ep", "'7'", "256"});
  expect_bad_input({"paper", "--dp", "0"}, {"--dp", "'0'"});
}

TEST(BadLayout, PaperStageOutOfRange) {
  // The paper layout has pp = 16 stages: 0 to 15.
  expect_bad_input({"paper", "--stage", "16"}, {"--stage", "16", "15"});
  expect_bad_input({"paper", "--stage", "-1"}, {"--stage", "-1"});
}

// ---------------------------------------------------------------------------------------------
// Training settings and output options.

TEST(BadTraining, MicroBatchZero) { expect_bad_input({"analyze", "--micro-batch", "0"}, {"--micro-batch", "'0'"}); }
TEST(BadTraining, SeqLenZero) { expect_bad_input({"analyze", "--seq-len", "0"}, {"--seq-len", "'0'"}); }

TEST(BadTraining, OddSeqLenWithSequenceParallelism) {
  expect_bad_input({"analyze", "--seq-len", "4095", "--sp", "--tp", "2"}, {"--seq-len", "4095"});
}

TEST(BadTraining, SeqLenNotDividedByCp) {
  // The default 4096 is not a multiple of cp = 3; the message must say why (cp).
  expect_bad_input({"analyze", "--cp", "3"}, {"--seq-len", "4096", "cp"});
}

TEST(BadTraining, ActivationOverflowIsRefused) {
  // Both values are inside their own limits (2^24 and 2^20); the score matrix is 2^20 * 128 * 2^48.
  expect_bad_input({"analyze", "--seq-len", "16777216", "--micro-batch", "1048576"}, {});
}

TEST(BadTraining, ActivationOverflowNamesTheFlags) {
  const auto r = expect_bad_input({"analyze", "--seq-len", "16777216", "--micro-batch", "1048576"}, {});
  const bool names_flag = r.err.find("--seq-len") != std::string::npos || r.err.find("--micro-batch") != std::string::npos;
  EXPECT_TRUE(names_flag) << r.err;
}

TEST(BadTraining, ZeroStageFour) { expect_bad_input({"analyze", "--zero", "4"}, {"--zero", "'4'"}); }
TEST(BadTraining, ZeroStageNegative) { expect_bad_input({"analyze", "--zero", "-1"}, {"--zero", "-1"}); }
TEST(BadTraining, RecomputeBogus) { expect_bad_input({"analyze", "--recompute", "bogus"}, {"--recompute", "bogus", "full"}); }
TEST(BadTraining, OverheadBogus) { expect_bad_input({"analyze", "--overhead", "bogus"}, {"--overhead", "bogus", "high"}); }
TEST(BadTraining, ProfileBogus) { expect_bad_input({"analyze", "--profile", "bogus"}, {"--profile", "bogus", "paper"}); }

TEST(BadTraining, DtypeFp7) {
  expect_bad_input({"analyze", "--main-grads-dtype", "fp7"}, {"--main-grads-dtype", "fp7", "fp32", "bf16"});
  expect_bad_input({"analyze", "--params-dtype", "float64"}, {"--params-dtype", "float64"});
}

TEST(BadOutput, FormatXml) {
  expect_bad_input({"analyze", "--format", "xml"}, {"--format", "xml", "json"});
  expect_bad_input({"count", "--format", "xml"}, {"--format", "xml"});
  expect_bad_input({"paper", "--format", "xml"}, {"--format", "xml"});
}

TEST(BadOutput, CountByBogus) { expect_bad_input({"count", "--by", "bogus"}, {"--by", "bogus", "module"}); }

TEST(BadModelOption, MtpNegative) { expect_bad_input({"analyze", "--mtp", "-1"}, {"--mtp", "-1"}); }
TEST(BadModelOption, MtpTooDeep) { expect_bad_input({"count", "--mtp", "17"}, {"--mtp", "17"}); }

// ---------------------------------------------------------------------------------------------
// Command line syntax.

TEST(BadSyntax, UnknownFlag) { expect_bad_input({"analyze", "--no-such-flag"}, {"--no-such-flag"}); }
TEST(BadSyntax, UnknownSubcommand) { expect_bad_input({"analyse"}, {}); }

TEST(BadSyntax, UnknownSubcommandIsNamed) {
  expect_bad_input({"analyse"}, {"analyse"});
}
TEST(BadSyntax, NoSubcommand) { expect_bad_input({}, {"subcommand"}); }
TEST(BadSyntax, MissingValue) { expect_bad_input({"analyze", "--tp"}, {"--tp"}); }
TEST(BadSyntax, NonIntegerDegree) { expect_bad_input({"analyze", "--tp", "2.5"}, {"--tp", "2.5"}); }

TEST(BadSyntax, IntegerOverflowingInt64IsRefused) {
  expect_bad_input({"analyze", "--tp", "99999999999999999999999"}, {"--tp"});
  expect_bad_input({"analyze", "--tp", "-99999999999999999999999"}, {"--tp"});
  expect_bad_input({"analyze", "--micro-batch", "99999999999999999999999"}, {"--micro-batch"});
  expect_bad_input({"count", "--mtp", "99999999999999999999999"}, {"--mtp"});
}

TEST(BadSyntax, IntegerOverflowingInt64IsReportedAsTyped) {
  expect_bad_input({"analyze", "--tp", "99999999999999999999999"}, {"--tp", "99999999999999999999999"});
  expect_bad_input({"analyze", "--tp", "-99999999999999999999999"}, {"--tp", "-99999999999999999999999"});
  expect_bad_input({"analyze", "--micro-batch", "99999999999999999999999"}, {"--micro-batch", "99999999999999999999999"});
}

TEST(BadSyntax, EmptyDegreeIsReportedAsEmpty) {
  const auto r = expect_bad_input({"analyze", "--tp", ""}, {"--tp"});
  EXPECT_EQ(r.err.find("'0'"), std::string::npos) << r.err;
}

// Every numeric flag against a battery of nonsense: always exit 2 with the flag named.
TEST(BadSyntax, EveryNumericFlagRefusesNonsense) {
  const std::vector<std::string> nonsense = {"-1", "-9223372036854775808", "9223372036854775807", "1099511627776",
                                             "abc", "1.5", "4,4"};
  const std::vector<std::string> analyze_flags = {"--tp", "--pp", "--dp", "--cp", "--ep", "--etp",
                                                  "--micro-batch", "--seq-len", "--zero", "--mtp"};
  for (const auto& flag : analyze_flags) {
    for (const auto& v : nonsense) expect_bad_input({"analyze", flag, v}, {flag});
    // 0 is a valid ZeRO stage and MTP depth; for everything else it is nonsense.
    if (flag != "--zero" && flag != "--mtp") expect_bad_input({"analyze", flag, "0"}, {flag, "'0'"});
  }
  for (const auto& v : nonsense) expect_bad_input({"paper", "--stage", v}, {"--stage"});
  for (const auto& v : nonsense) expect_bad_input({"count", "--mtp", v}, {"--mtp"});
}

TEST(Help, ExitsZeroAndListsCommands) {
  const auto r = run({"--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* w : {"analyze", "count", "paper"}) EXPECT_NE(r.out.find(w), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;
}

// issue 17: `moemem --version` prints the project version (CMakeLists.txt project(... VERSION 0.1.0))
// and exits 0, without a subcommand.
TEST(Help, VersionPrintsTheProjectVersion) {
  const auto r = run({"--version"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "moemem 0.1.0\n");
}

TEST(Help, SubcommandHelpListsFlags) {
  const auto r = run({"analyze", "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* w : {"--tp", "--layers-per-stage", "--zero", "--format"}) {
    EXPECT_NE(r.out.find(w), std::string::npos) << r.out;
  }
}

// CLI11's messages for a flag given a value it cannot read and an option given twice, in
// moemem's form: the flag, the value or count, and what is accepted.
TEST(BadSyntax, FlagValuesAndRepeatsSayWhatIsAccepted) {
  expect_bad_input({"analyze", "--sp=banana"}, {"--sp: 'banana' is not accepted", "the flag alone, or =true/=false"});
  expect_bad_input({"analyze", "--tp", "2", "--tp", "4"}, {"--tp: given 2 times; expected it once"});
  EXPECT_EQ(run({"analyze", "--sp=false", "--format", "json"}).code, 0);
}

// Megatron-only settings under a profile that does not model them were accepted and changed
// nothing (or, for the vocabulary multiple, padded an embedding that torchtitan and Hugging Face
// never pad): each is refused naming the flag and the profile.
TEST(BadProfileSettings, MegatronOnlySettingsAreRefusedElsewhere) {
  expect_bad_input({"analyze", "--profile", "paper", "--logits-dtype", "bf16"}, {"--logits-dtype", "bf16", "paper"});
  expect_bad_input({"analyze", "--profile", "paper", "--moe-shared-expert-overlap"}, {"--moe-shared-expert-overlap", "megatron"});
  expect_bad_input({"analyze", "--profile", "hf", "--model", "llama-3.1-8b", "--logits-dtype", "bf16"},
                   {"--logits-dtype", "bf16", "hf"});
  expect_bad_input({"analyze", "--profile", "hf", "--model", "llama-3.1-8b", "--make-vocab-size-divisible-by", "1000"},
                   {"--make-vocab-size-divisible-by", "1000", "unpadded"});
  expect_bad_input({"analyze", "--profile", "torchtitan", "--model", "llama-3.1-8b", "--make-vocab-size-divisible-by", "256"},
                   {"--make-vocab-size-divisible-by", "256", "torchtitan"});
  expect_bad_input({"analyze", "--profile", "torchtitan", "--model", "llama-3.1-8b", "--moe-shared-expert-overlap"},
                   {"--moe-shared-expert-overlap"});
  // Under megatron each is a setting.
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--logits-dtype", "bf16"},
                                                std::vector<std::string>{"--make-vocab-size-divisible-by", "256"},
                                                std::vector<std::string>{"--moe-shared-expert-overlap"}}) {
    std::vector<std::string> args{"analyze", "--model", "deepseek-v2-lite", "--ep", "8", "--dp", "8"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run(args);
    EXPECT_EQ(r.code, 0) << joined(args) << ": " << r.err;
  }
}

// Settings a profile's framework has no use for, found echoed and ignored by a new-user review:
// torchtitan's per-op SAC takes no module list; the Trainer runs no pipeline schedule (gpipe at
// pp 1 held all 64 micro-batches at once).
TEST(BadProfileSettings, IgnoredSettingsAreRefused) {
  expect_bad_input({"analyze", "--profile", "torchtitan", "--model", "llama-3.1-8b", "--recompute", "selective",
                    "--recompute-modules", "mlp"},
                   {"--recompute-modules: 'mlp' is not accepted", "per-op SAC"});
  expect_bad_input({"analyze", "--profile", "hf", "--model", "llama-3.1-8b", "--zero", "2", "--schedule", "gpipe",
                    "--global-batch", "64"},
                   {"--schedule: 'gpipe' is not accepted", "1f1b"});
  EXPECT_EQ(run({"analyze", "--profile", "torchtitan", "--model", "llama-3.1-8b", "--recompute", "selective"}).code, 0);
}

// Messages that named the wrong cause (second new-user review).
TEST(BadInputMessages, NameTheRealCause) {
  expect_bad_input({"analyze", "--model", "qwen3-next-80b-a3b", "--tp", "2", "--ep", "8", "--dp", "8", "--gpu", "h100-80g",
                    "--global-batch", "64", "--time"},
                   {"--time", "qwen3_next", "step-time model"});
  expect_bad_input({"validate", "--max-error", "-5"}, {"--max-error: '-5' is not accepted"});
  expect_bad_input({"analyze", "--profile", "torchtitan", "--model", "llama-3.1-8b", "--dp", "8", "--finetune", "lora",
                    "--lora-rank", "16"},
                   {"--finetune: 'lora' is not accepted", "its LoRA is not modelled"});
  // A model torchtitan does not train is named before a setting is asked of it.
  expect_bad_input({"analyze", "--profile", "torchtitan", "--model", "glm-4.5"}, {"glm4_moe is none of them"});
  // GPU names in any case, as model presets.
  EXPECT_EQ(run({"analyze", "--gpu", "H100-80G", "--format", "json"}).code, 0);
}

// A control: the same options with good values succeed, so the failures above are about the
// values and not about the options themselves.
TEST(BadInputControl, GoodValuesOfTheSameOptionsSucceed) {
  const auto r = run({"analyze", "--tp", "2", "--pp", "16", "--dp", "32", "--ep", "8", "--sp", "--layers-per-stage",
                      "4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,1", "--micro-batch", "2", "--seq-len", "4096", "--zero", "3",
                      "--recompute", "full", "--main-grads-dtype", "bf16", "--mtp", "1", "--format", "json"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const auto c = run({"count", "--model", std::string(MOEMEM_SHARED_MODELS_DIR) + "/deepseek-v2-lite.json"});
  EXPECT_EQ(c.code, 0) << c.err;
}

}  // namespace
