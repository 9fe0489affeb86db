// The hf profile (Hugging Face modeling code): one decoder layer's saved bytes computed by hand
// from the modeling code's shapes (the same sizes tests/groundtruth/check_hf.py measures with
// PyTorch autograd), and the settings it refuses, each by name with exit 2.
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "cli/run_cli.hpp"
#include "moemem/analyze.hpp"

namespace {

using moemem::test::run_cli;

const std::string kConfigs = std::string(MOEMEM_TEST_DATA_DIR) + "/../groundtruth/configs/";

// The scenario analyze's model, layout and training flags `args` describe.
moemem::Scenario scenario_of(const std::vector<std::string>& args) {
  CLI::App app;
  moemem::cli::ModelOptions mo;
  moemem::cli::LayoutOptions lo;
  moemem::cli::TrainingOptions to;
  moemem::cli::add_model_options(app, mo);
  moemem::cli::add_layout_options(app, lo);
  moemem::cli::add_training_options(app, to);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
  app.parse(reversed);
  return moemem::cli::resolve(mo, lo, to);
}

// Bytes one layer of `kind` keeps for one micro-batch under --profile hf with these flags.
std::uint64_t layer_bytes(const std::string& config, moemem::LayerKind kind, std::vector<std::string> flags) {
  std::vector<std::string> args = {"--model", kConfigs + config, "--profile", "hf", "--micro-batch", "2", "--seq-len", "16"};
  args.insert(args.end(), flags.begin(), flags.end());
  const auto s = scenario_of(args);
  const auto terms = moemem::layer_activation_terms(*s.profile, s.model, s.layout, s.training, kind);
  return moemem::kept_bytes(terms, s.training.recompute, s.training.recompute_modules).value();
}

// Llama, hidden 64, 4 heads and 2 KV heads of 16, ffn 128; b = 2, s = 16: 32 tokens, bf16.
//   input_layernorm: fp32 copy 32*64*4 = 8192, rsqrt 32*4 = 128, cast 32*64*2 = 4096    12416
//   q/k/v input (the norm's output) 32*64*2                                                4096
//   eager attention: q copy, repeated k, repeated v 3 * 2*4*16*16*2 = 12288, fp32 softmax
//     2*4*16*16*4 = 8192, bf16 probs 4096, o_proj input 32*64*2 = 4096                    28672
//   post_attention_layernorm as the first                                                 12416
//   MLP: input 4096, gate output, silu output, up output, down input 4 * 32*128*2 = 32768 36864
//   total                                                                                 94464
// (PyTorch autograd on the CPU saves 94464 bytes for this layer: check_hf.py.)
TEST(HfProfile, LlamaLayerByHand) {
  EXPECT_EQ(layer_bytes("llama.json", moemem::LayerKind::dense, {"--attention", "eager"}), 94464u);
  // Gradient checkpointing keeps the bf16 layer input: 32*64*2.
  EXPECT_EQ(layer_bytes("llama.json", moemem::LayerKind::dense, {"--attention", "eager", "--recompute", "full"}), 4096u);
  // flash-attention-2 instead of eager: q 32*4*16*2 = 4096, k and v 32*2*16*2 = 2048 each, output
  // (o_proj's input) 4096, fp32 log-sum-exp 2*4*16*4 = 512, rng state 16:
  // 94464 - 28672 + (4096 + 2048 + 2048 + 4096 + 512 + 16) = 78608.
  EXPECT_EQ(layer_bytes("llama.json", moemem::LayerKind::dense, {"--attention", "flash"}), 78608u);
}

// sdpa: with no padding mask PyTorch's flash kernel saves what flash-attention-2 does (Llama as
// above, 78608). DeepSeek-V3's MLA (4 heads, q/k 24, v 12; 32 tokens) under flash-attention-2 pads
// v: q, k, padded v, output 4 x 32*4*24*2 = 24576, o_proj's sliced copy 32*4*12*2 = 3072, lse
// 2*4*16*4 = 512, rng 16: 28176. sdpa's memory-efficient kernel: q, k 2 x 6144, v a view of
// kv_b_proj's output of k_nope and v, 32*4*(16 + 12)*2 = 7168, the output 3072 and o_proj's
// transposed copy of it 3072 (both as measured on a GPU, docs/validation.md), lse padded to 32
// positions 2*4*32*4 = 1024, seed and offset 16: 26640. 1536 fewer.
TEST(HfProfile, SdpaKernelByHand) {
  EXPECT_EQ(layer_bytes("llama.json", moemem::LayerKind::dense, {"--attention", "sdpa"}), 78608u);
  const auto flash = layer_bytes("deepseek_v3.json", moemem::LayerKind::dense, {"--attention", "flash"});
  const auto sdpa = layer_bytes("deepseek_v3.json", moemem::LayerKind::dense, {"--attention", "sdpa"});
  EXPECT_EQ(flash - sdpa, 1536u);
  const auto megatron = run_cli({"analyze", "--model", "llama-3.1-8b", "--attention", "sdpa"});
  EXPECT_EQ(megatron.code, 2);
  EXPECT_NE(megatron.err.find("--attention"), std::string::npos) << megatron.err;
  EXPECT_NE(megatron.err.find("--profile hf"), std::string::npos) << megatron.err;
}

// Mixtral MoE layer, 4 experts of ffn 48, top-2, 1 KV head: 64 routed rows. The experts' loop:
//   token index pairs 64*2*8 = 1024, gathered input 64*64*2 = 8192, 4 * 64*48*2 = 24576,
//   output 8192, indexed weight 64*2 = 128, index_add_ source 8192                        50304
//   router: input 4096, fp32 softmax 32*4*4 = 512, int64 indices 32*2*8 = 512, fp32 top-k
//   weights 256 and sum 128                                                                5504
//   norms 2 * 12416, q/k/v input 4096, attention (k and v repeated to 4 heads) 28672        57600
//   total 113408 (autograd: 113408)
TEST(HfProfile, MixtralMoeLayerByHand) {
  // transformers 4.x's loop, what the reference layers follow.
  EXPECT_EQ(layer_bytes("mixtral.json", moemem::LayerKind::moe, {"--attention", "eager", "--transformers-version", "4"}), 113408u);
}

// transformers 5.17's MoE blocks, router through experts (and shared experts), as PyTorch saved
// them on an H200: one MoE layer, 1 x 1024 tokens, bf16 autocast, each storage once
// (scripts/measure/hf_saved_tensors.py; the file holds every saved tensor with its module). The
// expected bytes are read from the measurement, summed over the layer's mlp modules; moemem counts
// the router's input under the norm's output.
std::uint64_t measured_mlp_bytes(const std::string& config, const std::string& impl) {
  std::ifstream in(std::string(MOEMEM_TEST_DATA_DIR) + "/groundtruth/hf-saved-tensors-h200-transformers-5.17.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::json::parse(line);
    if (r.at("config").get<std::string>().find(config) == std::string::npos || r.at("impl") != impl) continue;
    std::uint64_t sum = 0;
    for (const auto& t : r.at("tensors")) {
      if (t.at("module").get<std::string>().rfind("model.layers.0.mlp", 0) == 0) sum += t.at("bytes").get<std::uint64_t>();
    }
    return sum;
  }
  ADD_FAILURE() << "no measurement of " << config << " " << impl;
  return 0;
}

std::uint64_t moemem_mlp_bytes(const std::string& model, const std::string& impl, const std::string& attention) {
  const auto s = scenario_of({"--model", model, "--profile", "hf", "--ddp", "--micro-batch", "1", "--seq-len", "1024",
                              "--attention", attention, "--experts-implementation", impl});
  std::uint64_t sum = 0;
  for (const auto& t : moemem::layer_activation_terms(*s.profile, s.model, s.layout, s.training, moemem::LayerKind::moe)) {
    const std::string name(t.name);
    const std::string head = name.substr(0, name.find('.'));
    if (head == "router" || head == "experts" || head == "shared_experts" || name.rfind("post_attention_layernorm.output", 0) == 0) {
      sum += t.bytes().value();
    }
  }
  return sum;
}

TEST(HfProfile, Transformers5MoeBlocksAsMeasuredOnAGpu) {
  const std::string models = std::string(MOEMEM_TEST_DATA_DIR) + "/validation/models/";
  const struct {
    const char* measured;
    std::string model;
    const char* attention;
  } cases[] = {{"qwen3-30b-a3b-4l.json", models + "qwen3-30b-a3b-4l.json", "sdpa"},
               {"mixtral-8x7b-2l.json", models + "mixtral-8x7b-2l.json", "sdpa"},
               {"gpt-oss-20b.json", "gpt-oss-20b", "eager"}};
  for (const auto& c : cases) {
    for (const char* impl : {"grouped_mm", "eager"}) {
      SCOPED_TRACE(std::string(c.measured) + " " + impl);
      EXPECT_EQ(moemem_mlp_bytes(c.model, impl, c.attention), measured_mlp_bytes(c.measured, impl));
    }
  }
  // Moonlight (DeepSeek-V3's router and experts, two shared experts): exact under grouped_mm;
  // the loop measured 24,736 B (0.014%) less than its rows account for, one storage fewer.
  const std::string moonlight = models + "moonlight-16b-4l.json";
  EXPECT_EQ(moemem_mlp_bytes(moonlight, "grouped_mm", "sdpa"), measured_mlp_bytes("moonlight-16b-4l.json", "grouped_mm"));
  const std::uint64_t loop = measured_mlp_bytes("moonlight-16b-4l.json", "eager");
  EXPECT_GE(moemem_mlp_bytes(moonlight, "eager", "sdpa"), loop);
  EXPECT_LE(moemem_mlp_bytes(moonlight, "eager", "sdpa"), loop + loop / 5000);
}

TEST(HfProfile, RefusesWhatItDoesNotModel) {
  const std::vector<std::string> base = {"analyze", "--model", kConfigs + "llama.json", "--profile", "hf"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tp", "2"}, "--tp"},
      {{"--pp", "2"}, "--pp"},
      {{"--cp", "2"}, "--cp"},
      {{"--recompute", "selective"}, "--recompute"},
      {{"--fp8", "tensorwise"}, "--fp8"},
      {{"--finetune", "qlora", "--lora-rank", "8", "--zero", "3", "--dp", "2"}, "--zero"},
  };
  for (const auto& [flags, field] : cases) {
    auto args = base;
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << field;
    EXPECT_NE(r.err.find(field), std::string::npos) << r.err;
  }
  const auto ep = run_cli({"analyze", "--model", kConfigs + "mixtral.json", "--profile", "hf", "--ep", "2", "--dp", "2"});
  EXPECT_EQ(ep.code, 2);
  EXPECT_NE(ep.err.find("--ep"), std::string::npos) << ep.err;
  const auto glm = run_cli({"analyze", "--model", "glm-4.5-air", "--profile", "hf"});  // glm4_moe: not followed
  EXPECT_EQ(glm.code, 2);
  EXPECT_NE(glm.err.find("model_type"), std::string::npos) << glm.err;
}

// The whole forward of each measured one-layer model (embedding, the MoE layer, final norm, head
// and loss) against the bytes PyTorch saved in it: the models as the script built them
// (tests/data/groundtruth/configs/*-1l*.json), analyze's activations per micro-batch.
TEST(HfProfile, Transformers5WholeForwardAsMeasuredOnAGpu) {
  const std::string dir = std::string(MOEMEM_TEST_DATA_DIR) + "/groundtruth/";
  std::ifstream in(dir + "hf-saved-tensors-h200-transformers-5.17.jsonl");
  const std::vector<std::pair<std::string, std::string>> models = {{"qwen3-30b-a3b-4l.json", "qwen3-30b-a3b-1l.json"},
                                                                   {"mixtral-8x7b-2l.json", "mixtral-8x7b-1l.json"},
                                                                   {"moonlight-16b-4l.json", "moonlight-16b-1l-moe.json"},
                                                                   {"gpt-oss-20b.json", "gpt-oss-20b-1l.json"}};
  int checked = 0;
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::json::parse(line);
    const std::string config = r.at("config"), impl = r.at("impl");
    for (const auto& [measured, ours] : models) {
      if (config.find(measured) == std::string::npos) continue;
      SCOPED_TRACE(ours + " " + impl);
      const bool gpt_oss = ours.find("gpt-oss") != std::string::npos;
      const auto a = run_cli({"analyze", "--format", "json", "--model", dir + "configs/" + ours, "--profile", "hf", "--ddp",
                              "--micro-batch", "1", "--global-batch", "1", "--seq-len", "1024", "--attention",
                              gpt_oss ? "eager" : "sdpa", "--experts-implementation", impl});
      ASSERT_EQ(a.code, 0) << a.err;
      const auto predicted = nlohmann::json::parse(a.out).at("stages").at(0).at("activations_per_microbatch").get<std::uint64_t>();
      const auto saved = r.at("total").get<std::uint64_t>();
      if (ours.find("moonlight") != std::string::npos && impl == "eager") {
        EXPECT_EQ(predicted, saved + 24736);  // the loop's one storage fewer (above)
      } else {
        EXPECT_EQ(predicted, saved);
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 8);
}

TEST(HfProfile, TransformersReleaseAndExpertsImplementationAreCheckedByName) {
  const std::string mixtral = kConfigs + "mixtral.json";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--profile", "hf", "--transformers-version", "4", "--experts-implementation", "grouped_mm"}, "--experts-implementation"},
      {{"--profile", "hf", "--transformers-version", "4.57"}, "--transformers-version"},
      {{"--profile", "hf", "--experts-implementation", "batched_mm"}, "--experts-implementation"},
      {{"--profile", "megatron", "--transformers-version", "4"}, "--transformers-version"},
      {{"--profile", "megatron", "--experts-implementation", "eager"}, "--experts-implementation"},
      {{"--profile", "torchtitan", "--experts-implementation", "grouped_mm", "--recompute", "full"}, "--experts-implementation"},
  };
  for (const auto& [flags, field] : cases) {
    // torchtitan trains Qwen3-MoE, not Mixtral.
    std::vector<std::string> args = {"analyze", "--model", flags[1] == "torchtitan" ? kConfigs + "qwen3_moe.json" : mixtral};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << field;
    EXPECT_NE(r.err.find(field), std::string::npos) << r.err;
  }
  // transformers 5's grouped_mm keeps less than its loop, which keeps what 4.x's loop keeps here.
  const auto moe = [&](std::vector<std::string> flags) { return layer_bytes("mixtral.json", moemem::LayerKind::moe, flags); };
  EXPECT_LT(moe({"--attention", "eager"}), moe({"--attention", "eager", "--experts-implementation", "eager"}));
  EXPECT_EQ(moe({"--attention", "eager"}), moe({"--attention", "eager", "--experts-implementation", "grouped_mm"}));
}

TEST(HfProfile, AnalyzesAPreset) {
  const auto r = run_cli({"analyze", "--model", "qwen3-30b-a3b", "--profile", "hf", "--dp", "8", "--zero", "3",
                          "--recompute", "full", "--seq-len", "4096"});
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace
