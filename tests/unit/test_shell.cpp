// The launch-script shell (src/shell_*.cpp): what bash would pass to the launch commands of a
// script, as far as the script itself decides it, and what depends on anything else.
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "moemem/errors.hpp"
#include "shell_internal.hpp"

namespace {

using moemem::InputError;
using moemem::detail::run_shell;
using moemem::detail::ShellWord;

std::vector<std::string> texts(const std::string& script) {
  std::vector<std::string> out;
  for (const ShellWord& w : run_shell(script, "t.sh").words) out.push_back(w.text);
  return out;
}

using V = std::vector<std::string>;

TEST(Shell, UnquotedVariablesSplitIntoWords) {
  EXPECT_EQ(texts("GPT_ARGS=\"--num-layers 32   --hidden-size 4096\n --swiglu\"\ntorchrun pretrain_gpt.py $GPT_ARGS\n"),
            (V{"torchrun", "pretrain_gpt.py", "--num-layers", "32", "--hidden-size", "4096", "--swiglu"}));
  // Quoted, the same variable is one word.
  EXPECT_EQ(texts("A=\"x y\"\nrun \"$A\" '$A'\n"), (V{"run", "x y", "$A"}));
  // Each word keeps the line it was written on, also inside a variable.
  const auto words = run_shell("A=\"--a 1\n--b 2\"\n\nrun $A\n", "t.sh").words;
  ASSERT_EQ(words.size(), 5U);
  EXPECT_EQ(words[0].line, 4);
  EXPECT_EQ(words[1].line, 1);
  EXPECT_EQ(words[3].line, 2);
}

TEST(Shell, ArithmeticDefaultsAndExport) {
  EXPECT_EQ(texts("NODES=4\nGPUS=$((NODES * 8))\nrun $GPUS $(( (GPUS + 2) / 3 % 5 ))\n"), (V{"run", "32", "1"}));
  EXPECT_EQ(texts("run ${TP:-4} ${PP:=2} $PP ${X:+no} ${PP:+yes}\n"), (V{"run", "4", "2", "2", "yes"}));
  EXPECT_EQ(texts("export EP=8 CP=2\nexport TP\nrun $EP $CP\n"), (V{"run", "8", "2"}));
  EXPECT_THROW((void)run_shell("run $((1/0))\n", "t.sh"), InputError);
  EXPECT_THROW((void)run_shell("run $((9223372036854775807 + 1))\n", "t.sh"), InputError);
}

TEST(Shell, Arrays) {
  const std::string s =
      "MODEL_ARGS=(\n  --num-layers 8  # a comment\n  --moe-layer-freq \"([0]*1+[1]*7)\"\n)\n"
      "MODEL_ARGS+=(--swiglu)\nrun \"${MODEL_ARGS[@]}\" ${#MODEL_ARGS[@]} ${MODEL_ARGS[1]}\n";
  EXPECT_EQ(texts(s), (V{"run", "--num-layers", "8", "--moe-layer-freq", "([0]*1+[1]*7)", "--swiglu", "5", "8"}));
  EXPECT_EQ(texts("declare -A C=([a]=\"1 2\" [b]=3)\nK=a\nrun ${C[$K]} ${C[b]}\n"), (V{"run", "1", "2", "3"}));
}

TEST(Shell, IfAndCaseOnWhatTheScriptSets) {
  const std::string s =
      "PR=fp8\nVPP=4\nif [[ ${PR} == \"fp8\" ]]; then\n  A=\"--fp8-format e4m3\"\nelif [ $PR = bf16 ]; then\n"
      "  A=--bf16\nelse\n  A=none\nfi\nif [[ $VPP -gt 1 && ! \"$A\" =~ \"--bf16\" ]]; then B=yes; fi\n"
      "case $PR in\n  bf16|fp16) C=half ;;\n  fp*) C=eight ;;\n  *) C=other ;;\nesac\n"
      "(( VPP > 2 )) && D=big || D=small\nrun $A $B $C $D\n";
  EXPECT_EQ(texts(s), (V{"run", "--fp8-format", "e4m3", "yes", "eight", "big"}));
}

TEST(Shell, WhatTheScriptDoesNotSetIsADependency) {
  const auto words =
      run_shell("if [ \"$(hostname)\" = fp8 ]; then F=--fp8-format; fi\nrun $F --tp ${TP} --x $(hostname)\n", "t.sh")
          .words;
  ASSERT_EQ(words.size(), 6U);
  EXPECT_NE(words[1].depends_on.find("the test on line 1 (the output of `hostname`)"), std::string::npos)
      << words[1].depends_on;
  EXPECT_TRUE(words[2].depends_on.empty());
  EXPECT_NE(words[3].depends_on.find("$TP, which the script does not set"), std::string::npos);
  EXPECT_NE(words[5].depends_on.find("`hostname`"), std::string::npos);
}

// A variable the script never sets is unset in its tests (noted), as in a clean environment.
TEST(Shell, UnsetVariablesAreUnsetInTests) {
  const auto run = run_shell("if [ -z ${MP_VP} ]; then V=none; else V=\"--vp ${MP_VP}\"; fi\nrun $V\n", "t.sh");
  ASSERT_EQ(run.words.size(), 2U);
  EXPECT_EQ(run.words[1].text, "none");
  EXPECT_TRUE(run.words[1].depends_on.empty());
  ASSERT_EQ(run.notes.size(), 1U);
  EXPECT_EQ(run.notes[0], "${MP_VP} (line 1) is not set by the script: taken as unset");
}

TEST(Shell, FunctionsForLoopsAndCommandSubstitution) {
  const std::string s =
      "set_cfg() {\n  local c=($1)\n  export TP=${TP:-${c[0]}}\n}\nset_cfg \"2 8\"\n"
      "for n in 1 2; do L=\"$L$n\"; done\nD=$(dirname \"$(readlink -f \"$0\")\")\nrun $TP $L $D\n";
  EXPECT_EQ(texts(s), (V{"run", "2", "12", "."}));
}

TEST(Shell, LaunchersRunTheirCommandText) {
  EXPECT_EQ(texts("CMD=\"python train.py --tp 2\"\nsrun --mpi=pmix bash -c \"${CMD}\"\n"),
            (V{"srun", "--mpi=pmix", "python", "train.py", "--tp", "2"}));
  EXPECT_EQ(texts("A=1 B=2 eval run '$A' '$B'\nrun ${A:-none}\n"), (V{"run", "1", "2", "run", "none"}));
  // Heredoc bodies are data, not commands.
  EXPECT_EQ(texts("cat <<EOF\n--tp 8\nEOF\nrun x\n"), (V{"run", "x"}));
  // exit ends the script.
  EXPECT_EQ(texts("run a\nexit 0\nrun b\n"), (V{"run", "a"}));
}

// `source FILE` and `. FILE` find the file beside the script (as run from its directory), and
// share its variables; `bash FILE args` runs it with its own $0 and arguments.
TEST(Shell, SourceIsRelativeToTheScript) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "moemem_source_test";
  std::filesystem::create_directories(dir / "conf");
  std::ofstream(dir / "conf" / "model.conf") << "LAYERS=${LAYERS:-32}\nset_tp() { TP=$1; }\n";
  std::ofstream(dir / "child.sh") << "run child $0 $1 $# $LAYERS\n";
  const std::string script = (dir / "train.sh").string();
  const auto words = run_shell("source conf/model.conf\n. ./conf/model.conf\nset_tp 4\nrun $LAYERS $TP\n"
                               "bash child.sh x y\nsource conf/missing.conf\n",
                               script);
  std::vector<std::string> t;
  for (const auto& w : words.words) t.push_back(w.text);
  EXPECT_EQ(t, (V{"run", "32", "4", "run", "child", (dir / "child.sh").string(), "x", "2", "32"}));
  ASSERT_EQ(words.notes.size(), 1U);
  EXPECT_NE(words.notes[0].find("conf/missing.conf not read (no such file)"), std::string::npos) << words.notes[0];
}

// A variable that doubles on every line would take gigabytes: refused by name.
TEST(Shell, ExpansionIsBounded) {
  std::string s = "A=xxxxxxxxxxxxxxxx\n";
  for (int i = 0; i < 40; ++i) s += "A=$A$A\n";
  try {
    (void)run_shell(s, "double.sh");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("shell expansion limit"), std::string::npos) << e.what();
  }
  // Functions calling themselves twice: bounded by the command limit or the depth.
  EXPECT_THROW((void)run_shell("f() { f; f; }\nf\n", "fork.sh"), InputError);
  EXPECT_THROW((void)run_shell("run \"unclosed\n", "q.sh"), InputError);
  EXPECT_THROW((void)run_shell("if true; then run\n", "if.sh"), InputError);
}

}  // namespace

namespace {

// Words and array slots count against the expansion limit even when empty, and a word is
// refused while it grows: each of these once took seconds to minutes and gigabytes
// (fuzz_launch_script; the inputs are in tests/data/fuzz/launch_script/).
TEST(Shell, EmptyWordsAndGrowingWordsAreBounded) {
  const auto expect_limit = [](const std::string& script) {
    try {
      (void)run_shell(script, "limit.sh");
      FAIL() << "expected an InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("shell expansion limit"), std::string::npos) << e.what();
    }
  };
  const std::string sixteen = "w='x x x x x x x x x x x x x x x x'\n";
  const std::string loops = "for a in $w; do for b in $w; do for c in $w; do for d in $w; do ";
  // 65,536 empty slots made again on every one of 65,536 commands.
  expect_limit(sixteen + loops + "unset A; A[65535]=1; done; done; done; done\n");
  // 65,536 empty elements expanded on every command.
  expect_limit(sixteen + "A[65535]=1\n" + loops + "B=(\"${A[@]}\"); done; done; done; done\n");
  // The same unquoted in a command's words, where the empty elements split to nothing: the slots
  // copied are what count.
  expect_limit(sixteen + "A[65535]=1\n" + loops + "run ${A[@]}; done; done; done; done\n");
  // A 1 MiB value of 2^19 words split into an array.
  const std::string doubled = "A=x\nfor i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19; do A=\"$A $A\"; done\n";
  expect_limit(doubled + "B=($A)\n");
  // One word of 3,000 copies of a 1 MiB value: refused before it is built.
  std::string copies = "A=x\nfor i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do A=$A$A; done\nB=\"";
  for (int i = 0; i < 3000; ++i) copies += "$A";
  expect_limit(copies + "\"\n");
}

// Each saved fuzz input that once ran for seconds or more is refused by the shell's limits, not by
// whatever later error it happens to reach: a limit that stops charging would read it again, and
// the fuzz-regression test (any named error passes) would not notice. The one input whose fix was
// speed, not a limit, reads to its end.
TEST(Shell, SavedFuzzInputsAreRefusedByTheLimits) {
  const std::filesystem::path dir = std::filesystem::path(MOEMEM_FUZZ_DATA_DIR) / "launch_script";
  int inputs = 0;
  for (const auto& file : std::filesystem::directory_iterator(dir)) {
    if (file.path().extension() != ".sh") continue;
    std::ifstream in(file.path(), std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    SCOPED_TRACE(file.path().string());
    ++inputs;
    if (file.path().filename() == "prefixed_commands_in_nested_loops.sh") {
      EXPECT_NO_THROW((void)run_shell(ss.str(), "saved.sh"));
      continue;
    }
    try {
      (void)run_shell(ss.str(), "saved.sh");
      ADD_FAILURE() << "expected the shell expansion limit";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("shell expansion limit"), std::string::npos) << e.what();
    }
  }
  EXPECT_GE(inputs, 13);
}

// Names that name others a thousand times, three deep: bash reads each again at every use (10^9
// readings); each reading is charged, so the script is refused at once.
TEST(Shell, ArithmeticNamesNamingNamesAreBounded) {
  std::string s;
  for (const char* name : {"a=", "b=", "c="}) {
    const char next = static_cast<char>(name[0] + 1);
    std::string sum(1, next);
    for (int i = 1; i < 1000; ++i) {
      sum.push_back('+');
      sum.push_back(next);
    }
    s += std::string(name) + "\"" + sum + "\"\n";
  }
  try {
    (void)run_shell(s + "d=1\nrun $((a))\n", "arith.sh");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("shell expansion limit"), std::string::npos) << e.what();
  }
  // A name read a few times is fine.
  EXPECT_EQ(texts("a=b+b\nb=c*2\nc=5\nrun $((a))\n"), V({"run", "20"}));
}

// Deep nesting of every kind is a named error, not a stack overflow.
TEST(Shell, NestingIsBounded) {
  const std::string deep = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_THROW((void)run_shell("run $((" + deep + "))\n", "a.sh"), InputError);
  std::string braces;
  for (int i = 0; i < 5000; ++i) braces += "{ ";
  braces += "run; ";
  for (int i = 0; i < 5000; ++i) braces += "} ";
  EXPECT_THROW((void)run_shell(braces + "\n", "b.sh"), InputError);
  std::string defaults = "x";
  for (int i = 0; i < 5000; ++i) defaults = "${A:-" + defaults + "}";
  EXPECT_THROW((void)run_shell("run " + defaults + "\n", "c.sh"), InputError);
  EXPECT_THROW((void)run_shell("A[99999999]=1\n", "d.sh"), InputError);
  std::string arrays = "A=(";
  for (int i = 0; i < 5000; ++i) arrays += "B=(";
  EXPECT_THROW((void)run_shell(arrays + "\n", "e.sh"), InputError);
  std::string tests = "[[ ";
  for (int i = 0; i < 5000; ++i) tests += "( ";
  EXPECT_NO_THROW((void)run_shell(tests + "x ]]\n", "f.sh"));
}

// Mutations of the fixtures (bytes replaced, inserted, lines duplicated): the evaluator either
// reads them or throws InputError; nothing else escapes, and nothing hangs.
TEST(Shell, MutatedScriptsOnlyEverThrowInputError) {
  std::vector<std::string> seeds;
  for (const char* name : {"megatron_lm_mixtral_8x7b.sh", "megatron_lm_deepseek_v2_lite.sh", "pai/run_mcore_qwen3.sh",
                           "modelzoo/sbatch_benchmarking.sh", "modelzoo/runtime_configs/benchmarking/common.conf"}) {
    std::ifstream in(std::string(MOEMEM_TEST_DATA_DIR) + "/megatron/" + name);
    std::ostringstream ss;
    ss << in.rdbuf();
    seeds.push_back(ss.str());
  }
  std::mt19937 rng(13);
  const std::string alphabet = "$(){}[]'\"`\\|&;<>#=!*?-+ \n\tabcAZ019";
  for (int n = 0; n < 400; ++n) {
    std::string s = seeds[static_cast<std::size_t>(n) % seeds.size()];
    for (int k = 0; k < 1 + n % 6; ++k) {
      const std::size_t at = rng() % (s.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      if (rng() % 2 == 0 && at < s.size()) s[at] = c;
      else s.insert(at, 1, c);
    }
    try {
      (void)run_shell(s, "mutated.sh");
    } catch (const InputError&) {
    }
  }
}

}  // namespace
