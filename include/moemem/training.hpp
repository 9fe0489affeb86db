// The training settings: batch, recomputation, optimizer states and their dtypes, numerics
// (activation dtypes, FP8, attention kernel), MoE routing, overheads and FSDP2's settings, each
// a small part of TrainingConfig, with the checks that tie them to a layout.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "moemem/cuda_graphs.hpp"
#include "moemem/deepspeed_buffers.hpp"
#include "moemem/dtype.hpp"
#include "moemem/errors.hpp"
#include "moemem/finetune.hpp"
#include "moemem/optimizer.hpp"
#include "moemem/parallel.hpp"
#include "moemem/recipes.hpp"
#include "moemem/units.hpp"

namespace moemem {

enum class Recompute : std::uint8_t { none, selective, full };

// Megatron-Core's recompute_modules. Output-discarding (the output is freed and recomputed in
// backward): layernorm, mla_up_proj, moe_act, gdn_norm_out. Checkpointed blocks (only the input is
// kept): core_attn, mlp, moe, shared_experts.
enum RecomputeModule : std::uint16_t {
  kRecomputeCoreAttn = 1 << 0,
  kRecomputeMlaUpProj = 1 << 1,
  kRecomputeLayernorm = 1 << 2,
  kRecomputeMoeAct = 1 << 3,
  kRecomputeMlp = 1 << 4,
  kRecomputeMoe = 1 << 5,
  kRecomputeSharedExperts = 1 << 6,
  kRecomputeGdnNormOut = 1 << 7,  // the Gated DeltaNet's gated output norm (Qwen3-Next, Qwen3.5)
};
// Parses "core_attn,mla_up_proj,..." into a RecomputeModule mask; throws InputError naming `field`.
[[nodiscard]] std::uint16_t parse_recompute_modules(std::string_view text, std::string_view field);
[[nodiscard]] std::string recompute_modules_text(std::uint16_t mask);

// Full recomputation: uniform checkpoints groups of N layers (keeping one input per group),
// block checkpoints the first N layers of each chunk and keeps the others whole.
// `every`: torchtitan's layer SAC (activation_checkpoint.mode "selective" with selective_ac_option
// N, releases up to 0.2.2): every N-th block of a process, counted across its model parts, is
// checkpointed whole; the others keep everything. Set by --selective-ac-option, never by
// --recompute-method (Megatron has no such method).
enum class RecomputeMethod : std::uint8_t { uniform, block, every };

// Attention kernel: eager keeps the score and softmax matrices, flash only output and log-sum-exp.
// sdpa: PyTorch scaled_dot_product_attention as Hugging Face calls it (the hf profile only).
enum class AttentionKernel : std::uint8_t { eager, flash, sdpa };

// FP8 training recipes (Transformer Engine's names): per-tensor scaling (current or delayed),
// DeepSeek-V3's blockwise scaling (1x128 activation tiles, 128x128 weight blocks, fp32 scales),
// and MXFP8 (1x32 blocks, one e8m0 byte each).
enum class Fp8Recipe : std::uint8_t { none, tensorwise, delayed, blockwise, mxfp8 };
[[nodiscard]] std::string_view name_of(Fp8Recipe f);
[[nodiscard]] Fp8Recipe parse_fp8_recipe(std::string_view text);
// Scale-tensor elements for `n` FP8 values, and their dtype.
[[nodiscard]] Count fp8_scale_elements(Count n, Fp8Recipe f);
[[nodiscard]] DType fp8_scale_dtype(Fp8Recipe f);

// How the loss keeps the logits (torchtitan): `upcast` is cross_entropy(logits.float()) in eager
// mode (fp32 copies of the logits), `fused` the same under torch.compile (bf16 logits and bf16
// gradient, the fp32 math fused away), `chunked` the logits upcast and reduced chunk by chunk.
enum class LossImpl : std::uint8_t { upcast, fused, chunked };
[[nodiscard]] std::string_view name_of(LossImpl l);
[[nodiscard]] LossImpl parse_loss_impl(std::string_view text);

// The Megatron-Core release a run used, where it changes what MoE layers keep (issue 12 defect 8):
// up to 0.12 the routing probabilities are applied in unpermute, which saves the unweighted
// expert output (moe_utils.py unpermute); 0.6's GroupedMLP also runs an unfused SwiGLU that keeps
// silu's output (experts.py glu). From 0.13 (commit 2659630721) the probabilities are applied
// inside the fused activation (WeightedSwiGLUFunction).
enum class MegatronVersion : std::uint8_t { v0_6, v0_12, current };
[[nodiscard]] std::string_view name_of(MegatronVersion v);
[[nodiscard]] MegatronVersion parse_megatron_version(std::string_view text);

// The torchtitan release a run used, where it changes what a pipeline keeps: up to 0.2.0 the
// train step calls the pipeline schedule's step() without return_outputs=False, so the stage
// holding the loss keeps every micro-batch's output (the logits) until the step ends, to merge
// them into step()'s return value (torch.distributed.pipelining stage.py output_chunks). From
// torchtitan e5ef99aab (2025-10-22, first released in 0.2.1) they are freed after each backward.
// torchtitan releases that differ in memory: 0.2.0 and before keep the pipeline's outputs, 0.2.1
// frees them, and from 0.2.2 (ff0829c10) SDPA takes the KV heads unrepeated (enable_gqa).
enum class TorchtitanVersion : std::uint8_t { v0_1_0, v0_2_0, v0_2_1, v0_2_2, current };
[[nodiscard]] std::string_view name_of(TorchtitanVersion v);
[[nodiscard]] TorchtitanVersion parse_torchtitan_version(std::string_view text);

// transformers releases that differ in what an MoE layer saves (hf profile). 4.x: the loop over
// hit experts of per-expert nn.Linear modules (4.57 and before), DeepSeek-V3's router in fp32.
// 5.x: 3-D expert parameters run by grouped_mm by default (config experts_implementation; "eager"
// is the loop), routers in the activation dtype, gpt-oss's experts without weight copies.
enum class TransformersVersion : std::uint8_t { v4, v5 };
[[nodiscard]] std::string_view name_of(TransformersVersion v);
[[nodiscard]] TransformersVersion parse_transformers_version(std::string_view text);
// --deepspeed-version: "current" (0.17.6 and later, 0) or a release X.Y.Z from 0.15.0, as
// X*10000 + Y*100 + Z; releases from 0.17.6 read as current.
[[nodiscard]] std::int32_t parse_deepspeed_version(std::string_view text);
// The text of a release code ("current" for 0).
[[nodiscard]] std::string deepspeed_version_name(std::int32_t release);
enum class ExpertsImplementation : std::uint8_t { eager, grouped_mm };
[[nodiscard]] std::string_view name_of(ExpertsImplementation e);
[[nodiscard]] ExpertsImplementation parse_experts_implementation(std::string_view text);

// FSDP2's reshard_after_forward policy as torchtitan sets it: `standard` (its "default": every
// block resharded after forward but the last, none with pipeline parallelism), always, never.
enum class ReshardPolicy : std::uint8_t { standard, always, never };
[[nodiscard]] std::string_view name_of(ReshardPolicy r);
[[nodiscard]] ReshardPolicy parse_reshard_policy(std::string_view text);

// Which point of a profile's buffer/fragmentation range enters the totals.
enum class OverheadPoint : std::uint8_t { none, low, high };

// Largest accepted micro-batch and sequence length.
inline constexpr std::int64_t kMaxMicroBatch = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxSeqLen = std::int64_t{1} << 24;

// The training settings, in parts. Each part compares with <=> so that memo keys are built from
// whole parts (a field added to a part is part of every key that uses it).

// What one step processes.
struct Batch {
  std::int64_t micro_batch = 1;
  std::int64_t seq_len = 4096;
  std::optional<std::int64_t> global_batch;  // sequences per step; nullopt: enough to fill the pipeline
  auto operator<=>(const Batch&) const = default;
};

// Activation recomputation.
struct RecomputePolicy {
  Recompute recompute = Recompute::none;
  std::uint16_t recompute_modules = kRecomputeCoreAttn;  // selective: Megatron's default
  RecomputeMethod recompute_method = RecomputeMethod::uniform;
  std::int64_t recompute_num_layers = 1;
  bool recompute_defaulted = false;  // the torchtitan profile's release default, not given
  // Megatron's --cpu-offloading-num-layers: Transformer Engine's CPU offload moves the saved
  // activations of the first N decoder layers to the host (transformer_engine/pytorch/cpu_offload.py).
  std::int64_t cpu_offload_layers = 0;
  auto operator<=>(const RecomputePolicy&) const = default;
};

// Weights, gradients and optimizer states: their dtypes and the ZeRO stage that shards them.
struct StateSettings;
// Sets the ZeRO stage, and with it the gradients' dtype where they follow it.
void apply_zero_stage(StateSettings& s, int zero);

struct StateSettings {
  int zero = 0;  // ZeRO stage 0..3
  PrecisionRecipe precision;
  bool ema_on_host = false;  // DeepSeek-V3 §3.2.3: an fp32 EMA of the parameters in CPU memory
  bool ema_on_device = false;  // the same EMA kept on the GPU (the recipe with ema-on-cpu left out)
  // Megatron's --optimizer-cpu-offload with --optimizer-offload-fraction: this fraction of each
  // rank's optimizer shard (master weights, moments) and a pinned copy of its gradients live in
  // host memory (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py). 0: none.
  double optimizer_offload = 0;
  // hf profile under DeepSpeed ZeRO 1-3 (--deepspeed, or --zero with DeepSpeed's defaults): the
  // settings that size ZeRO's own buffers (src/profiles/hf_deepspeed.cpp); nullopt: none.
  std::optional<DeepSpeedBuffers> deepspeed;
  // hf profile, DeepSpeed's defaults (no ds_config, no --main-grads-dtype): gradients accumulate in
  // the weights' dtype under ZeRO 1-3 and in fp32 at ZeRO 0 (engine.py get_data_types), so they
  // follow the ZeRO stage where search varies it (apply_zero_stage).
  bool gradients_follow_zero = false;
  auto operator<=>(const StateSettings&) const = default;
};

// How activations are computed and kept: dtypes, FP8, attention kernel, vocabulary padding.
struct Numerics {
  DType activation_dtype = DType::bf16;
  std::optional<AttentionKernel> attention;  // nullopt: the profile's default
  DType logits_dtype = DType::fp32;          // dtype in which the loss keeps the logits
  std::optional<std::int64_t> vocab_multiple;  // pad the vocabulary to a multiple of this x tp
  Fp8Recipe fp8 = Fp8Recipe::none;
  bool fp8_swiglu_input = false;  // DeepSeek-V3: the SwiGLU input of the experts cached in FP8 too
  bool fp8_online_weights = false;  // DeepSeek-V3: weights quantized online per GEMM, no resident FP8 copies
  bool fp8_dispatch = false;        // DeepSeek-V3: tokens quantized to FP8 before the dispatch all-to-all
  bool mla_up_frees_v = false;      // DeepSeek-V3's own kernels: recomputing MLA's up-projections frees v too
  bool attn_out_e5m6 = false;       // DeepSeek-V3 §3.3.3: the attention output cached once, in E5M6
  // DeepSeek-V3 §3.2.2: each token is sent over the network to at most this many nodes, once per
  // node, and forwarded over NVLink there (0: no node limit, one copy per routed expert).
  std::int64_t dispatch_node_limit = 0;
  // Dropout probabilities (Megatron's --hidden-dropout, --attention-dropout): a mask is kept for
  // backward wherever one is drawn.
  double hidden_dropout = 0, attention_dropout = 0;
  // Megatron's --no-rope-fusion (apply_rope_fusion False): RoPE runs unfused and keeps its cos and
  // sin tensors for backward (megatron profile).
  bool rope_fusion = true;
  // Megatron's create_attention_mask_in_dataloader (on unless --no-create-attention-mask-in-dataloader):
  // the ranks that receive the batch hold a [b, 1, s, s] boolean mask while a micro-batch runs
  // forward (megatron profile).
  bool dataloader_attention_mask = true;
  MegatronVersion megatron_version = MegatronVersion::current;  // the megatron profile's release
  TorchtitanVersion torchtitan_version = TorchtitanVersion::current;  // the torchtitan profile's release
  TransformersVersion transformers_version = TransformersVersion::v5;  // the hf profile's release
  // The hf profile's DeepSpeed release (parse_deepspeed_version): 0, current (0.17.6 and later).
  std::int32_t deepspeed_release = 0;
  // transformers' experts_implementation (hf profile); unset: the release's default (grouped_mm
  // on 5.x, the loop on 4.x).
  std::optional<ExpertsImplementation> experts_implementation;
  std::optional<Recipe> recipe;          // the published recipe the settings come from
  std::uint16_t recipe_techniques = 0;   // its techniques in effect (RecipeTechnique bits)
  CudaGraphs cuda_graphs;  // Megatron's --cuda-graph-impl and --cuda-graph-scope (megatron profile)
  auto operator<=>(const Numerics&) const = default;
};

// Routed-expert token routing and dispatch.
struct MoeRouting {
  double moe_imbalance = 1.0;     // the hottest expert rank receives this many times the average tokens
  std::optional<double> moe_capacity_factor;  // tokens beyond capacity x average are dropped
  bool deepep = false;            // DeepEP dispatcher (its communication buffer is resident)
  bool allgather = false;         // Megatron's allgather dispatcher (--moe-token-dispatcher-type allgather)
  bool shared_expert_overlap = false;  // Megatron's --moe-shared-expert-overlap
  // Megatron's --overlap-moe-expert-parallel-comm: each steady 1F1B step runs one micro-batch's
  // forward and another's backward layer by layer, so one layer of the next micro-batch's
  // forward is held beside the backward (megatron/core/pipeline_parallel/combined_1f1b.py).
  bool ep_overlap = false;
  // Megatron's --delay-wgrad-compute (with ep_overlap): the experts' weight gradients run after the
  // next micro-batch's dispatch is launched; their GEMM inputs and output gradients are held until then.
  bool delay_wgrad = false;
  auto operator<=>(const MoeRouting&) const = default;
};

// Memory beyond tensors: buffers, the allocator's cache, the runtime outside the allocator.
struct Overheads {
  OverheadPoint overhead = OverheadPoint::low;
  std::optional<double> fragmentation_pct;    // reserved - allocated, % of allocated (profile default)
  std::optional<Bytes> cuda_context;           // overrides the profile's CUDA context size
  std::optional<Bytes> nccl_per_group;         // overrides the profile's per-process-group NCCL size
  bool tp_comm_overlap = false;  // Megatron's --tp-comm-overlap: Transformer Engine's userbuffers (src/analyze/userbuffers.cpp)
  // Megatron's gradient-accumulation fusion (on unless --no-gradient-accumulation-fusion): weight
  // gradients added into main_grad by the GEMM, with Transformer Engine's cached placeholders.
  bool gradient_accumulation_fusion = true;
  auto operator<=>(const Overheads&) const = default;
};

// torchtitan (FSDP2) settings.
struct FsdpSettings {
  bool compile = false;                 // torch.compile of each block (and of the loss where torchtitan does)
  std::optional<LossImpl> loss;         // nullopt: fused with --compile, upcast without
  ReshardPolicy reshard = ReshardPolicy::standard;
  bool fsdp_float8_all_gather = false;  // FSDP all-gathers FP8 linear weights (1 byte per parameter)
  std::int64_t dp_replicate = 1;        // HSDP: replicas; parameters shard over dp / dp_replicate x cp
  bool accelerate_fsdp2 = false;        // hf profile: PyTorch FSDP2 through accelerate instead of DeepSpeed
  bool accelerate_fsdp1 = false;        // hf profile: PyTorch FSDP1 (FullyShardedDataParallel) through accelerate
  bool fsdp_offload_params = false;     // with either: CPU offload (shards, gradients, optimizer states on the host)
  bool hf_ddp = false;                  // hf profile: the Trainer without DeepSpeed or FSDP (PyTorch DDP; one process at dp 1)
  auto operator<=>(const FsdpSettings&) const = default;
  // The hf profile shards with PyTorch FSDP (1 or 2) through accelerate rather than DeepSpeed.
  [[nodiscard]] bool accelerate_fsdp() const { return accelerate_fsdp1 || accelerate_fsdp2; }
};

// Every training setting: the parts above (their fields are reached directly, t.micro_batch).
struct TrainingConfig : Batch, RecomputePolicy, StateSettings, Numerics, MoeRouting, Overheads, FsdpSettings,
                        FinetuneSettings {
  [[nodiscard]] const Batch& batch() const { return *this; }
  [[nodiscard]] const RecomputePolicy& recomputation() const { return *this; }
  [[nodiscard]] const StateSettings& states() const { return *this; }
  [[nodiscard]] const Numerics& numerics() const { return *this; }
  [[nodiscard]] const MoeRouting& routing() const { return *this; }
  [[nodiscard]] const Overheads& overheads() const { return *this; }
  [[nodiscard]] const FsdpSettings& fsdp() const { return *this; }
  [[nodiscard]] const FinetuneSettings& finetuning() const { return *this; }
};

// The loss implementation in effect: --loss, else fused with --compile and upcast without.
[[nodiscard]] inline LossImpl effective_loss(const TrainingConfig& t) {
  return t.loss.value_or(t.compile ? LossImpl::fused : LossImpl::upcast);
}

// Micro-batches per step and pipeline: global_batch / (micro_batch * dp), or nullopt.
[[nodiscard]] std::optional<std::int64_t> microbatches_per_step(const TrainingConfig& t, const Layout& layout);

// Checks batch, sequence and ZeRO settings against the layout (e.g. the sequence must split
// evenly over cp, and over tp when sequence parallelism is on). Throws InputError.
void validate_training(const TrainingConfig& t, const Layout& layout);
// The same rules, returned instead of thrown: the first one `t` breaks, or nothing.
[[nodiscard]] std::optional<InputError> check_training(const TrainingConfig& t, const Layout& layout);

[[nodiscard]] std::string_view name_of(Recompute r);
[[nodiscard]] std::string_view name_of(AttentionKernel a);
[[nodiscard]] std::string_view name_of(OverheadPoint p);

}  // namespace moemem
