// The step-time model (src/step_time.cpp): the schedules' bubbles, the GPU table, the model FLOPs
// of a dense model by hand, and the directions every setting must move the estimate in.
#include <gtest/gtest.h>

#include <cmath>

#include "moemem/config.hpp"
#include "moemem/profile.hpp"
#include "moemem/step_time.hpp"

namespace {

using namespace moemem;

ParallelConfig pipeline(std::int64_t pp, Schedule s, std::int64_t vpp = 1) {
  ParallelConfig p;
  p.pp = pp;
  p.schedule = s;
  p.vpp = vpp;
  return p;
}

TEST(StepTime, BubbleOfEachSchedule) {
  // Narayanan et al. 2021: (p-1)/m for 1F1B and GPipe, (p-1)/(v m) interleaved; ZB-H1 a third of
  // 1F1B; DualPipe (p-2)/(3m); DualPipeV (p-1)/(6m).
  EXPECT_DOUBLE_EQ(bubble_fraction(pipeline(4, Schedule::one_f_one_b), 8), 3.0 / 8);
  EXPECT_DOUBLE_EQ(bubble_fraction(pipeline(4, Schedule::gpipe), 8), 3.0 / 8);
  EXPECT_DOUBLE_EQ(bubble_fraction(pipeline(4, Schedule::interleaved, 2), 8), 3.0 / 16);
  EXPECT_DOUBLE_EQ(bubble_fraction(pipeline(4, Schedule::zb_h1), 3), 3.0 / 9);
  EXPECT_DOUBLE_EQ(bubble_fraction(pipeline(8, Schedule::dualpipe), 12), 6.0 / 36);
  EXPECT_DOUBLE_EQ(bubble_fraction(pipeline(4, Schedule::dualpipev), 6), 3.0 / 36);
  EXPECT_DOUBLE_EQ(bubble_fraction(pipeline(1, Schedule::one_f_one_b), 8), 0.0);
}

TEST(StepTime, GpuTableFromDatasheets) {
  const GpuPerf h800 = lookup_gpu_perf("h800-80g");
  EXPECT_DOUBLE_EQ(h800.bf16_flops, 989.4e12);       // H100/H800 SXM5 dense BF16
  EXPECT_DOUBLE_EQ(h800.fp8_flops, 1978.9e12);       // dense FP8
  EXPECT_DOUBLE_EQ(h800.nvlink_bytes_per_s, 200e9);  // 400 GB/s both ways
  EXPECT_DOUBLE_EQ(lookup_gpu_perf("h100-80g").nvlink_bytes_per_s, 450e9);
  EXPECT_DOUBLE_EQ(lookup_gpu_perf("a100-80g").network_bytes_per_s, 25e9);  // 200 Gb/s HDR per GPU
  try {
    (void)lookup_gpu_perf("v100");
    FAIL() << "v100 accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "--gpu");
  }
}

struct Llama8B {
  ModelSpec model = load_model("llama-3.1-8b");
  Inventory inventory = build_inventory(model);
  CompiledModel cm = compile_model(model, inventory, megatron_profile());
  StepTimeModel sm = make_step_time_model(cm);
  TrainingConfig t;
  Llama8B() {
    t.precision = megatron_profile().default_precision;
    t.seq_len = 8192;
    t.micro_batch = 1;
    t.global_batch = 64;
  }
  StepTime at(const ParallelConfig& p, const TrainingConfig& tc, std::int64_t gpus_per_node = 8) const {
    GpuPerf gpu = lookup_gpu_perf("h100-80g");
    gpu.gpus_per_node = gpus_per_node;
    return estimate_step_time(sm, resolve_layout(model, p), tc, gpu);
  }
};

TEST(StepTime, ModelFlopsOfLlama8BByHand) {
  // Llama 3.1 8B (h 4096, 32 layers, 32 heads, 8 KV heads of 128, FFN 14336, vocabulary 128256).
  // GEMM parameters a token passes: per layer q 4096^2 = 16,777,216, k and v 4096 x 1024 =
  // 4,194,304 each, o 16,777,216, MLP 3 x 4096 x 14336 = 176,160,768: 218,103,808; x 32 =
  // 6,979,321,856; head 4096 x 128256 = 525,336,576; sum 7,504,658,432, x 2 = 15,009,316,864.
  // Causal attention at s = 8192: 2 s heads (128 + 128) = 134,217,728 per layer, x 32 =
  // 4,294,967,296. Forward 19,304,284,160; forward + backward x 3 = 57,912,852,480.
  const Llama8B f;
  ParallelConfig p;
  p.dp = 8;
  EXPECT_NEAR(f.at(p, f.t).model_flops_per_token, 57912852480.0, 1.0);
}

// DeepSeek-V3.2 against DeepSeek-V3 (the same model but the indexer), per token, forward, per
// decoder (61 layers and the MTP layer's), as the dense count is taken (2 s n_h (d_qk + d_v)):
// - V3's MLA: 2 x 128 x (192 + 128) x s = 81,920 s; at s 4096: 335,544,320.
// - V3.2's sparse MQA-mode kernel: 2 x 128 x (2 x 512 + 64) = 278,528 per key over 2k - k^2/s =
//   4096 - 1024 = 3,072 key positions (k 2048): 855,638,016; the indexer 2 x 64 x 128 x 4096 =
//   67,108,864; sum 922,746,880.
// - The indexer's GEMMs: wq_b 64 x 128 x 1536 + wk 128 x 7168 + weights_proj 64 x 7168 =
//   13,959,168 parameters, 27,918,336 FLOPs.
// Difference x 62 decoders x 3 (forward and backward): 3 x 62 x 615,120,896 = 114,412,486,656.
// At s 131072 the sparse kernel's span is 4096 - 32 keys: DSA costs less than dense attention.
TEST(StepTime, DeepSeekSparseAttentionFlopsByHand) {
  const auto flops = [](const char* name, std::int64_t seq) {
    const ModelSpec m = load_model(name);
    const Inventory inv = build_inventory(m);
    const CompiledModel cm = compile_model(m, inv, megatron_profile());
    TrainingConfig t;
    t.precision = megatron_profile().default_precision;
    t.seq_len = seq;
    t.micro_batch = 1;
    t.global_batch = 1024;
    ParallelConfig p;
    p.pp = 16;
    p.ep = 64;
    p.dp = 64;
    return estimate_step_time(make_step_time_model(cm), resolve_layout(m, p), t, lookup_gpu_perf("h800-80g"))
        .model_flops_per_token;
  };
  EXPECT_NEAR(flops("deepseek-v3.2", 4096) - flops("deepseek-v3", 4096), 114412486656.0, 4096.0);
  // s 131072: 278,528 x 4,064 + 16,384 x 131072 = 3,279,421,440 against 81,920 x 131072 =
  // 10,737,418,240 per decoder.
  EXPECT_NEAR(flops("deepseek-v3.2", 131072) - flops("deepseek-v3", 131072),
              3.0 * 62 * (3279421440.0 - 10737418240.0 + 27918336.0), 131072.0);
}

TEST(StepTime, EachSettingMovesTheEstimateTheRightWay) {
  const Llama8B f;
  ParallelConfig p;
  p.pp = 4;
  p.dp = 2;
  const double base = f.at(p, f.t).step_seconds;
  TrainingConfig full = f.t;
  full.recompute = Recompute::full;
  EXPECT_GT(f.at(p, full).step_seconds, base);  // the recomputed forward
  TrainingConfig fp8 = f.t;
  fp8.fp8 = Fp8Recipe::tensorwise;
  EXPECT_LT(f.at(p, fp8).step_seconds, base);  // FP8 GEMMs
  ParallelConfig inter = p;
  inter.vpp = 2;
  inter.schedule = Schedule::interleaved;
  EXPECT_LT(f.at(inter, f.t).breakdown.bubble, f.at(p, f.t).breakdown.bubble);  // half the bubble
  TrainingConfig more = f.t;
  more.global_batch = 256;  // more micro-batches: the bubble is a smaller share
  EXPECT_LT(f.at(p, more).bubble_fraction, f.at(p, f.t).bubble_fraction);
  // TP8 across nodes of 4 GPUs pays the network (50 GB/s) for what NVLink (450 GB/s) carried.
  ParallelConfig tp8;
  tp8.tp = 8;
  tp8.sp = true;
  tp8.dp = 2;
  EXPECT_GT(f.at(tp8, f.t, 4).breakdown.tp_comm, 5 * f.at(tp8, f.t, 8).breakdown.tp_comm);
}

// Mixtral 8x7B (32 MoE layers, h 4096, top-2, no shared experts) on TP2 x DP4, one micro-batch
// of 4096 tokens, 16 per step. Under ETP 2 Megatron's alltoall dispatcher all-gathers the token
// copies the two ranks received (token_dispatcher.py, over the expert TP group) and the combine
// reduce-scatters them, mirrored in backward: 4 collectives per layer, each moving half of
// etp x T_sp x k x h x 2 bytes = 2 x 2048 x 2 x 4096 x 2 = 67,108,864, i.e. 33,554,432 bytes at
// 450 GB/s x 0.75 (99.4 µs) plus one 10 µs step: 4 x 109.4 µs x 32 layers x 16 = 0.2241 s more
// than under ETP 1. DeepEP sends each copy to both ranks in its exchange instead: no gather.
TEST(StepTime, ExpertTensorParallelGathersTheRoutedCopies) {
  const ModelSpec m = load_model("mixtral-8x7b");
  const Inventory inv = build_inventory(m);
  const CompiledModel cm = compile_model(m, inv, megatron_profile());
  const StepTimeModel sm = make_step_time_model(cm);
  TrainingConfig t;
  t.precision = megatron_profile().default_precision;
  t.seq_len = 4096;
  t.micro_batch = 1;
  t.global_batch = 64;
  const auto at = [&](std::int64_t etp, bool deepep) {
    ParallelConfig p;
    p.tp = 2;
    p.sp = true;
    p.dp = 4;
    p.etp = etp;
    TrainingConfig tc = t;
    tc.deepep = deepep;
    return estimate_step_time(sm, resolve_layout(m, p), tc, lookup_gpu_perf("h100-80g")).breakdown;
  };
  const double per = 4 * (10e-6 + 33554432.0 / (450e9 * 0.75));
  EXPECT_NEAR(at(2, false).tp_comm - at(1, false).tp_comm, 32 * 16 * per, 1e-9);
  EXPECT_DOUBLE_EQ(at(2, true).tp_comm, at(1, true).tp_comm);
  EXPECT_GT(at(2, true).ep_comm, 0.0);  // the copies cross the tp x ep group instead
  EXPECT_EQ(at(1, true).ep_comm, 0.0);  // one rank per expert group: nothing to send
}

// DeepSeek-V3 on EP64 over 8 nodes of 8 GPUs (TP1, one pipeline stage, one micro-batch of 4096
// tokens per step), DeepEP: a token goes once to each node its 8 experts reach. Unlimited, of 8
// nodes 7 (1 - (7/8)^8) = 4.5936 remote ones are expected; the config's group-limited routing (4
// of 8 groups of 32 experts, each group on one node's 8 GPUs) caps that at 4 x 7/8 = 3.5. Each
// copy is 4096 x 7168 x (2 + 2) bytes = 117,440,512 (BF16 dispatch and combine) on the 50 GB/s
// NIC at 0.75, twice (forward, backward), over 58 MoE layers and the MTP layer's.
TEST(StepTime, GroupLimitedRoutingCapsTheNodesATokenReaches) {
  ModelSpec m = load_model("deepseek-v3");
  TrainingConfig t;
  t.precision = megatron_profile().default_precision;
  t.seq_len = 4096;
  t.micro_batch = 1;
  t.global_batch = 64;
  t.deepep = true;
  ParallelConfig p;
  p.ep = 64;
  p.dp = 64;
  const auto ep_comm = [&](const ModelSpec& spec) {
    const Inventory inv = build_inventory(spec);
    const CompiledModel cm = compile_model(spec, inv, megatron_profile());
    return estimate_step_time(make_step_time_model(cm), resolve_layout(spec, p), t, lookup_gpu_perf("h100-80g")).breakdown.ep_comm;
  };
  const double limited = ep_comm(m);
  m.moe.n_group = 0;
  const double free = ep_comm(m);
  const double unlimited = 7 * (1 - std::pow(7.0 / 8, 8));
  EXPECT_NEAR(free - limited, 59 * 2 * (unlimited - 3.5) * 117440512.0 / (50e9 * 0.75), 1e-9);
}

TEST(StepTime, NeedsTheGlobalBatch) {
  const Llama8B f;
  TrainingConfig t = f.t;
  t.global_batch.reset();
  try {
    (void)f.at(ParallelConfig{}, t);
    FAIL() << "no global batch accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "--global-batch");
  }
}

}  // namespace
