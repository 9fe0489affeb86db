// --deepspeed ds_config.json (hf profile): the keys read, their effect on the run's settings,
// and every refusal naming its key (exit 2). The configs in tests/data/deepspeed follow the
// Hugging Face Trainer's documented ZeRO-2 offload and ZeRO-3 examples ("auto" values included).
#include <cstdint>
#include <cstdio>
#include <utility>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"
#include "moemem/deepspeed.hpp"
#include "moemem/errors.hpp"

namespace {

using moemem::test::run_cli;

const std::string kDir = std::string(MOEMEM_TEST_DATA_DIR) + "/deepspeed/";
const std::string kLlama = std::string(MOEMEM_TEST_DATA_DIR) + "/../groundtruth/configs/llama.json";

TEST(DeepSpeed, ReadsTheTrainersExamples) {
  const auto z2 = moemem::read_deepspeed_config(kDir + "zero2_offload.json");
  EXPECT_EQ(z2.stage, 2);
  EXPECT_TRUE(z2.offload_optimizer);
  EXPECT_FALSE(z2.reduce_bucket_size.has_value());  // "auto"
  EXPECT_EQ(z2.allgather_bucket_size, 200'000'000);  // 2e8 written as a float
  EXPECT_TRUE(z2.overlap());
  EXPECT_EQ(z2.dtype, moemem::DType::bf16);
  const auto z3 = moemem::read_deepspeed_config(kDir + "zero3.json");
  EXPECT_EQ(z3.stage, 3);
  EXPECT_FALSE(z3.offload_optimizer);
  EXPECT_EQ(z3.max_live_parameters, 1'000'000'000);
}

// What the bf16/fp16 sections may also hold: loss scaling, overflow checks, and the 16-bit
// master/state switches left off (the Trainer's documented fp16 section, LLaMA-Factory's configs).
TEST(DeepSpeed, PrecisionSectionsKeysThatChangeNoMemoryAreRead) {
  const auto fp16 = moemem::parse_deepspeed_config(
      R"({"fp16":{"enabled":true,"loss_scale":0,"loss_scale_window":1000,"initial_scale_power":16,"hysteresis":2,)"
      R"("consecutive_hysteresis":false,"min_loss_scale":1,"auto_cast":false,"fp16_master_weights_and_grads":false},)"
      R"("bf16":{"enabled":false},"zero_optimization":{"stage":2}})",
      "x");
  EXPECT_EQ(fp16.dtype, moemem::DType::fp16);
  const auto bf16 = moemem::parse_deepspeed_config(
      R"({"bf16":{"enabled":"auto","immediate_grad_update":true,"check_grad_overflow":false,"check_overflow":false,)"
      R"("bf16_master_weights_and_grads":false,"bf16_optimizer_states":false},"zero_optimization":{"stage":3}})",
      "x");
  EXPECT_EQ(bf16.dtype, moemem::DType::bf16);
}

// overlap_comm unset: on under stage 3 only (deepspeed/runtime/zero/config.py overlap_comm_valid).
TEST(DeepSpeed, OverlapDefaultsFollowTheStage) {
  EXPECT_FALSE(moemem::parse_deepspeed_config(R"({"bf16":{"enabled":true},"zero_optimization":{"stage":2}})", "x").overlap());
  EXPECT_TRUE(moemem::parse_deepspeed_config(R"({"bf16":{"enabled":true},"zero_optimization":{"stage":3}})", "x").overlap());
}

// Each refusal names the key in the file.
TEST(DeepSpeed, RefusesByKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"bf16":{"enabled":true},"zero_optimization":{"stage":2,"offload_param":{"device":"cpu"}}})",
       "zero_optimization.offload_param.device"},
      {R"({"bf16":{"enabled":true},"zero_optimization":{"stage":2,"offload_optimizer":{"device":"nvme"}}})",
       "zero_optimization.offload_optimizer.device"},
      {R"({"bf16":{"enabled":true},"zero_optimization":{"stage":3,"zero_hpz_partition_size":8}})",
       "zero_optimization.zero_hpz_partition_size"},
      {R"({"bf16":{"enabled":true},"zero_optimization":{"stage":5}})", "zero_optimization.stage"},
      {R"({"bf16":{"enabled":true},"zero_optimization":{"stage":0,"offload_optimizer":{"device":"cpu"}}})",
       "zero_optimization.offload_optimizer.device"},
      {R"({"bf16":{"enabled":true},"zero_optimization":{"stage":1,"reduce_bucket_size":-1}})",
       "zero_optimization.reduce_bucket_size"},
      {R"({"bf16":{"enabled":true},"zero_optimization":{"stage":1},"activation_checkpointing":{}})", "activation_checkpointing"},
      // DeepSpeed would run stage 0, but accelerate's DeepSpeedPlugin refuses a config without the section.
      {R"({"bf16":{"enabled":true}})", "zero_optimization"},
      {R"({"bf16":{"enabled":true},"fp16":{"enabled":true},"zero_optimization":{"stage":1}})", "bf16.enabled/fp16.enabled"},
      {R"({"zero_optimization":{"stage":2}})", "bf16.enabled/fp16.enabled"},
      {R"({"bf16":{"enabled":true},"zero_optimization":{"stage":1},"optimizer":{"type":"OneBitAdam"}})", "optimizer.type"},
      {R"([1, 2])", "x"},
      // FP16_Optimizer's legacy path hands FusedAdam.step gradients, which it refuses (stage 0 only).
      {R"({"bf16":{"enabled":true},"zero_optimization":{"stage":0},"optimizer":{"type":"AdamW","legacy_fusion":true}})",
       "optimizer.legacy_fusion"},
      // 16-bit master weights and moments (precision_config.py) change the optimizer's bytes: not
      // modelled, refused when on; so are unknown keys of the bf16/fp16 sections and fp16's
      // auto_cast (fp32 weights under autocast).
      {R"({"bf16":{"enabled":true,"bf16_master_weights_and_grads":true},"zero_optimization":{"stage":2}})",
       "bf16.bf16_master_weights_and_grads"},
      {R"({"bf16":{"enabled":true,"bf16_master_weights_and_grads":true,"bf16_optimizer_states":true},"zero_optimization":{"stage":2}})",
       "bf16.bf16_master_weights_and_grads"},
      {R"({"bf16":{"enabled":true,"bf16_optimizer_states":true},"zero_optimization":{"stage":2}})", "bf16.bf16_optimizer_states"},
      {R"({"fp16":{"enabled":true,"fp16_master_weights_and_grads":true},"zero_optimization":{"stage":2}})",
       "fp16.fp16_master_weights_and_grads"},
      {R"({"fp16":{"enabled":true,"auto_cast":true},"zero_optimization":{"stage":2}})", "fp16.auto_cast"},
      {R"({"bf16":{"enabled":true,"whatever_unknown":1},"zero_optimization":{"stage":2}})", "bf16.whatever_unknown"},
      {R"({"bf16":{"enabled":true,"loss_scale":0},"zero_optimization":{"stage":2}})", "bf16.loss_scale"},
  };
  // ZeRO's optimizers never read it, nor does the unfused path torch_adam takes.
  EXPECT_NO_THROW((void)moemem::parse_deepspeed_config(
      R"({"bf16":{"enabled":true},"zero_optimization":{"stage":2},"optimizer":{"type":"AdamW","legacy_fusion":true}})", "x"));
  EXPECT_NO_THROW((void)moemem::parse_deepspeed_config(
      R"({"bf16":{"enabled":true},"zero_optimization":{"stage":0},"optimizer":{"type":"AdamW","legacy_fusion":true,"params":{"torch_adam":true}}})",
      "x"));
  for (const auto& [text, key] : cases) {
    try {
      (void)moemem::parse_deepspeed_config(text, "x");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const moemem::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

std::uint64_t host_bytes(const nlohmann::json& j) { return j.at("stages")[0].at("bytes").at("host").get<std::uint64_t>(); }

// Through the CLI: the ZeRO-2 offload config puts the fp32 master, moments and fp32 gradient
// partition on the host: 16 bytes per parameter over dp = 1 (Llama test config: 2 layers).
TEST(DeepSpeed, OffloadGoesToTheHostColumn) {
  const auto r = run_cli({"analyze", "--model", kLlama, "--profile", "hf", "--deepspeed", kDir + "zero2_offload.json",
                          "--seq-len", "16", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  // Parameters: embedding 256*64 + head 256*64 + final norm 64 + 2 layers x (q 64*64, k and v
  // 2 x 64*32, o 64*64 = 12288; MLP 3 x 64*128 = 24576; 2 norms x 64) = 32768 + 64 + 2 * 36992 = 106816.
  // Host: 106816 x (4 master + 4 + 4 moments + 4 gradient) = 1709056, and the pinned gradient
  // staging buffer of the largest trainable parameter (embedding or head, 256*64 = 16384 x 2 bytes
  // = 32768): 1741824.
  EXPECT_EQ(host_bytes(j), 1'741'824u);
  const auto none = run_cli({"analyze", "--model", kLlama, "--profile", "hf", "--zero", "2", "--seq-len", "16", "--format", "json"});
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_EQ(host_bytes(nlohmann::json::parse(none.out)), 0u);
  // ZeRO-3 without offload: gradients in the model's bf16 (grad_accum_dtype defaults to it),
  // the partition over dp = 1: 106816 x 2 = 213632 bytes.
  const auto z3 = run_cli({"analyze", "--model", kLlama, "--profile", "hf", "--deepspeed", kDir + "zero3.json",
                           "--seq-len", "16", "--format", "json"});
  ASSERT_EQ(z3.code, 0) << z3.err;
  EXPECT_EQ(nlohmann::json::parse(z3.out).at("stages")[0].at("bytes").at("gradients").get<std::uint64_t>(), 213'632u);
}

std::uint64_t stage_bytes(const nlohmann::json& j, const char* what) {
  return j.at("stages")[0].at("bytes").at(what).get<std::uint64_t>();
}

nlohmann::json hf_run(std::vector<std::string> extra) {
  std::vector<std::string> args = {"analyze", "--model", kLlama, "--profile", "hf", "--seq-len", "16", "--format", "json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_cli(args);
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

// DeepSpeed's own buffers (src/profiles/hf_deepspeed.cpp), hidden 64 (Llama test config). The hf
// profile has no other buffers (no GEMM workspaces, no allowance), so "buffers" is these alone.
TEST(DeepSpeed, BucketBuffersByStage) {
  // ZeRO-2 offload config: reduce_bucket_size "auto" = 64 * 64 = 4096, overlap_comm true, so two
  // IPG buffers: 2 x 4096 x 2 bytes = 16384; offload's GPU staging buffer of the largest trainable
  // parameter (256 * 64 = 16384 elements) x 2 bytes = 32768. Total 49152.
  EXPECT_EQ(stage_bytes(hf_run({"--deepspeed", kDir + "zero2_offload.json"}), "buffers"), 49'152u);
  // A bare --zero 1: DeepSpeed's defaults, reduce_bucket_size 5e8, overlap_comm off below stage 3,
  // contiguous_gradients on: one IPG buffer of 5e8 x 2 bytes = 1e9.
  EXPECT_EQ(stage_bytes(hf_run({"--zero", "1"}), "buffers"), 1'000'000'000u);
  // ZeRO-3 config: one IPG buffer 4096 x 2 = 8192; gathered parameters: the largest (16384) plus
  // the prefetch bucket int(0.9 * 64 * 64) = 3686 (max_live 1e9 leaves room), 20070 x 2 = 40140.
  // Total 48332. Persistent parameters (<= 10 * 64 = 640 elements): the five RMSNorm weights of
  // 64, 320 x 2 = 640 bytes, on top of the shard 106816 x 2 = 213632: weights 214272.
  const auto z3 = hf_run({"--deepspeed", kDir + "zero3.json"});
  EXPECT_EQ(stage_bytes(z3, "buffers"), 48'332u);
  EXPECT_EQ(stage_bytes(z3, "weights"), 214'272u);
  // offload_param: the bf16 shard (213632) moves to the host column; the GPU keeps the persistent
  // parameters (640) and the same buffers.
  const auto off = hf_run({"--deepspeed", kDir + "zero3_offload_param.json"});
  EXPECT_EQ(stage_bytes(off, "weights"), 640u);
  EXPECT_EQ(stage_bytes(off, "host"), 213'632u);
  EXPECT_EQ(stage_bytes(off, "buffers"), 48'332u);
}

// A parameter is what Hugging Face's modeling code holds: gpt-oss keeps each layer's routed experts
// in one 3-D parameter (GptOssExperts.gate_up_proj [128, 2880, 5760], down_proj and their biases),
// which ZeRO-3 gathers whole; Mixtral's experts are an nn.Linear each. Bare --zero 3: DeepSpeed's
// defaults (prefetch 5e7, max_live 1e9, persistence threshold 1e5 elements).
TEST(DeepSpeed, ZeroThreeGathersGptOssExpertsAsOneParameter) {
  const auto r = run_cli({"analyze", "--model", "gpt-oss-120b", "--profile", "hf", "--zero", "3", "--dp", "64", "--seq-len",
                          "4096", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  // Buffers: the IPG bucket 5e8 x 2 bytes, plus the experts module's parameters, gathered together
  // by fetch_sub_module: gate_up_proj 128 x 2880 x 5760 = 2,123,366,400, down_proj 128 x 2880 x
  // 2880 = 1,061,683,200 and their biases 128 x 5760 + 128 x 2880 = 1,105,920, 3,186,155,520
  // elements, with no room left under max_live for a prefetch: x 2 bytes.
  EXPECT_EQ(stage_bytes(j, "buffers"), 1'000'000'000ULL + 6'372'311'040ULL);
  // Persistent (<= 1e5 elements), per layer: two norms 2 x 2880, sinks 64, q/k/v/o biases 4096 +
  // 512 + 512 + 2880, router bias 128 = 13,952; x 36 + the final norm 2880 = 505,152 x 2 bytes.
  // The experts' biases ([128, 5760] and [128, 2880]) are over the threshold.
  const auto e = run_cli({"explain", "--model", "gpt-oss-120b", "--profile", "hf", "--zero", "3", "--dp", "64", "--seq-len",
                          "4096", "--stage", "0", "--format", "json"});
  ASSERT_EQ(e.code, 0) << e.err;
  bool persistent = false;
  const auto items = nlohmann::json::parse(e.out).at("items");
  for (const auto& item : items) {
    if (item.at("item") != "persistent parameters, gathered whole") continue;
    persistent = true;
    EXPECT_EQ(item.at("bytes").get<std::uint64_t>(), 1'010'304u);
    EXPECT_EQ(item.at("detail").get<std::string>().rfind("289 parameters", 0), 0u) << item.dump();
  }
  EXPECT_TRUE(persistent);
  // Mixtral-8x7B under transformers 5 (the default): MixtralExperts holds gate_up_proj [8, 2 x
  // 14336, 4096] = 939,524,096 and down_proj [8, 4096, 14336] = 469,762,048 elements, one module of
  // 1,409,286,144, over max_live: no prefetch.
  const auto mixtral = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"analyze", "--model", "mixtral-8x7b", "--profile", "hf", "--zero", "3",
                                     "--dp", "64", "--seq-len", "4096", "--format", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto out = run_cli(args);
    EXPECT_EQ(out.code, 0) << out.err;
    return stage_bytes(nlohmann::json::parse(out.out), "buffers");
  };
  EXPECT_EQ(mixtral({}), 1'000'000'000ULL + 2'818'572'288ULL);
  // Under transformers 4 each expert is an nn.Linear per matrix: the largest module is the
  // embedding (32000 x 4096 = 131,072,000), and the prefetch min(5e7, 1e9 - 131,072,000):
  // (131,072,000 + 5e7) x 2 bytes.
  EXPECT_EQ(mixtral({"--transformers-version", "4", "--experts-implementation", "eager"}),
            1'000'000'000ULL + 362'144'000ULL);
}

// A bare --zero is DeepSpeed's defaults with bf16, so its gradients are what a ds_config with only
// bf16 and the stage gives: bf16 under ZeRO (engine.py get_data_types). Llama-3.1-8B
// (8,030,261,248 parameters), ZeRO-1 keeps them whole: x 2 bytes. With offload_optimizer the
// gradient partition lives on the host only (fp32, beside the master and moments): ZeRO-3 with
// both offloads at dp 8, 1,003,782,656 parameters a rank, host = bf16 shard 2 + 16 bytes each.
TEST(DeepSpeed, BareZeroIsTheConfigsDefaultsAndOffloadKeepsNoGradientOnTheGpu) {
  const auto run = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--dp", "8", "--format", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
  };
  char path[] = "/tmp/moemem-ds-zero1-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = R"({"bf16":{"enabled":true},"zero_optimization":{"stage":1}})";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const auto bare = run({"--zero", "1"});
  const auto config = run({"--deepspeed", path});
  std::remove(path);
  EXPECT_EQ(stage_bytes(bare, "gradients"), 8'030'261'248ULL * 2);
  EXPECT_EQ(stage_bytes(bare, "total"), stage_bytes(config, "total"));
  const auto off = run({"--deepspeed", kDir + "zero3_offload_both.json"});
  EXPECT_EQ(stage_bytes(off, "gradients"), 0u);
  EXPECT_EQ(stage_bytes(off, "optimizer"), 0u);
  EXPECT_EQ(stage_bytes(off, "host"), 1'003'782'656ULL * (2 + 16));
}

// A ds_config in a temporary file (the caller removes it).
std::string temp_config(const std::string& text) {
  char path[] = "/tmp/moemem-ds-config-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  return std::string(path);
}

// Without ZeRO (stage 0) DeepSpeed from 0.17.6 keeps bf16 weights and gradients, fp32 master
// copies and moments of every parameter, and makes fp32 gradients for the master at the step
// (engine.py DDP_BFLOAT16 -> FP16_UnfusedOptimizer, or FP16_Optimizer with the config's FusedAdam,
// whose flat copy of them doubles it; torch_adam's foreach AdamW adds a copy of exp_avg_sq). The
// Llama test config has 106,816 parameters; at 16 tokens its activations are far below the step's
// temporaries, so the step is the peak.
TEST(DeepSpeed, StageZeroStepsFp32MasterCopiesWithFp32Gradients) {
  const std::uint64_t n = 106'816;
  const auto bare = hf_run({"--zero", "0"});
  EXPECT_EQ(stage_bytes(bare, "gradients"), n * 2);
  // master 4 + moments 4 + 4, and the unfused step's fp32 gradient per parameter.
  EXPECT_EQ(stage_bytes(bare, "optimizer"), n * (12 + 4));
  EXPECT_EQ(stage_bytes(bare, "activations"), 0u);  // the step is the peak
  const std::string stage0 = temp_config(R"({"bf16":{"enabled":true},"zero_optimization":{"stage":0}})");
  const std::string fused = temp_config(R"({"bf16":{"enabled":true},"zero_optimization":{"stage":0},"optimizer":{"type":"AdamW"}})");
  const std::string torch_adam = temp_config(
      R"({"bf16":{"enabled":true},"zero_optimization":{},"optimizer":{"type":"AdamW","params":{"torch_adam":true}}})");
  const std::string torch_fused = temp_config(
      R"({"bf16":{"enabled":true},"zero_optimization":{},"optimizer":{"type":"AdamW","params":{"torch_adam":true,"fused":true}}})");
  const auto from_stage0 = hf_run({"--deepspeed", stage0});
  const auto from_fused = hf_run({"--deepspeed", fused});
  const auto from_torch = hf_run({"--deepspeed", torch_adam});
  const auto from_torch_fused = hf_run({"--deepspeed", torch_fused});
  for (const auto& path : {stage0, fused, torch_adam, torch_fused}) std::remove(path.c_str());
  EXPECT_EQ(stage_bytes(from_stage0, "total"), stage_bytes(bare, "total"));
  EXPECT_EQ(stage_bytes(from_fused, "optimizer"), n * (12 + 8));
  EXPECT_EQ(stage_bytes(from_torch, "optimizer"), n * (12 + 8));
  EXPECT_EQ(stage_bytes(from_torch_fused, "optimizer"), n * (12 + 4));
}

// bf16 without ZeRO before DeepSpeed 0.17.6 runs BF16_Optimizer (runtime/bf16_optimizer.py, read
// at v0.15.0 to v0.17.5): bf16 gradients stay in param.grad, an fp32 buffer holds every flat
// group's gradients (each group padded to a multiple of 2 x dp elements), and the fp32 master copies
// and moments live on dp partitions. After backward the engine all-reduces the fp32 buffers in
// 5e8-element buckets: one group alone through a bf16 copy, several through their fp32
// concatenation and its bf16 copy; without immediate_grad_update each gradient is converted to fp32
// one at a time then. Llama test config (106,816 parameters): the Trainer's own optimizer has two
// groups, the 320 norm weights (final norm 64 + 2 layers x 2 x 64) and the other 106,496.
TEST(DeepSpeed, StageZeroBeforeSeventeenSixRunsBf16Optimizer) {
  const std::uint64_t n = 106'816;
  const auto old = hf_run({"--zero", "0", "--deepspeed-version", "0.16.4"});
  EXPECT_EQ(stage_bytes(old, "gradients"), n * 2 + n * 4);
  // Master 4 + moments 8 over dp 1, and the step: both groups in one bucket (106,816 < 5e8), their
  // fp32 concatenation and its bf16 copy, 6 x 106,816 = 640,896, above one gradient's fp32 copy
  // (the embedding's or head's 16,384 x 4) and the activations of 16 tokens.
  EXPECT_EQ(stage_bytes(old, "optimizer"), n * 12 + n * 6);
  EXPECT_EQ(stage_bytes(old, "activations"), 0u);
  // dp 3: groups padded to multiples of 6 (106,496 -> 106,500 and 320 -> 324) in the fp32 buffer;
  // master and moments on each group's partition, 106,500 / 3 + 324 / 3 = 35,608 elements; the
  // bucket 6 x 106,824. The 8 padding elements' bf16 bytes (DeepSpeed's flat bf16 weights hold
  // them) are counted with the gradients: 2 x 106,824.
  const auto dp3 = hf_run({"--zero", "0", "--dp", "3", "--deepspeed-version", "0.17.3"});
  EXPECT_EQ(stage_bytes(dp3, "gradients"), 106'824u * 2 + 106'824u * 4);
  EXPECT_EQ(stage_bytes(dp3, "optimizer"), 35'608u * 12 + 106'824u * 6);
  EXPECT_EQ(stage_bytes(dp3, "weights"), n * 2);
  // 0.16.5 to 0.17.0 convert each gradient in its hook (immediate_grad_update's default then): the
  // step's largest temporary is still the bucket.
  EXPECT_EQ(stage_bytes(hf_run({"--zero", "0", "--deepspeed-version", "0.17.0"}), "optimizer"), n * 12 + n * 6);
  // From 0.17.6, and with --deepspeed-version current, the FP16 optimizers' path (the test above).
  EXPECT_EQ(stage_bytes(hf_run({"--zero", "0", "--deepspeed-version", "0.18.1"}), "total"),
            stage_bytes(hf_run({"--zero", "0"}), "total"));
  // ZeRO stages are unchanged by the release.
  EXPECT_EQ(stage_bytes(hf_run({"--zero", "2", "--deepspeed-version", "0.16.4"}), "total"),
            stage_bytes(hf_run({"--zero", "2"}), "total"));
}

// A config's optimizer is built from one group: a bucket of one tensor, reduced through its bf16
// copy (2 x 106,816 = 213,632). torch_adam's foreach AdamW adds _foreach_sqrt's copy of the
// partition's exp_avg_sq (4 x 106,816 = 427,264), the larger. The ds_config's
// bf16.immediate_grad_update overrides the release's default.
TEST(DeepSpeed, Bf16OptimizerStepFollowsTheConfigsOptimizer) {
  const std::uint64_t n = 106'816;
  const std::string torch_adam = temp_config(
      R"({"bf16":{"enabled":true},"zero_optimization":{"stage":0},"optimizer":{"type":"AdamW","params":{"torch_adam":true}}})");
  const std::string immediate =
      temp_config(R"({"bf16":{"enabled":true,"immediate_grad_update":true},"zero_optimization":{"stage":0}})");
  const std::string bad = temp_config(R"({"bf16":{"enabled":true,"immediate_grad_update":"yes"},"zero_optimization":{}})");
  const auto foreach = hf_run({"--deepspeed", torch_adam, "--deepspeed-version", "0.16.4"});
  EXPECT_EQ(stage_bytes(foreach, "optimizer"), n * 12 + n * 4);
  // With the hook's conversion and the step's bucket copy, whichever is the peak, the total is
  // at least the states and the bucket.
  const auto hooked = hf_run({"--deepspeed", immediate, "--deepspeed-version", "0.16.4"});
  EXPECT_EQ(stage_bytes(hooked, "gradients"), n * 6);
  const auto r = run_cli({"analyze", "--model", kLlama, "--profile", "hf", "--deepspeed", bad, "--deepspeed-version", "0.16.4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bf16.immediate_grad_update"), std::string::npos) << r.err;
  for (const auto& path : {torch_adam, immediate, bad}) std::remove(path.c_str());
}

// Where the activations are the peak (4,096 tokens), the backward's transients show: the fp32 copy
// of one gradient in its hook under immediate_grad_update (the largest trainable parameter, the
// embedding or head, 16,384 x 4 = 65,536 bytes): on from 0.16.5 to 0.17.0 by default, off before and
// after, the config's key winning. From 0.16.5 the zeroed bf16 gradients also take each new one in
// place from the second micro-batch: 16,384 x 2 = 32,768 bytes more with accumulation.
TEST(DeepSpeed, Bf16OptimizerBackwardCopiesFollowReleaseAndConfig) {
  const auto buffers = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"analyze", "--model", kLlama, "--profile", "hf", "--seq-len", "4096", "--zero", "0",
                                     "--format", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_GT(stage_bytes(j, "activations"), 0u);  // backward, not the step, is the peak
    return stage_bytes(j, "buffers");
  };
  const std::uint64_t off = buffers({"--deepspeed-version", "0.16.4"});
  EXPECT_EQ(buffers({"--deepspeed-version", "0.16.5"}), off + 65'536u);
  EXPECT_EQ(buffers({"--deepspeed-version", "0.17.0"}), off + 65'536u);
  EXPECT_EQ(buffers({"--deepspeed-version", "0.17.1"}), off);
  const std::string on = temp_config(R"({"bf16":{"enabled":true,"immediate_grad_update":true},"zero_optimization":{"stage":0}})");
  const std::string no = temp_config(R"({"bf16":{"enabled":true,"immediate_grad_update":false},"zero_optimization":{"stage":0}})");
  EXPECT_EQ(buffers({"--deepspeed", on, "--deepspeed-version", "0.16.4"}), off + 65'536u);
  EXPECT_EQ(buffers({"--deepspeed", no, "--deepspeed-version", "0.16.6"}), off);
  for (const auto& path : {on, no}) std::remove(path.c_str());
  EXPECT_EQ(buffers({"--deepspeed-version", "0.16.4", "--global-batch", "4"}), off);
  EXPECT_EQ(buffers({"--deepspeed-version", "0.17.2", "--global-batch", "4"}), off + 32'768u);
  EXPECT_EQ(buffers({"--deepspeed-version", "0.16.5", "--global-batch", "4"}), off + 65'536u + 32'768u);
}

// Llama-3.1-8B at dp 8 under 0.16.4 with the Trainer's optimizer: the decay group (8,029,995,008
// elements, a multiple of 16) is over 5e8 alone, so it is reduced as one tensor through its bf16
// copy (2 x 8,029,995,008 = 16,059,990,016), the norms' group (32 x 2 x 4096 + 4096 = 266,240) after
// it; the foreach step's copy of a partition's exp_avg_sq (4 x 8,029,995,008 / 8) is smaller. At
// 512 tokens the step is the peak: master and moments 12 x 8,030,261,248 / 8 beside it.
TEST(DeepSpeed, Bf16OptimizerReducesALargeGroupAlone) {
  const auto r = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--zero", "0", "--dp", "8", "--seq-len",
                          "512", "--deepspeed-version", "0.16.4", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(stage_bytes(j, "optimizer"), 12ULL * 1'003'782'656ULL + 16'059'990'016ULL);
  EXPECT_EQ(stage_bytes(j, "activations"), 0u);
  // At dp 1 under transformers 4 (torch before 2.8: adamw_torch, foreach) the Trainer's AdamW copies
  // the decay group's exp_avg_sq whole (4 x 8,029,995,008 = 32,119,980,032), more than the bucket's
  // bf16 copy; under transformers 5 (torch 2.8 or later: adamw_torch_fused) the bucket's copy is the
  // step's temporary.
  const auto dp1 = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--zero", "0", "--seq-len",
                                     "512", "--deepspeed-version", "0.16.4", "--format", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto out = run_cli(args);
    EXPECT_EQ(out.code, 0) << out.err;
    return stage_bytes(nlohmann::json::parse(out.out), "optimizer");
  };
  EXPECT_EQ(dp1({"--transformers-version", "4"}), 12ULL * 8'030'261'248ULL + 32'119'980'032ULL);
  EXPECT_EQ(dp1({}), 12ULL * 8'030'261'248ULL + 16'059'990'016ULL);
}

// --deepspeed-version is read under the hf profile with DeepSpeed only, and from 0.15.0.
TEST(DeepSpeed, ReleaseFlagIsRefusedWhereItMeansNothing) {
  const auto refused = [](std::vector<std::string> args) {
    std::vector<std::string> all = {"analyze", "--model", kLlama};
    all.insert(all.end(), args.begin(), args.end());
    const auto r = run_cli(all);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.err.find("--deepspeed-version"), std::string::npos) << r.err;
  };
  refused({"--profile", "megatron", "--deepspeed-version", "0.16.4"});
  refused({"--profile", "torchtitan", "--deepspeed-version", "0.16.4"});
  refused({"--profile", "hf", "--ddp", "--deepspeed-version", "0.16.4"});
  refused({"--profile", "hf", "--zero", "0", "--deepspeed-version", "0.14.9"});
  refused({"--profile", "hf", "--zero", "0", "--deepspeed-version", "0.16"});
  refused({"--profile", "hf", "--zero", "0", "--deepspeed-version", "0.16.4.1"});
  refused({"--profile", "hf", "--zero", "0", "--deepspeed-version", "v0.16.4"});
  // No leading zeros, parts up to 99, a local suffix of letters, digits and dots only.
  for (const char* bad : {"00.17.5", "0.17.05", "0.0015.0", "0.100.0", "0.16.4+", "0.16.4+cu-124", "0.17.0rc1"}) {
    refused({"--profile", "hf", "--zero", "0", "--deepspeed-version", bad});
  }
  // A source install's local suffix names the release it is built from.
  EXPECT_EQ(stage_bytes(hf_run({"--zero", "0", "--deepspeed-version", "0.16.4+cu124"}), "total"),
            stage_bytes(hf_run({"--zero", "0", "--deepspeed-version", "0.16.4"}), "total"));
  // Under ZeRO the release changes nothing modelled, and the assumptions say so.
  const auto zero2 = hf_run({"--zero", "2", "--deepspeed-version", "0.16.4"});
  bool said = false;
  for (const auto& line : zero2.at("assumptions")) {
    said = said || line.get<std::string>().rfind("DeepSpeed 0.16.4: modelled as the current release", 0) == 0;
  }
  EXPECT_TRUE(said) << zero2.at("assumptions").dump();
}

TEST(DeepSpeed, CliErrorsExit2) {
  const auto other = run_cli({"analyze", "--model", kLlama, "--deepspeed", kDir + "zero3.json"});
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.err.find("--deepspeed"), std::string::npos) << other.err;
  const auto zero = run_cli({"analyze", "--model", kLlama, "--profile", "hf", "--zero", "1", "--deepspeed", kDir + "zero3.json"});
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.err.find("--zero"), std::string::npos) << zero.err;
  const auto missing = run_cli({"analyze", "--model", kLlama, "--profile", "hf", "--deepspeed", kDir + "missing.json"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--deepspeed"), std::string::npos) << missing.err;
  // The config's optimizer is the one DeepSpeed builds: a different --optimizer is refused (it was
  // silently replaced), the same one accepted.
  const auto other_optimizer =
      run_cli({"analyze", "--model", kLlama, "--profile", "hf", "--optimizer", "sgd", "--deepspeed", kDir + "zero2_offload.json"});
  EXPECT_EQ(other_optimizer.code, 2);
  EXPECT_NE(other_optimizer.err.find("--optimizer: 'sgd'"), std::string::npos) << other_optimizer.err;
  EXPECT_NE(other_optimizer.err.find("optimizer.type (adamw)"), std::string::npos) << other_optimizer.err;
  EXPECT_EQ(run_cli({"analyze", "--model", kLlama, "--profile", "hf", "--optimizer", "adamw", "--deepspeed",
                     kDir + "zero2_offload.json"})
                .code,
            0);
  // The config sets the dtypes: a dtype flag beside it is refused (it priced an fp32 module
  // DeepSpeed casts to bf16).
  for (const char* flag : {"--params-dtype", "--main-params-dtype", "--exp-avg-dtype"}) {
    const auto r = run_cli({"analyze", "--model", kLlama, "--profile", "hf", flag, "fp32", "--deepspeed", kDir + "zero3.json"});
    EXPECT_EQ(r.code, 2) << flag;
    EXPECT_NE(r.err.find(std::string(flag) + ": 'fp32'"), std::string::npos) << r.err;
  }
}

// ZeRO-2 offload with gradient accumulation: async_accumulate_grad_in_cpu_via_gpu keeps a pinned
// bf16 host buffer of every whole parameter in the rank's partition (accumulated_grads_in_cpu),
// ceil(P / 8) + the largest parameter (the embedding, 128256 x 4096, for those straddling its
// ends) for Llama-3.1-8B over 8 ranks; one micro-batch per step keeps none.
TEST(DeepSpeed, OffloadWithAccumulationPinsTheAccumulatedGradients) {
  const auto host = [&](const char* global) {
    const auto r = run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "hf", "--dp", "8", "--seq-len", "2048",
                            "--global-batch", global, "--deepspeed", kDir + "zero2_offload.json", "--format", "json"});
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? host_bytes(nlohmann::json::parse(r.out)) : 0;
  };
  constexpr std::uint64_t kParams = 8'030'261'248, kEmbedding = 128256ull * 4096;
  EXPECT_EQ(host("64") - host("8"), 2 * ((kParams + 7) / 8 + kEmbedding));
}

// gradient_accumulation_steps fixes the step with the world size (config.py _batch_assertion:
// train_batch_size = micro x steps x world size): micro 4 x 8 steps x dp 8 = 256, so a
// train_batch_size of 64 is refused, and without one the global batch is 256.
TEST(DeepSpeed, AccumulationStepsFixTheGlobalBatchWithTheWorldSize) {
  const std::string dir = ::testing::TempDir();
  const auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return path;
  };
  const std::string head = R"({"zero_optimization":{"stage":2},"bf16":{"enabled":true},"train_micro_batch_size_per_gpu":4,)";
  const std::string bad = write("ds-gas-bad.json", head + R"("gradient_accumulation_steps":8,"train_batch_size":64})");
  const auto r = run_cli({"analyze", "--model", kLlama, "--profile", "hf", "--dp", "8", "--micro-batch", "4", "--deepspeed", bad});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("gradient_accumulation_steps: '8'"), std::string::npos) << r.err;
  const std::string good = write("ds-gas.json", head + R"("gradient_accumulation_steps":8})");
  const auto ok = run_cli({"analyze", "--model", kLlama, "--profile", "hf", "--dp", "8", "--micro-batch", "4", "--deepspeed", good,
                           "--format", "json"});
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(nlohmann::json::parse(ok.out).at("training").at("global_batch"), 256);
  std::remove(bad.c_str());
  std::remove(good.c_str());
}

// The batch keys: read as positive integers or "auto" (they were ignored, even when invalid); the
// config's micro-batch must be the run's, and train_batch_size is its global batch.
TEST(DeepSpeed, BatchKeysAreTheRunsBatch) {
  const std::string head = R"({"bf16":{"enabled":true},"zero_optimization":{"stage":2},)";
  const auto cfg = moemem::parse_deepspeed_config(
      head + R"("train_micro_batch_size_per_gpu":2,"gradient_accumulation_steps":4,"train_batch_size":64})", "x");
  EXPECT_EQ(cfg.micro_batch, 2);
  EXPECT_EQ(cfg.grad_accum, 4);
  EXPECT_EQ(cfg.train_batch, 64);
  for (const auto& [body, key] : std::vector<std::pair<std::string, std::string>>{
           {R"("train_micro_batch_size_per_gpu":0})", "train_micro_batch_size_per_gpu"},
           {R"("train_batch_size":"lots"})", "train_batch_size"},
           {R"("gradient_accumulation_steps":-3})", "gradient_accumulation_steps"},
           {R"("gradient_accumulation_steps":1.5})", "gradient_accumulation_steps"},
           // DeepSpeed's own assertion: 30 is not 4 x 2 x a world size.
           {R"("train_micro_batch_size_per_gpu":4,"gradient_accumulation_steps":2,"train_batch_size":30})", "train_batch_size"}}) {
    try {
      (void)moemem::parse_deepspeed_config(head + body, "x");
      ADD_FAILURE() << "accepted: " << body;
    } catch (const moemem::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  // Through the CLI: the config's micro-batch 2 against --micro-batch (default 1), then agreeing.
  char path[] = "/tmp/moemem-ds-batch-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = head + R"("train_micro_batch_size_per_gpu":2,"train_batch_size":16})";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const std::vector<std::string> base = {"analyze", "--model", kLlama, "--profile", "hf", "--deepspeed", path, "--seq-len", "16", "--dp", "8"};
  auto args = base;
  const auto differ = run_cli(args);
  EXPECT_EQ(differ.code, 2);
  EXPECT_NE(differ.err.find("--micro-batch: '1'"), std::string::npos) << differ.err;
  EXPECT_NE(differ.err.find("train_micro_batch_size_per_gpu"), std::string::npos) << differ.err;
  args.insert(args.end(), {"--micro-batch", "2", "--format", "json"});
  const auto agree = run_cli(args);
  ASSERT_EQ(agree.code, 0) << agree.err;
  EXPECT_EQ(nlohmann::json::parse(agree.out).at("training").at("global_batch"), 16);
  args = base;
  args.insert(args.end(), {"--micro-batch", "2", "--global-batch", "32"});
  const auto global = run_cli(args);
  EXPECT_EQ(global.code, 2);
  EXPECT_NE(global.err.find("train_batch_size"), std::string::npos) << global.err;
  std::remove(path);
}

}  // namespace

// One bound (9e15 elements) for integers and floats, so that no size wraps or overflows the byte
// arithmetic; the refusal names the key and the bound.
TEST(DeepSpeed, SizesAboveTheBoundAreRefusedByKey) {
  for (const char* size : {"1000000000000000000", "1e18", "9223372036854775807", "18446744073709551615"}) {
    const std::string text = std::string(R"({"bf16":{"enabled":true},"zero_optimization":{"stage":1,"reduce_bucket_size":)") +
                             size + "}}";
    try {
      (void)moemem::parse_deepspeed_config(text, "x");
      ADD_FAILURE() << "accepted: " << size;
    } catch (const moemem::InputError& e) {
      EXPECT_NE(std::string(e.what()).find("zero_optimization.reduce_bucket_size"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("up to 9e15"), std::string::npos) << e.what();
    }
  }
  // At the bound: accepted as given (9e15 elements).
  const auto at = moemem::parse_deepspeed_config(
      R"({"bf16":{"enabled":true},"zero_optimization":{"stage":1,"reduce_bucket_size":9000000000000000}})", "x");
  EXPECT_EQ(at.reduce_bucket_size, 9'000'000'000'000'000);
}

// --optimizer-cpu-offload without a config under hf is DeepSpeed's offload_optimizer: the same
// host column and staging buffers as the config key gives; below ZeRO 1 or with a fraction, refused.
TEST(DeepSpeed, OffloadFlagMatchesTheConfigKey) {
  const auto flag = hf_run({"--zero", "2", "--optimizer-cpu-offload"});
  // The config equivalent of a bare --zero 2 with offload: DeepSpeed's defaults (5e8 bucket,
  // overlap_comm off below stage 3) and offload_optimizer.device cpu.
  const std::string path = ::testing::TempDir() + "moemem_ds_zero2_offload_defaults.json";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(R"({"bf16":{"enabled":true},"zero_optimization":{"stage":2,"offload_optimizer":{"device":"cpu"}}})", f);
    std::fclose(f);
  }
  const auto config = hf_run({"--deepspeed", path});
  EXPECT_EQ(stage_bytes(flag, "host"), stage_bytes(config, "host"));
  EXPECT_EQ(stage_bytes(flag, "buffers"), stage_bytes(config, "buffers"));
  // One 5e8 x 2-byte bucket plus the GPU staging buffer of the largest parameter (16384 x 2).
  EXPECT_EQ(stage_bytes(flag, "buffers"), 1'000'000'000u + 32'768u);
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--zero", "0", "--optimizer-cpu-offload"},
        std::vector<std::string>{"--zero", "2", "--optimizer-cpu-offload", "--optimizer-offload-fraction", "0.5"}}) {
    std::vector<std::string> args = {"analyze", "--model", kLlama, "--profile", "hf", "--seq-len", "16"};
    args.insert(args.end(), bad.begin(), bad.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--optimizer-cpu-offload/--optimizer-offload-fraction"), std::string::npos) << r.err;
  }
}
