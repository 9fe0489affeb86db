// Megatron-Core's per-layer CUDA graphs (--cuda-graph-impl, --cuda-graph-scope): read from launch
// scripts and the command line, the graph term sized by hand from the mechanism
// (src/analyze/cuda_graphs.cpp, docs/formulas.md "CUDA graphs"), and what is refused by name.
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "cli/megatron_cli_helpers.hpp"
#include "moemem/errors.hpp"
#include "moemem/megatron_args.hpp"

namespace {

using nlohmann::json;
using moemem::test::Args;
using moemem::test::activations_cli::concat;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::items_of;
using moemem::test::activations_cli::u64;
using namespace moemem;

const std::string kDir = moemem::test::megatron_dir();
using moemem::test::read_script;

// Qwen3-235B-A22B (94 MoE layers, h 4096, top-8) on one pipeline stage: one micro-batch in
// flight, so every graphed layer counts once. tokens = b x s / tp (sequence parallel) = 4096 / 2.
Args qwen3(const Args& extra) {
  return concat({"--model", "qwen3-235b-a22b", "--tp", "2", "--pp", "1", "--dp", "4", "--ep", "8", "--etp", "1", "--sp",
                 "--micro-batch", "1", "--seq-len", "4096", "--recompute", "selective", "--recompute-modules",
                 "layernorm,moe_act"},
                extra);
}
constexpr std::uint64_t kTokens = 2048, kHidden = 4096, kLayers = 94;

std::map<std::string, std::uint64_t> graph_items(const Args& args) {
  const json e = explain_json(args, 0);
  std::map<std::string, std::uint64_t> out;
  if (e.is_null()) return out;
  for (const auto& i : e.at("items")) {
    if (i.at("module") == "cuda_graphs") out[i.at("item").get<std::string>()] += u64(i.at("bytes"));
  }
  return out;
}

// NVIDIA's ModelZoo Qwen3-235B H100 recipe: --cuda-graph-impl transformer_engine
// --cuda-graph-scope moe_router moe_preprocess is read, and no CUDA graph flag is refused.
TEST(CudaGraphsCli, ModelZooQwen3FlagsAreRead) {
  const MegatronSettings s = read_script("modelzoo/run_qwen3_235b_h100.sh");
  ASSERT_TRUE(s.cuda_graph_impl.has_value());
  EXPECT_EQ(s.cuda_graph_impl->value, CudaGraphImpl::transformer_engine);
  ASSERT_TRUE(s.cuda_graph_scope.has_value());
  EXPECT_EQ(s.cuda_graph_scope->value, std::uint8_t{kGraphMoeRouter | kGraphMoePreprocess});
  for (const auto& u : s.unmodelled) EXPECT_EQ(u.flag.find("cuda-graph"), std::string::npos) << u.flag;
}

// transformer_engine, moe_router + moe_preprocess, DeepEP: Megatron turns the pre-MLP norm's
// recomputation off (its output is a static graph output), and preprocess returns token_probs
// (fp32) and token_indices (int64) over tp x top_k = 16 slots per token.
TEST(CudaGraphsCli, RouterGraphsUnderDeepEpKeepTheNormOutput) {
  const auto items = graph_items(qwen3({"--moe-token-dispatcher", "deepep", "--cuda-graph-impl", "transformer_engine",
                                        "--cuda-graph-scope", "moe_router,moe_preprocess"}));
  EXPECT_EQ(items.at("pre-MLP norm output (recompute off: a static graph output)"), kTokens * kHidden * 2 * kLayers);
  EXPECT_EQ(items.at("moe_preprocess token_probs (static output)"), kTokens * 16 * 4 * kLayers);
  EXPECT_EQ(items.at("moe_preprocess token_indices (static output)"), kTokens * 16 * 8 * kLayers);
  EXPECT_EQ(items.at("static output gradients"), 2 * kTokens * kHidden * 2);  // one set: norm output, residual
  EXPECT_FALSE(items.contains("static input copy (the previous graph's output is kept too)"));
  EXPECT_FALSE(items.contains("static attention mask"));
}

// Under alltoall, preprocess returns the permuted tokens (tokens x top_k x h) and probabilities,
// and the norm's recomputation stays on.
TEST(CudaGraphsCli, RouterGraphsUnderAlltoallKeepThePermutedTokens) {
  const auto items = graph_items(qwen3({"--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "moe_router,moe_preprocess"}));
  EXPECT_FALSE(items.contains("pre-MLP norm output (recompute off: a static graph output)"));
  EXPECT_EQ(items.at("moe_preprocess permuted tokens (static output)"), kTokens * 8 * kHidden * 2 * kLayers);
  EXPECT_EQ(items.at("moe_preprocess permuted probs (static output)"), kTokens * 8 * 4 * kLayers);
}

// The graph term is the whole difference graphs make to the stage's allocated bytes.
TEST(CudaGraphsCli, GraphsAddOnlyTheirBuffers) {
  const Args base = qwen3({"--moe-token-dispatcher", "deepep"});
  const json none = explain_json(base, 0);
  const json te = explain_json(concat(base, {"--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "moe_router,moe_preprocess"}), 0);
  ASSERT_FALSE(none.is_null());
  ASSERT_FALSE(te.is_null());
  for (const char* c : {"weights", "gradients", "optimizer", "activations"}) {
    SCOPED_TRACE(c);
    std::uint64_t a = 0, b = 0;
    for (const auto& [k, v] : items_of(none, c)) a += v;
    for (const auto& [k, v] : items_of(te, c)) b += v;
    EXPECT_EQ(a, b);
  }
  std::uint64_t graphs = 0;
  for (const auto& [k, v] : graph_items(concat(base, {"--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "moe_router,moe_preprocess"}))) graphs += v;
  std::uint64_t buffers_none = 0, buffers_te = 0;
  for (const auto& [k, v] : items_of(none, "buffers")) buffers_none += v;
  for (const auto& [k, v] : items_of(te, "buffers")) buffers_te += v;
  EXPECT_EQ(buffers_te - buffers_none, graphs);
}

// Llama-3.1-8B (32 dense layers, h 4096), whole layers graphed. transformer_engine copies each
// layer's input into a static buffer while the previous graph's output stays (one more tokens x h
// bf16 per layer) and keeps a bool attention mask b x s x s per layer; local hands the output
// buffer on as the next input and has no mask.
TEST(CudaGraphsCli, WholeLayerGraphsOfADenseModel) {
  const Args llama = {"--model", "llama-3.1-8b", "--tp", "2", "--pp", "1", "--dp", "4", "--sp", "--micro-batch", "1", "--seq-len", "4096"};
  const auto te = graph_items(concat(llama, {"--cuda-graph-impl", "transformer_engine"}));
  EXPECT_EQ(te.at("static input copy (the previous graph's output is kept too)"), kTokens * kHidden * 2 * 32);
  EXPECT_EQ(te.at("static attention mask"), std::uint64_t{4096} * 4096 * 32);
  EXPECT_EQ(te.at("static output gradients"), kTokens * kHidden * 2);
  const auto local = graph_items(concat(llama, {"--cuda-graph-impl", "local", "--cuda-graph-scope", "full"}));
  EXPECT_EQ(local.size(), 1u);
  EXPECT_EQ(local.at("static output gradients"), kTokens * kHidden * 2);
  const auto attn = graph_items(concat(llama, {"--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "attn"}));
  EXPECT_FALSE(attn.contains("static input copy (the previous graph's output is kept too)"));  // the MLP runs eagerly between graphs
  EXPECT_EQ(attn.at("static attention mask"), std::uint64_t{4096} * 4096 * 32);
}

TEST(CudaGraphsCli, RefusedByName) {
  const Args llama = {"analyze", "--model", "llama-3.1-8b", "--tp", "2", "--dp", "4"};
  expect_exit_2(concat(llama, {"--cuda-graph-impl", "full_iteration"}), {"--cuda-graph-impl", "whole-iteration"});
  expect_exit_2(concat(llama, {"--cuda-graph-impl", "eager"}), {"--cuda-graph-impl", "transformer_engine"});
  expect_exit_2(concat(llama, {"--cuda-graph-scope", "attn"}), {"--cuda-graph-scope", "--cuda-graph-impl"});
  expect_exit_2(concat(llama, {"--cuda-graph-impl", "local", "--cuda-graph-scope", "mamba"}), {"mamba"});
  expect_exit_2(concat(llama, {"--cuda-graph-impl", "local", "--cuda-graph-scope", "moe_router"}), {"--cuda-graph-scope", "without routed experts"});
  expect_exit_2(concat(llama, {"--cuda-graph-impl", "local", "--recompute", "full"}), {"--cuda-graph-impl", "--recompute full"});
  expect_exit_2(concat(llama, {"--cuda-graph-impl", "local", "--profile", "torchtitan"}), {"--cuda-graph-impl", "megatron"});
  const Args q = concat({"analyze"}, qwen3({"--cuda-graph-impl", "transformer_engine"}));
  expect_exit_2(q, {"--cuda-graph-scope", "whole MoE layer"});
  expect_exit_2(concat(q, {"--cuda-graph-scope", "moe"}), {"moe", "not modelled"});
  expect_exit_2(concat(q, {"--cuda-graph-scope", "moe_preprocess"}), {"moe_preprocess together with moe_router"});
  expect_exit_2(concat(q, {"--cuda-graph-scope", "full,attn"}), {"full alone"});
  expect_exit_2({"analyze", "--model", "qwen3-235b-a22b", "--tp", "2", "--dp", "4", "--ep", "8", "--etp", "1", "--recompute",
                 "selective", "--recompute-modules", "moe", "--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope",
                 "moe_router"},
                {"--recompute-modules", "moe_router"});
  expect_exit_2(concat(q, {"--cuda-graph-scope", "moe_router,moe_preprocess", "--moe-capacity-factor", "1.5"}),
                {"--cuda-graph-scope", "capacity factor"});
}

// Launch-script spellings: the deprecated switches set the implementation, --cuda-graph-modules
// and --cuda-graph-scope the parts; Megatron's conflicts and the unmodelled flags are refused.
TEST(CudaGraphsCli, ScriptSpellings) {
  const std::string model = "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --vocab-size 1000 --position-embedding-type rope --tensor-model-parallel-size 1 ";
  const auto read = [&](const std::string& flags) { return parse_megatron_args(model + flags, "script.sh"); };
  auto s = read("--enable-cuda-graph");
  EXPECT_EQ(s.cuda_graph_impl->value, CudaGraphImpl::local);
  s = read("--external-cuda-graph --cuda-graph-scope attn");
  EXPECT_EQ(s.cuda_graph_impl->value, CudaGraphImpl::transformer_engine);
  EXPECT_EQ(s.cuda_graph_scope->value, std::uint8_t{kGraphAttn});
  s = read("--cuda-graph-impl local --cuda-graph-modules attn mlp --cuda-graph-warmup-steps 3");
  EXPECT_EQ(s.cuda_graph_scope->value, std::uint8_t{kGraphAttn | kGraphMlp});
  s = read("--cuda-graph-modules attn");  // no implementation: Megatron ignores the modules
  EXPECT_FALSE(s.cuda_graph_scope.has_value());
  EXPECT_THROW((void)read("--enable-cuda-graph --cuda-graph-impl transformer_engine"), InputError);
  EXPECT_THROW((void)read("--enable-cuda-graph --external-cuda-graph"), InputError);
  EXPECT_THROW((void)read("--cuda-graph-impl local --cuda-graph-scope attn --cuda-graph-modules attn"), InputError);
  s = read("--cuda-graph-impl full_iteration");
  ASSERT_FALSE(s.unmodelled.empty());
  EXPECT_EQ(s.unmodelled.front().flag, "--cuda-graph-impl");
  s = read("--cuda-graph-impl local --cuda-graph-retain-backward-graph");
  ASSERT_FALSE(s.unmodelled.empty());
  EXPECT_EQ(s.unmodelled.front().flag, "--cuda-graph-retain-backward-graph");
}

}  // namespace
