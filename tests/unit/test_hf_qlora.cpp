// QLoRA under the hf profile (bitsandbytes NF4 base weights) and PEFT's all-linear on Hugging Face
// modules (routers that are nn.Linear are adapted too). Every expected figure is worked by hand
// from the published shapes and bitsandbytes' storage format (finetune.hpp nf4_bytes).
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::run_cli;
using nlohmann::json;

json analyze_json(std::vector<std::string> args) {
  args.insert(args.begin(), "analyze");
  args.insert(args.end(), {"--format", "json"});
  const auto r = run_cli(args);
  EXPECT_EQ(r.code, 0) << r.err;
  return json::parse(r.out);
}

// explain --stage 0's items (category, module, item, detail, bytes).
json explain_items(std::vector<std::string> args) {
  args.insert(args.begin(), {"explain", "--stage", "0"});
  args.insert(args.end(), {"--format", "json"});
  const auto r = run_cli(args);
  EXPECT_EQ(r.code, 0) << r.err;
  return json::parse(r.out).at("items");
}

std::uint64_t item_bytes(const json& items, const std::string& item) {
  std::uint64_t sum = 0;
  for (const auto& e : items) {
    if (e.at("item").get<std::string>() == item) sum += e.at("bytes").get<std::uint64_t>();
  }
  return sum;
}

// Llama-3.1-8B, QLoRA r = 16 on all-linear, one GPU, ZeRO 0. NF4 bytes of an n-element weight:
// ceil(n/2) codes + ceil(n/64) absmax bytes + 4 ceil(ceil(n/64)/256) + 4 + 64.
//   q_proj, o_proj (4096 x 4096 = 16,777,216): 8,388,608 + 262,144 + 4,096 + 68 =  8,654,916
//   k_proj, v_proj (1024 x 4096 = 4,194,304):  2,097,152 +  65,536 + 1,024 + 68 =  2,163,780
//   gate, up, down (14336 x 4096 = 58,720,256): 29,360,128 + 917,504 + 14,336 + 68 = 30,292,036
//   a layer: 2 x 8,654,916 + 2 x 2,163,780 + 3 x 30,292,036 = 112,513,500; 32 layers 3,600,432,000
// bf16, not quantised (transformers leaves the output head out; embedding and norms are not
// nn.Linear): embedding and lm_head 2 x 128,256 x 4,096 x 2 = 2,101,346,304, norms
// (32 x 2 + 1) x 4,096 x 2 = 532,480; the adapters 41,943,040 x 2 = 83,886,080 (PEFT's count).
// Weights: 3,600,432,000 + 2,101,346,304 + 532,480 + 83,886,080 = 5,786,196,864.
TEST(HfQlora, Llama8bWeightsByHand) {
  const std::vector<std::string> run = {"--model", "llama-3.1-8b", "--profile", "hf", "--finetune", "qlora", "--lora-rank",
                                       "16", "--seq-len", "1024"};
  const json j = analyze_json(run);
  EXPECT_EQ(j.at("model").at("trainable_params").get<std::uint64_t>(), 41'943'040u);
  const json& st = j.at("stages").at(0);
  EXPECT_EQ(st.at("bytes").at("weights").get<std::uint64_t>(), 5'786'196'864u);
  // MatMul4Bit's dequantised copy of the largest NF4 weight, 58,720,256 x 2 bytes.
  const json items = explain_items(run);
  EXPECT_EQ(item_bytes(items, "dequantised NF4 weight (bitsandbytes, transient)"), 117'440'512u);
  // Per role: the 32 q_proj weights in NF4, 32 x 8,654,916 bytes.
  EXPECT_EQ(item_bytes(items, "q_proj"), 32u * 8'654'916u);
  // The same run as LoRA on bf16 weights differs by the NF4 part only: 3 x 32 x 58,720,256 +
  // 2 x 32 x 16,777,216 + 2 x 32 x 4,194,304 = 6,979,321,856 parameters, 13,958,643,712 bf16
  // bytes against 3,600,432,000.
  const json lora = analyze_json({"--model", "llama-3.1-8b", "--profile", "hf", "--finetune", "lora", "--lora-rank", "16",
                                  "--seq-len", "1024"});
  EXPECT_EQ(lora.at("stages").at(0).at("bytes").at("weights").get<std::uint64_t>() - 5'786'196'864u,
            13'958'643'712u - 3'600'432'000u);
  // Activations are LoRA's: the frozen base (bf16 or NF4) saves no input for its weight.
  EXPECT_EQ(st.at("bytes").at("activations"), lora.at("stages").at(0).at("bytes").at("activations"));
}

// Mixtral-8x7B, LoRA r = 16, all-linear. Megatron-Bridge leaves the router out; PEFT (hf) adapts
// the router's nn.Linear gate too. A layer: q A 16x4096 + B 4096x16 = 131,072, k and v
// 65,536 + 16,384 = 81,920 each, o 131,072; 8 experts x (w1, w3: 65,536 + 229,376; w2: 229,376 +
// 65,536) = 7,077,888; sum 7,503,872; x 32 = 240,123,904. The gate: A 16x4096 + B 8x16 = 65,664
// a layer, 2,101,248 in all: 242,225,152.
// transformers 4.x's modules (5.x's 3-D experts are refused under LoRA: HfQlora.Transformers5...).
TEST(HfQlora, PeftAllLinearAdaptsLinearRouters) {
  const json hf = analyze_json({"--model", "mixtral-8x7b", "--profile", "hf", "--finetune", "lora", "--lora-rank", "16",
                                "--seq-len", "1024", "--transformers-version", "4"});
  EXPECT_EQ(hf.at("model").at("trainable_params").get<std::uint64_t>(), 242'225'152u);
  const json mg = analyze_json({"--model", "mixtral-8x7b", "--finetune", "lora", "--lora-rank", "16", "--seq-len", "1024",
                                "--dp", "8", "--ep", "8"});
  EXPECT_EQ(mg.at("model").at("trainable_params").get<std::uint64_t>(), 240'123'904u);
  // DeepSeek-V3's router is a bare parameter in HF's code: neither adapted nor quantised.
  const std::string ds = std::string(MOEMEM_TEST_DATA_DIR) + "/../groundtruth/configs/deepseek_v3.json";
  bool router_seen = false;
  for (const auto& e :
       explain_items({"--model", ds, "--profile", "hf", "--finetune", "qlora", "--lora-rank", "8", "--transformers-version", "4"})) {
    if (e.at("module") == "router" && e.at("category") == "weights") {
      router_seen = true;
      EXPECT_EQ(e.at("detail").get<std::string>().find("NF4"), std::string::npos) << e.dump();
    }
    if (e.at("item").get<std::string>().starts_with("kv_down") && e.at("category") == "weights") {
      EXPECT_NE(e.at("detail").get<std::string>().find("NF4"), std::string::npos) << e.dump();
    }
  }
  EXPECT_TRUE(router_seen);
}

// transformers 5 keeps routed experts as 3-D parameters: PEFT adapts them through a wrapper that
// trained 20,760,576 parameters in a Qwen3-MoE layer on a GPU (r 16, all-linear) where per-expert
// adapters give 17,614,848, and bitsandbytes' NF4 replacement takes nn.Linear modules only.
// Refused by name, with what is modelled instead; search refuses it too.
TEST(HfQlora, Transformers5ExpertAdaptersAreRefused) {
  const std::vector<std::string> lora = {"--model", "qwen3-30b-a3b", "--profile", "hf", "--finetune", "lora", "--lora-rank", "16"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"analyze"};
    a.insert(a.end(), lora.begin(), lora.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  for (const auto& extra : {std::vector<std::string>{}, std::vector<std::string>{"--lora-targets", "gate_proj,up_proj"}}) {
    const auto r = with(extra);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--lora-targets"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--transformers-version 4"), std::string::npos) << r.err;
  }
  EXPECT_EQ(with({"--lora-targets", "q_proj,k_proj,v_proj,o_proj"}).code, 0);
  EXPECT_EQ(with({"--transformers-version", "4"}).code, 0);
  const auto qlora = run_cli({"analyze", "--model", "qwen3-30b-a3b", "--profile", "hf", "--finetune", "qlora", "--lora-rank", "16",
                              "--lora-targets", "q_proj,k_proj,v_proj,o_proj"});
  EXPECT_EQ(qlora.code, 2);
  EXPECT_NE(qlora.err.find("--finetune"), std::string::npos) << qlora.err;
  const auto search = run_cli({"search", "--model", "qwen3-30b-a3b", "--profile", "hf", "--gpus", "8", "--gpu", "h100-80g",
                               "--global-batch", "8", "--finetune", "lora", "--lora-rank", "16"});
  EXPECT_EQ(search.code, 2);
  EXPECT_NE(search.err.find("--lora-targets"), std::string::npos) << search.err;
}

TEST(HfQlora, RefusedWhereNotModelled) {
  const auto zero3 = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--finetune", "qlora", "--lora-rank",
                              "16", "--zero", "3", "--dp", "2"});
  EXPECT_EQ(zero3.code, 2);
  EXPECT_NE(zero3.err.find("--zero"), std::string::npos) << zero3.err;
  const auto megatron = run_cli({"analyze", "--model", "llama-3.1-8b", "--finetune", "qlora", "--lora-rank", "16"});
  EXPECT_EQ(megatron.code, 2);
  EXPECT_NE(megatron.err.find("--profile hf"), std::string::npos) << megatron.err;
}

}  // namespace
