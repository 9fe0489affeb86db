// Megatron's --cpu-offloading-num-layers (Transformer Engine's CPU offload of activations;
// src/analyze/activations.cpp cpu_offload, src/profiles/megatron_offload.cpp). Bytes by hand from
// Llama-3.1-8B's shapes (h 4096, 32 heads, 8 KV heads of 128, ffn 14336) at b 1, s 4096, tp 1,
// Megatron's default dropout 0.1, fused attention.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "moemem/megatron_args.hpp"

namespace {

using nlohmann::json;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::Args;
using moemem::test::activations_cli::concat;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::u64;

Args llama(const Args& extra = {}) {
  return concat({"--model", "llama-3.1-8b", "--micro-batch", "1", "--seq-len", "4096"}, extra);
}

// One decoder layer for one micro-batch, T = 4096 tokens, sbh = T x 4096 = 16,777,216 elements:
// bf16 (2 bytes): layer input, input-norm output, q (T x 32 x 128), attention output, the
// residual before the MLP and its norm output: 6 x sbh x 2 = 201,326,592; k and v (T x 8 x 128):
// 2 x 8,388,608; log-sum-exp 32 x T fp32 = 524,288; two dropout masks 2 x sbh x 1 = 33,554,432;
// SwiGLU: fc1 output T x 28672 x 2 = 234,881,024, its product T x 14336 x 2 = 117,440,512.
constexpr std::uint64_t kLayer = 201'326'592 + 16'777'216 + 524'288 + 33'554'432 + 234'881'024 + 117'440'512;
static_assert(kLayer == 604'504'064);

std::uint64_t per_microbatch(const json& r) { return u64(r.at("stages").at(0).at("activations_per_microbatch")); }
std::uint64_t host(const json& r) { return u64(r.at("stages").at(0).at("bytes").at("host")); }

// TE keeps at most L - N consecutive layers on the GPU (cpu_offload.py: "(num_layers -
// num_offloaded_layers) * T"); the first N layers' saved tensors are in host memory.
TEST(CpuOffloadCli, TheFirstNLayersMoveToTheHost) {
  const json none = analyze_json(llama());
  ASSERT_FALSE(none.is_null());
  EXPECT_EQ(host(none), 0u);
  for (const std::uint64_t n : {1u, 16u, 31u}) {
    SCOPED_TRACE(n);
    const json off = analyze_json(llama({"--cpu-offloading-num-layers", std::to_string(n)}));
    ASSERT_FALSE(off.is_null());
    EXPECT_EQ(per_microbatch(none) - per_microbatch(off), n * kLayer);
    EXPECT_EQ(host(off), n * kLayer);
    EXPECT_EQ(u64(none.at("stages").at(0).at("bytes").at("weights")), u64(off.at("stages").at(0).at("bytes").at("weights")));
  }
}

// DeepSeek-V2-Lite: 27 layers, the first dense. Offloading 1 layer leaves a window of 26: layers
// 1..26 (all MoE) is the larger, so the GPU keeps 26 MoE layers and the host the dense one.
TEST(CpuOffloadCli, MixedLayersKeepTheLargestWindow) {
  const Args lite = {"--model", "deepseek-v2-lite", "--micro-batch", "1", "--seq-len", "2048", "--ep", "8", "--dp", "8"};
  const json none = analyze_json(lite);
  const json one = analyze_json(concat(lite, {"--cpu-offloading-num-layers", "1"}));
  ASSERT_FALSE(none.is_null());
  ASSERT_FALSE(one.is_null());
  // The dense layer's bytes moved to the host, exactly what the GPU lost.
  EXPECT_GT(host(one), 0u);
  EXPECT_EQ(per_microbatch(none) - per_microbatch(one), host(one));
}

TEST(CpuOffloadCli, MegatronsRulesAreRefusedByName) {
  expect_exit_2(concat({"analyze"}, llama({"--cpu-offloading-num-layers", "32"})), {"--cpu-offloading-num-layers", "32 decoder layers"});
  expect_exit_2(concat({"analyze"}, llama({"--cpu-offloading-num-layers", "4", "--pp", "2"})), {"--cpu-offloading-num-layers", "pp 1"});
  expect_exit_2(concat({"analyze"}, llama({"--cpu-offloading-num-layers", "4", "--recompute", "full"})),
                {"--cpu-offloading-num-layers", "recomputation"});
  expect_exit_2(concat({"analyze"}, llama({"--cpu-offloading-num-layers", "4", "--profile", "torchtitan"})),
                {"--cpu-offloading-num-layers", "megatron profile"});
  expect_exit_2(concat({"analyze"}, llama({"--cpu-offloading-num-layers", "-1"})), {"--cpu-offloading-num-layers", "0 or more"});
}

// A launch script's flag is read as Megatron reads it (arguments.py: > 0 turns cpu_offloading on).
TEST(CpuOffloadCli, LaunchScriptFlagIsRead) {
  const auto s = moemem::parse_megatron_args(
      "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --vocab-size 1000 --position-embedding-type rope "
      "--cpu-offloading-num-layers 2",
      "script.sh");
  ASSERT_TRUE(s.cpu_offload_layers.has_value());
  EXPECT_EQ(s.cpu_offload_layers->value, 2);
}

}  // namespace
