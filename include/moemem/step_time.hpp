// Step time of a training layout: compute (GEMM and attention FLOPs at an achievable fraction of
// the GPU's peak, memory-bound work by bytes moved), communication per layer with an alpha-beta
// cost (TP/SP, EP all-to-all, CP ring, PP send/recv, DP/EDP gradient and parameter collectives)
// and the pipeline bubble of the schedule. Cheap enough to run on every layout search evaluates.
// The constants and the published runs they come from: docs/formulas.md, "Step time".
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "moemem/analyze.hpp"
#include "moemem/gpu.hpp"
#include "moemem/training.hpp"

namespace moemem {

// The efficiency constants: a small set shared by every GPU and model (docs/formulas.md lists
// the throughput records of tests/data/validation/throughput.jsonl they were set against).
struct Efficiency {
  double gemm = 0.62;         // dense GEMMs, fraction of the dtype's dense peak
  double expert_gemm = 0.50;  // routed experts' grouped GEMMs (small per-expert GEMMs)
  double fp8_gemm = 0.40;     // FP8 GEMMs against the FP8 peak (quantization and scaling kernels included)
  double attention = 0.42;    // flash attention forward and backward, against the BF16 peak
  double hbm = 0.70;          // memory-bound kernels, fraction of HBM bandwidth
  double link = 0.75;         // collectives' bus bandwidth, fraction of the link's per-direction rate
  double latency_s = 10e-6;   // per collective (alpha)
  double ep_overlap = 0.6;    // share of the EP all-to-all Megatron's 1F1B A2A overlap hides
  double eager_elementwise = 3;  // unfused elementwise kernels: traffic over the fused kernels' (torchtitan eager)
};

// Per-step seconds by cause, as they add up to step_seconds (communication: the exposed part).
struct TimeBreakdown {
  double compute = 0;       // forward and backward GEMMs and attention, memory-bound kernels
  double recompute = 0;     // the recomputed forward
  double tp_comm = 0, ep_comm = 0, cp_comm = 0, pp_comm = 0, dp_comm = 0;
  double bubble = 0;        // pipeline idle time
  double optimizer = 0;     // the optimizer step (memory-bound)
};

struct StepTime {
  double step_seconds = 0;
  double tokens_per_second_per_gpu = 0;
  double mfu = 0;                    // model FLOPs (no recomputation) over the GPU's dense BF16 peak
  double model_flops_per_token = 0;  // forward + backward
  double bubble_fraction = 0;        // idle over busy time of the slowest rank
  std::int64_t slowest_rank = 0;     // pipeline rank whose micro-batch time sets the pace
  TimeBreakdown breakdown;
};

// What the time model needs of a model, derived once from the compiled model's tensors.
struct StepTimeModel {
  const ModelSpec* model = nullptr;
  const CompiledModel* compiled = nullptr;
  // Per token, forward, by layer kind (LayerKind index): FLOPs of the non-expert GEMMs, of the
  // routed experts (top_k of them), of causal attention per unit of sequence length; the
  // recomputable parts; parameters (non-expert, expert) for the gradient collectives.
  struct Kind {
    double gemm = 0, expert = 0, attn_per_seq = 0;
    double core_attn_per_seq = 0, mla_up = 0, mlp = 0, moe = 0, shared = 0;
    double params = 0, expert_params = 0;
    double elementwise_bytes = 0;  // bytes read and written by memory-bound kernels, forward
    double norm_bytes = 0, moe_act_bytes = 0;  // of which the two norms', the routed experts' SwiGLU's
    // DeepSeek sparse attention (V3.2, GLM-5): FLOPs per attended key of the sparse MQA-mode
    // kernel, the lightning indexer's per sequence position, and index_topk (0: dense attention).
    double sparse_per_key = 0, indexer_per_seq = 0, topk = 0;
  };
  std::array<Kind, 2> kinds{};
  Kind mtp;                    // one MTP depth (its projection and its layer)
  double head_flops = 0;       // output head, per token, forward
  double embedding_params = 0, head_params = 0;
  bool eager = false;  // the profile runs unfused elementwise kernels unless compiled (torchtitan)
  // Some layer is of a kind the model does not time: Gated DeltaNet (Qwen3-Next, Qwen3.5: chunked
  // delta-rule kernels), Mamba-2, sliding-window layers of their own shape, Nemotron-NAS blocks.
  // estimate_step_time refuses it.
  bool untimed_layers = false;
};
[[nodiscard]] StepTimeModel make_step_time_model(const CompiledModel& cm);

// Pipeline idle time over the busy time of a rank, for `microbatches` per step (Narayanan et al.
// 2021 for 1F1B/GPipe and interleaved; ZB-H1 a third of 1F1B (Qi et al. 2023); DualPipe
// (pp/2 - 1) and DualPipeV per the DualPipe repository's comparison table).
[[nodiscard]] double bubble_fraction(const ParallelConfig& p, double microbatches);

// The step time of `layout` with `t` on `gpu` (gpus_per_node from the GPU, unless given > 0).
// Needs t.global_batch (the step's sequences); throws InputError naming --global-batch otherwise.
[[nodiscard]] StepTime estimate_step_time(const StepTimeModel& sm, const Layout& layout, const TrainingConfig& t,
                                          const GpuPerf& gpu, const Efficiency& eff = {});

// The published throughput set compiled into the library (tests/data/validation/throughput.jsonl):
// one JSON object per line with the source, the figure it states, the measured tokens/s per GPU
// and a `moemem` object (model, gpu, analyze arguments).
[[nodiscard]] std::string_view public_throughput_set();

}  // namespace moemem
