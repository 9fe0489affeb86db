// The fuzz targets (libFuzzer, built with the `fuzz` preset; run by scripts/test.sh): each takes
// one input and must either accept it or refuse it with InputError (exit 2 in the CLI). Anything
// else (another exception, a sanitizer report, a crash, a hang) is a bug. The same functions run
// every saved crash input in tests/data/fuzz/<name>/ as a regression test of the ordinary suite
// (tests/unit/test_fuzz_regressions.cpp).
//
// To add a target: a function here, a line in targets(), a moemem_add_fuzzer() line in
// fuzz/CMakeLists.txt naming its seed directories, and a directory tests/data/fuzz/<name>/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace moemem::fuzz {

// A Hugging Face config.json: parsed, its inventory built and, for models small enough to analyze
// quickly, analyzed under the default layout.
void config_json(std::string_view input);
// Lines of a validation set (measured-public.jsonl's schema): each record's moemem object parsed
// and evaluated as `moemem validate` does, model files from the compiled-in public set.
void validation_line(std::string_view input);
// A Megatron layout string (--pipeline-model-parallel-layout, `Et*3|(tt|)*29,m|L`): the first two
// bytes choose a model (a preset's layer and MTP counts), pp, vpp, the schedule and whether a
// global batch is given (fuzz/targets.cpp: layout_choices); the rest is the string, resolved and
// analyzed under those choices.
void layout_string(std::string_view input);
// A launch script's text, written to a private temporary file and read as --megatron-args reads
// one (the file's path is $0 and the base of `source`); its settings put onto a request and, for
// models small enough to analyze quickly, analyzed.
void launch_script(std::string_view input);

struct Target {
  const char* name;  // also the directory of its saved inputs, tests/data/fuzz/<name>/
  void (*run)(std::string_view input);
};
const std::vector<Target>& targets();

}  // namespace moemem::fuzz
