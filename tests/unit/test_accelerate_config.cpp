// --accelerate-config accelerate.yaml (hf profile): the keys read, what they set, and the keys
// refused by name (include/moemem/accelerate.hpp). Sizes by hand (Llama-3.1-8B, as in
// tests/cli/test_hf_fsdp2_cli.cpp), not from running moemem.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"
#include "moemem/accelerate.hpp"
#include "moemem/errors.hpp"

namespace {

using moemem::test::run_cli;

const std::string kFile = std::string(MOEMEM_TEST_DATA_DIR) + "/accelerate/fsdp2.yaml";

// The error text of parsing `yaml`, or "" when it parses.
std::string refusal(const std::string& yaml) {
  try {
    static_cast<void>(moemem::parse_accelerate_config(yaml, "a.yaml"));
  } catch (const moemem::InputError& e) {
    return e.what();
  }
  return "";
}

const std::string kBase = "distributed_type: FSDP\nmixed_precision: bf16\nfsdp_config:\n  fsdp_version: 2\n";

TEST(AccelerateConfig, ReadsTheKeysThatSetMemory) {
  const auto a = moemem::read_accelerate_config(kFile);
  EXPECT_TRUE(a.activation_checkpointing);
  EXPECT_TRUE(a.reshard_after_forward);
  EXPECT_EQ(a.num_processes, 8);
  EXPECT_FALSE(a.offload_params);
  const auto b = moemem::parse_accelerate_config(kBase + "  fsdp_reshard_after_forward: false\nnum_processes: -1\n", "a.yaml");
  EXPECT_FALSE(b.reshard_after_forward);
  EXPECT_FALSE(b.activation_checkpointing);
  EXPECT_FALSE(b.num_processes);  // -1: left to the launcher
  EXPECT_FALSE(moemem::parse_accelerate_config(kBase + "  fsdp_reshard_after_forward: SHARD_GRAD_OP\n", "a.yaml")
                   .reshard_after_forward);
}

TEST(AccelerateConfig, ReadsFsdp1AndItsShardingStrategy) {
  // No fsdp_version: accelerate's default, FSDP1 (FullyShardedDataParallelPlugin).
  const auto v1 = moemem::parse_accelerate_config("distributed_type: FSDP\nmixed_precision: bf16\nfsdp_config:\n  "
                                                  "fsdp_offload_params: false\n",
                                                  "a.yaml");
  EXPECT_EQ(v1.fsdp_version, 1);
  EXPECT_TRUE(v1.reshard_after_forward);
  const auto f = moemem::read_accelerate_config(std::string(MOEMEM_TEST_DATA_DIR) + "/accelerate/fsdp1.yaml");
  EXPECT_EQ(f.fsdp_version, 1);
  EXPECT_TRUE(f.reshard_after_forward);
  EXPECT_EQ(f.num_processes, 8);
  for (const char* s : {"SHARD_GRAD_OP", "2"}) {
    EXPECT_FALSE(moemem::parse_accelerate_config(kBase + "  fsdp_sharding_strategy: " + s + "\n", "a.yaml").reshard_after_forward);
  }
  EXPECT_EQ(moemem::parse_accelerate_config(kBase, "a.yaml").fsdp_version, 2);
}

TEST(AccelerateConfig, RefusesWhatItDoesNotModelByName) {
  EXPECT_NE(refusal("distributed_type: MULTI_GPU\nmixed_precision: bf16\n").find("a.yaml: distributed_type: 'MULTI_GPU'"),
            std::string::npos);
  EXPECT_NE(refusal("distributed_type: FSDP\nmixed_precision: bf16\nfsdp_config:\n  fsdp_version: 3\n")
                .find("fsdp_config.fsdp_version: '3'"),
            std::string::npos);
  EXPECT_NE(refusal(kBase + "  fsdp_sharding_strategy: NO_SHARD\n").find("fsdp_config.fsdp_sharding_strategy: 'NO_SHARD'"),
            std::string::npos);
  EXPECT_NE(refusal(kBase + "  fsdp_reshard_after_forward: HYBRID_SHARD\n").find("'HYBRID_SHARD'"), std::string::npos);
  EXPECT_TRUE(moemem::parse_accelerate_config(kBase + "  fsdp_offload_params: true\n", "a.yaml").offload_params);
  EXPECT_NE(refusal(kBase + "  fsdp_offload_params: 2\n").find("fsdp_config.fsdp_offload_params: '2'"), std::string::npos);
  EXPECT_NE(refusal(kBase + "  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n").find("fsdp_auto_wrap_policy"), std::string::npos);
  EXPECT_NE(refusal(kBase + "  fsdp_new_knob: 3\n").find("fsdp_config.fsdp_new_knob: '3'"), std::string::npos);
  EXPECT_NE(refusal("distributed_type: FSDP\nmixed_precision: fp16\nfsdp_config:\n  fsdp_version: 2\n").find("mixed_precision: 'fp16'"),
            std::string::npos);
  EXPECT_NE(refusal(kBase + "dynamo_config:\n  dynamo_backend: INDUCTOR\n").find("dynamo_backend: 'INDUCTOR'"), std::string::npos);
  EXPECT_NE(refusal(kBase + "  fsdp_activation_checkpointing: maybe\n").find("'maybe'"), std::string::npos);
  EXPECT_NE(refusal("[1, 2").find("a.yaml"), std::string::npos);
  EXPECT_NE(refusal("- 1\n").find("not a mapping"), std::string::npos);
}

TEST(AccelerateConfig, SetsFsdp1InAnalyze) {
  const std::string file = std::string(MOEMEM_TEST_DATA_DIR) + "/accelerate/fsdp1.yaml";
  const auto run = [](const std::vector<std::string>& extra) {
    std::vector<std::string> a = {"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--dp", "8", "--seq-len", "4096",
                                  "--format", "json"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  const auto from_file = run({"--accelerate-config", file});
  const auto from_flag = run({"--fsdp1"});
  ASSERT_EQ(from_file.code, 0) << from_file.err;
  ASSERT_EQ(from_flag.code, 0) << from_flag.err;
  EXPECT_EQ(nlohmann::json::parse(from_file.out).at("peak"), nlohmann::json::parse(from_flag.out).at("peak"));
  EXPECT_EQ(nlohmann::json::parse(from_file.out).at("training").at("sharding"), "fsdp1");
  const auto clash = run({"--accelerate-config", file, "--fsdp2"});
  EXPECT_EQ(clash.code, 2);
  EXPECT_NE(clash.err.find("--fsdp2: 'set' is not accepted; expected no --fsdp2, or an fsdp_version 2 config"), std::string::npos)
      << clash.err;
}

TEST(AccelerateConfig, SetsFsdp2AndCheckpointingInAnalyze) {
  // The file is --fsdp2 --recompute full: Llama-3.1-8B on 8 ranks, the same peak either way.
  const auto peak = [](const std::vector<std::string>& extra) {
    std::vector<std::string> a = {"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--dp", "8", "--seq-len", "4096",
                                  "--format", "json"};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto r = run_cli(a);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? nlohmann::json::parse(r.out).at("peak").at("total_bytes").get<std::uint64_t>() : 0;
  };
  EXPECT_EQ(peak({"--accelerate-config", kFile}), peak({"--fsdp2", "--recompute", "full"}));
  EXPECT_NE(peak({"--accelerate-config", kFile}), peak({"--fsdp2"}));
  const auto dp = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--accelerate-config", kFile});
  EXPECT_EQ(dp.code, 2);
  EXPECT_NE(dp.err.find("--dp: '1' is not accepted; expected the accelerate config's num_processes (8"), std::string::npos) << dp.err;
  const auto rc = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--dp", "8", "--accelerate-config", kFile,
                           "--recompute", "none"});
  EXPECT_EQ(rc.code, 2);
  EXPECT_NE(rc.err.find("--recompute: 'none'"), std::string::npos) << rc.err;
  const auto rs = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--dp", "8", "--accelerate-config", kFile,
                           "--reshard-after-forward", "never"});
  EXPECT_EQ(rs.code, 2);
  EXPECT_NE(rs.err.find("--reshard-after-forward: 'never'"), std::string::npos) << rs.err;
  EXPECT_EQ(run_cli({"analyze", "--model", "llama-3.1-8b", "--accelerate-config", kFile, "--dp", "8"}).code, 2);
  EXPECT_EQ(run_cli({"search", "--model", "llama-3.1-8b", "--profile", "hf", "--accelerate-config", kFile, "--gpus", "8",
                     "--gpu", "h100-80g", "--global-batch", "64"})
                .code,
            2);
  const auto missing = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--dp", "8", "--accelerate-config",
                                "/nonexistent/accelerate.yaml"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("a readable accelerate config"), std::string::npos) << missing.err;
}

}  // namespace
