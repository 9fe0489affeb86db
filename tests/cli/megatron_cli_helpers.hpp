// Shared by the launch-script and Megatron-option CLI tests: reading a fixture script, and the
// DeepSeek-V3-shaped 14-layer run of Megatron-LM PR 6429's memory table.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "cli/run_cli.hpp"
#include "moemem/megatron_args.hpp"

namespace moemem::test {

// tests/data/megatron/, where the launch-script fixtures live.
inline std::string megatron_dir() { return std::string(MOEMEM_TEST_DATA_DIR) + "/megatron/"; }

// A fixture script under tests/data/megatron/, read as --megatron-args reads it.
inline MegatronSettings read_script(const std::string& name) {
  std::ifstream in(megatron_dir() + name, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_megatron_args(ss.str(), megatron_dir() + name);
}

// The PR 6429 run (h 7168, top_k 8, expert ffn 2048): PP4 VPP2 EP16, 2 layers a chunk, no dropout;
// tp > 1 with sequence parallelism.
inline Args pr6429_run(const Args& extra = {}, const std::string& tp = "1") {
  Args a = {"--model", MOEMEM_TEST_DATA_DIR "/validation/models/deepseek-v3-14l.json", "--tp", tp};
  if (tp != "1") a.emplace_back("--sp");
  return concat(concat(a, {"--pp", "4", "--vpp", "2", "--schedule", "interleaved", "--pipeline-model-parallel-layout",
                           "Ett|(tt|)*6mL", "--ep", "16", "--etp", "1", "--dp", "16", "--micro-batch", "1", "--seq-len",
                           "2048", "--global-batch", "256", "--distributed-optimizer", "--hidden-dropout", "0",
                           "--attention-dropout", "0"}),
                extra);
}

}  // namespace moemem::test
