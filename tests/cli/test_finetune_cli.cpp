// LoRA (issue 15): --finetune lora freezes the base (weights only: no gradient, no optimizer
// state) and trains adapters A (r x in) and B (out x r) per targeted linear, which keep fp32
// main gradients, fp32 master weights and AdamW's moments (the megatron profile's fp32 moments).
// Every expected number is computed by hand from the models' config.json sizes.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "cli/run_cli.hpp"
#include "moemem/finetune.hpp"

namespace {

using nlohmann::json;
using moemem::test::Args;
using moemem::test::activations_cli::analyze_json;
using moemem::test::activations_cli::concat;
using moemem::test::activations_cli::expect_exit_2;
using moemem::test::activations_cli::u64;

// Llama-3.1-8B (data/models/llama-3.1-8b.json): h 4096, 32 layers, q 32 x 128 = 4096, kv 8 x 128
// = 1024, ffn 14336, vocab 128256 untied; 8,030,261,248 parameters.
constexpr std::uint64_t kLlamaParams = 8030261248;
// PEFT's count for r = 16, all-linear (q, k, v, o, gate, up, down), r x (in + out) per linear:
//   q 16 x (4096 + 4096) = 131,072   k 16 x (4096 + 1024) = 81,920   v 81,920
//   o 16 x (4096 + 4096) = 131,072   gate, up 16 x (4096 + 14336) = 294,912 each
//   down 16 x (14336 + 4096) = 294,912   per layer 1,310,720; x 32 layers = 41,943,040.
constexpr std::uint64_t kLlamaLoraR16 = 32 * 16 * ((4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 3 * (4096 + 14336));
static_assert(kLlamaLoraR16 == 41943040);

Args llama(const Args& extra) {
  return concat({"--model", "llama-3.1-8b", "--micro-batch", "1", "--seq-len", "4096"}, extra);
}
const Args kLora16 = {"--finetune", "lora", "--lora-rank", "16"};

TEST(FinetuneCli, Llama8bAllLinearRank16TrainsPeftsCount) {
  const json r = analyze_json(llama(kLora16));
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(u64(r.at("model").at("trainable_params")), kLlamaLoraR16);
  EXPECT_EQ(u64(r.at("model").at("total_params")), kLlamaParams + kLlamaLoraR16);
  const auto& b = r.at("stages").at(0).at("bytes");
  EXPECT_EQ(u64(b.at("weights")), 2 * (kLlamaParams + kLlamaLoraR16));  // bf16 base and adapters
  EXPECT_EQ(u64(b.at("gradients")), 4 * kLlamaLoraR16);                  // fp32 main grads: adapters only
  EXPECT_EQ(u64(b.at("optimizer")), 12 * kLlamaLoraR16);                 // fp32 master, exp_avg, exp_avg_sq
}

// The cli contract's model.trainable_params is always there: under full fine-tuning every
// parameter trains.
// A router's score-correction bias is a buffer (Megatron-Core's TopKRouter registers expert_bias;
// HF's DeepSeek-V3 router its e_score_correction_bias): the checkpoint counts it, nothing trains
// it. PyTorch's own count, measured on an H200 with transformers 5.17
// (scripts/measure/hf_step_memory.py, tests/data/validation/measured-device.jsonl): the
// 4-layer Moonlight (one dense layer, three MoE layers of 64 experts) has 2,508,607,488
// parameters in model.parameters(), 3 x 64 fewer than its checkpoint tensors.
TEST(FinetuneCli, RouterScoreCorrectionBiasesDoNotTrain) {
  const std::string moonlight4 = std::string(MOEMEM_TEST_DATA_DIR) + "/validation/models/moonlight-16b-4l.json";
  for (const char* profile : {"hf", "megatron", "torchtitan"}) {
    SCOPED_TRACE(profile);
    const json r = analyze_json({"--model", moonlight4, "--profile", profile, "--micro-batch", "1", "--seq-len", "1024",
                                 "--recompute", "full"});
    ASSERT_FALSE(r.is_null());
    EXPECT_EQ(u64(r.at("model").at("total_params")), 2508607488u + 3 * 64);
    EXPECT_EQ(u64(r.at("model").at("trainable_params")), 2508607488u);
  }
  // Moonlight-16B: 27 layers, the first dense: 26 x 64 biases; every stage's trainable counts add
  // up to the model's.
  const json m = analyze_json({"--model", "moonlight-16b", "--pp", "2", "--micro-batch", "1", "--seq-len", "1024"});
  ASSERT_FALSE(m.is_null());
  EXPECT_EQ(u64(m.at("model").at("trainable_params")), u64(m.at("model").at("total_params")) - 26 * 64);
  std::uint64_t stages = 0;
  for (const auto& st : m.at("stages")) {
    stages += u64(st.at("params").at("trainable").at("non_expert")) + u64(st.at("params").at("trainable").at("expert"));
  }
  EXPECT_EQ(stages, u64(m.at("model").at("trainable_params")));
}

TEST(FinetuneCli, FullFineTuningTrainsEveryParameter) {
  const json r = analyze_json(llama({}));
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r.at("model").at("trainable_params"), r.at("model").at("total_params"));
  EXPECT_EQ(u64(r.at("stages").at(0).at("bytes").at("gradients")), 4 * kLlamaParams);
}

TEST(FinetuneCli, NamedTargetsAdaptOnlyThoseModules) {
  const json r = analyze_json(llama(concat(kLora16, {"--lora-targets", "q_proj,v_proj"})));
  ASSERT_FALSE(r.is_null());
  // q 16 x 8192 + v 16 x 5120 = 212,992 per layer, x 32
  EXPECT_EQ(u64(r.at("model").at("trainable_params")), 32u * 16 * (8192 + 5120));
  // A name given twice is the same target (PEFT matches modules against the set of names).
  const json twice = analyze_json(llama(concat(kLora16, {"--lora-targets", "q_proj,v_proj,q_proj"})));
  EXPECT_EQ(u64(twice.at("model").at("trainable_params")), 32u * 16 * (8192 + 5120));
}

TEST(FinetuneCli, TensorParallelSplitsBothAdapterMatrices) {
  const json r = analyze_json(llama(concat(kLora16, {"--tp", "2"})));
  ASSERT_FALSE(r.is_null());
  // Column bases: A r/2 x in, B out/2 x r; row bases: A r x in/2, B out/2 x r: half of each.
  EXPECT_EQ(u64(r.at("stages").at(0).at("bytes").at("gradients")), 4 * kLlamaLoraR16 / 2);
}

TEST(FinetuneCli, AdaptersSaveTheirRankWideIntermediate) {
  const json full = analyze_json(llama({})), lora = analyze_json(llama(kLora16));
  ASSERT_FALSE(full.is_null());
  ASSERT_FALSE(lora.is_null());
  // Without sequence parallelism or dropout A's input is the base's (already counted); B keeps
  // its input, 4096 tokens x r 16 in bf16, for each of the 7 adapters of each of the 32 layers.
  const auto act = [](const json& r) { return u64(r.at("stages").at(0).at("bytes").at("activations")); };
  EXPECT_EQ(act(lora) - act(full), 32u * 7 * 4096 * 16 * 2);
  const json dropped = analyze_json(llama(concat(kLora16, {"--lora-dropout", "0.1"})));
  ASSERT_FALSE(dropped.is_null());
  // Dropout keeps a byte mask and a bf16 copy of each adapter's input: q, k, v, gate, up and o
  // read 4096 x 4096 elements, down 4096 x 14336.
  const std::uint64_t inputs = 4096u * (6 * 4096 + 14336);
  EXPECT_EQ(act(dropped) - act(lora), 32 * inputs * 3);
}

TEST(FinetuneCli, RoutedExpertsGetAnAdapterPairEach) {
  // Qwen3-30B-A3B: h 2048, 48 MoE layers, q 4096, kv 4 x 128 = 512, 128 experts of ffn 768.
  const json r = analyze_json({"--model", "qwen3-30b-a3b", "--finetune", "lora", "--lora-rank", "8"});
  ASSERT_FALSE(r.is_null());
  const std::uint64_t attention = 8 * ((2048 + 4096) + 2 * (2048 + 512) + (4096 + 2048));
  const std::uint64_t experts = 128u * 3 * 8 * (2048 + 768);  // gate, up, down per expert
  EXPECT_EQ(u64(r.at("model").at("trainable_params")), 48 * (attention + experts));
}

TEST(FinetuneCli, Nf4BaseBytesCountCodesAndDoubleQuantisedScales) {
  // 4096 x 4096: 8,388,608 packed bytes, 262,144 blocks of 64 (a byte each), 1,024 groups of 256
  // blocks (fp32 each), an fp32 offset and the 16 fp32 NF4 codes.
  EXPECT_EQ(moemem::nf4_bytes(moemem::Count(4096u * 4096)).value(), 8388608u + 262144 + 4096 + 4 + 64);
}

TEST(FinetuneCli, RefusedAndBadInputsExitTwo) {
  expect_exit_2(concat({"analyze"}, llama({"--finetune", "qlora", "--lora-rank", "16"})), {"--finetune", "qlora", "megatron"});
  expect_exit_2(concat({"analyze"}, llama({"--finetune", "lora", "--lora-rank", "16", "--profile", "torchtitan"})),
                {"--finetune", "torchtitan"});
  expect_exit_2(concat({"analyze"}, llama({"--finetune", "lora"})), {"--lora-rank", "not given"});
  expect_exit_2(concat({"analyze"}, llama({"--finetune", "lora", "--lora-rank", "0"})), {"--lora-rank", "at least 1"});
  expect_exit_2(concat({"analyze"}, llama({"--lora-rank", "8"})), {"--lora-rank", "--finetune lora"});
  expect_exit_2(concat({"analyze"}, llama(concat(kLora16, {"--lora-targets", "q_proj,qkv"}))), {"--lora-targets", "qkv", "q_proj"});
  expect_exit_2(concat({"analyze"}, llama(concat(kLora16, {"--lora-dropout", "1"}))), {"--lora-dropout"});
  expect_exit_2(concat({"analyze"}, llama({"--finetune", "lora", "--lora-rank", "15", "--tp", "2"})), {"--lora-rank", "15", "tp = 2"});
  expect_exit_2(concat({"analyze"}, llama({"--finetune", "dora"})), {"--finetune", "dora"});
  // PEFT reads all-linear only as the whole target_modules.
  expect_exit_2(concat({"analyze"}, llama(concat(kLora16, {"--lora-targets", "all-linear,q_proj"}))),
                {"--lora-targets", "'all-linear,q_proj'", "all-linear alone"});
}

// search with --finetune lora: the layouts of a LoRA fine-tune. Llama-3.1-8B on one 80 GB GPU
// does not fit a full fine-tune (8,030,261,248 parameters x 16 bytes of bf16 weights, fp32 main
// gradients, master weights and moments is 128 GB before any activation), but fits LoRA (bf16
// weights 16.1 GB, the adapters' states 41,943,040 x 16 bytes). The first layout's command,
// given to analyze, reproduces its peak.
TEST(FinetuneCli, SearchFindsTheLayoutsOfALoraFineTune) {
  const Args base = {"search", "--model", "llama-3.1-8b", "--gpus", "1", "--gpu", "h100-80g", "--seq-len", "4096",
                     "--global-batch", "8", "--format", "json", "--top", "1"};
  const auto full = moemem::test::run_cli(base);
  ASSERT_EQ(full.code, 1) << full.err;  // search's exit status when no layout fits
  EXPECT_TRUE(json::parse(full.out).at("layouts").empty());
  const auto lora = moemem::test::run_cli(concat(base, kLora16));
  ASSERT_EQ(lora.code, 0) << lora.err;
  const json best = json::parse(lora.out).at("layouts").at(0);
  const std::string command = best.at("command").get<std::string>();
  EXPECT_NE(command.find("--finetune lora --lora-rank 16"), std::string::npos) << command;
  Args args = {"analyze"};
  std::size_t start = 0;
  while (start < command.size()) {
    const std::size_t end = std::min(command.find(' ', start), command.size());
    args.push_back(command.substr(start, end - start));
    start = end + 1;
  }
  args.insert(args.end(), {"--format", "json"});
  const auto again = moemem::test::run_cli(args);
  ASSERT_EQ(again.code, 0) << again.err;
  const json a = json::parse(again.out);
  EXPECT_EQ(u64(a.at("model").at("trainable_params")), kLlamaLoraR16);
  std::uint64_t peak = 0;
  for (const auto& st : a.at("stages")) peak = std::max(peak, u64(st.at("bytes").at("total")));
  EXPECT_EQ(peak, u64(best.at("peak_bytes")));
}

}  // namespace
