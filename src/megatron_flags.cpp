// What moemem does with each Megatron flag it does not read as a setting: flags that change
// memory in a way moemem does not model (refused by name), and flags that Megatron's source shows
// do not change a GPU's memory (ignored, and listed as ignored). Any other flag is "not
// recognised" and listed as such.
#include <array>
#include <string_view>

#include <fmt/format.h>

#include "megatron_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem::detail {

namespace {

struct Unmodelled {
  std::string_view flag;
  std::string_view what;
};

constexpr std::string_view kHybrid =
    "a hybrid layer pattern (Mamba-2 / linear-attention layers; moemem models Nemotron-H, Qwen3-Next and Qwen3.5 "
    "from their config.json: --model with the layout inline)";

// Flags that change memory where moemem has no mechanism for it yet.
constexpr std::array kUnmodelled = {
    Unmodelled{"--fp4-format", "FP4 training"},
    Unmodelled{"--cpu-offloading", "activation offloading to CPU"},
    Unmodelled{"--use-torch-fsdp2", "FSDP2 sharding (a torchtitan-style profile)"},
    Unmodelled{"--use-megatron-fsdp", "Megatron FSDP sharding"},
    Unmodelled{"--use-custom-fsdp", "Megatron FSDP sharding"},
    // FP8 weights held as the model's parameters instead of BF16 ones (fp8_model_init).
    Unmodelled{"--fp8-param-gather", "FP8 parameters in place of the BF16 weights"},
    Unmodelled{"--reuse-grad-buf-for-mxfp8-param-ag", "MXFP8 parameter all-gather into the gradient buffer"},
    // A YAML of Transformer Engine userbuffer methods per GEMM (initialize_ub's ub_cfgs): it can
    // move a GEMM to ring_exchange reduce-scatter ((2 tp - 1) / tp of a buffer) or FP8 buffers.
    // --tp-comm-overlap alone is modelled with TE's defaults (src/analyze/userbuffers.cpp).
    Unmodelled{"--tp-comm-overlap-cfg", "userbuffer methods from a YAML file (moemem models Transformer Engine's defaults)"},
    // backward graphs captured with retain_graph: their saved tensors are never freed into the pool.
    Unmodelled{"--cuda-graph-retain-backward-graph", "CUDA graphs that keep their saved tensors after backward"},
    // Every expert's input padded to its capacity (dropping MoE), not the routed tokens.
    Unmodelled{"--moe-pad-expert-input-to-capacity", "expert inputs padded to capacity"},
    // A hybrid stack (Mamba-2 or Gated DeltaNet mixers, MLP-only or MoE-only blocks) from a layer
    // pattern (arguments.py: the pattern derives --num-layers), or a layer spec of another module:
    // costed as GPT layers they were about twice the memory. moemem models Nemotron-H and
    // Qwen3-Next/Qwen3.5 from their config.json (--model) with the layout given inline.
    Unmodelled{"--hybrid-override-pattern", kHybrid},
    Unmodelled{"--hybrid-layer-pattern", kHybrid},
    Unmodelled{"--is-hybrid-model", kHybrid},
    Unmodelled{"--hybrid-attention-ratio", kHybrid},
    Unmodelled{"--hybrid-mlp-ratio", kHybrid},
    Unmodelled{"--spec", "a custom layer spec (its modules are not GPT's; give the model's config.json with --model)"},
    // TransformerConfig.attention_output_gate: linear_qkv also emits a per-head gate.
    Unmodelled{"--attention-output-gate", "the attention output gate in a launch script (give the model's config.json with --model)"},
};

// Prefixes and names of flags that do not change a GPU's memory: learning rate and its
// schedule, initialisation, data and tokenizer paths, iteration counts, logging, profiling,
// checkpoint I/O, router loss coefficients and score functions, fusions of elementwise
// kernels that keep the same tensors, rotary scaling constants, process-group timeouts.
constexpr std::array<std::string_view, 44> kIgnoredPrefixes = {
    "--lr", "--min-lr", "--weight-decay", "--start-weight-decay", "--end-weight-decay", "--clip-grad", "--adam-",
    "--init-method", "--seed", "--train-iters", "--train-samples", "--eval-", "--exit-", "--save", "--load",
    "--no-load-", "--no-save-", "--ckpt-", "--dist-ckpt-", "--auto-detect-ckpt-format", "--finetune",
    "--pretrained-checkpoint", "--data-", "--train-data-path", "--valid-data-path", "--test-data-path", "--split",
    "--num-workers", "--tokenizer-", "--vocab-file", "--merge-file", "--log-", "--tensorboard-", "--wandb-",
    "--logging-level", "--timing-log-", "--profile", "--rotary-", "--mscale", "--norm-epsilon", "--distributed-",
    "--manual-gc", "--mtp-loss-scaling-factor", "--moe-aux-loss-coeff"};

constexpr std::array<std::string_view, 38> kIgnoredNames = {
    // torchrun's and srun's own flags (the launcher, not the model)
    "--node_rank", "--node-rank", "--master_addr", "--master-addr", "--master_port", "--master-port", "--mpi",
    "--rdzv-endpoint",
    "--moe-router-score-function", "--moe-router-topk-scaling-factor", "--moe-router-load-balancing-type",
    "--moe-z-loss-coeff", "--moe-router-bias-update-rate", "--moe-router-group-topk", "--moe-router-num-groups",
    "--moe-router-pre-softmax", "--moe-permute-fusion", "--moe-router-fusion", "--use-pytorch-profiler",
    "--use-mcore-models", "--no-check-for-nan-in-loss-and-grad", "--enable-experimental", "--overlap-grad-reduce",
    "--overlap-param-gather", "--no-mmap-bin-files", "--dataloader-type", "--no-masked-softmax-fusion",
    "--no-bias-swiglu-fusion", "--no-bias-dropout-fusion", "--use-rope-scaling",
    "--te-rng-tracker", "--patch-tokenizer-type", "--dataset", "--train-mode", "--rerun-mode",
    // eager steps before capture (TransformerConfig.cuda_graph_warmup_steps): when, not what, is kept
    "--cuda-graph-warmup-steps",
    // the router's GEMM in fp32 saves its bf16 input and weight as before (moe_utils.py
    // RouterGatingLinearFunction at d98e8a64); its fp32 scores are what moemem counts anyway
    "--moe-router-dtype",
    // balanced routing, which moemem assumes unless --moe-imbalance says otherwise
    "--moe-router-force-load-balancing"};

}  // namespace

bool replaces_layers(std::string_view flag) {
  for (const auto& u : kUnmodelled) {
    if (u.flag == flag) return u.what == kHybrid || u.flag == "--spec";
  }
  return false;
}

std::optional<std::string> unmodelled(std::string_view flag, std::string_view value) {
  if (flag == "--cuda-graph-impl" && value == "full_iteration") {
    return "a whole-iteration CUDA graph (megatron/core/full_cuda_graph.py: every activation of the step in its pool)";
  }
  if (flag == "--optimizer" && value != "adam" && value != "adamw") {
    return fmt::format("the {} optimizer (moemem models Adam's two moments)", value);
  }
  for (const auto& u : kUnmodelled) {
    if (u.flag == flag) return std::string(u.what);
  }
  return std::nullopt;
}

void read_cuda_graphs(const ScriptFlags& f, MegatronSettings& s) {
  const auto enable = f.switches.find("--enable-cuda-graph");
  const auto external = f.switches.find("--external-cuda-graph");
  const RawFlag* impl = f.find("--cuda-graph-impl");
  // megatron/training/arguments.py validate_args: the deprecated switches set the implementation
  // (local, transformer_engine), alone and without --cuda-graph-impl.
  if (enable != f.switches.end() && external != f.switches.end()) {
    throw InputError(f.field("--external-cuda-graph"), "with --enable-cuda-graph", "one of them (Megatron refuses both)");
  }
  const auto deprecated = enable != f.switches.end() ? enable : external;
  if (deprecated != f.switches.end()) {
    if (impl != nullptr && impl->value != "none") {
      throw InputError(f.field(deprecated->first), "with --cuda-graph-impl", "one of them (Megatron refuses both)");
    }
    s.cuda_graph_impl = FromScript<CudaGraphImpl>{
        enable != f.switches.end() ? CudaGraphImpl::local : CudaGraphImpl::transformer_engine, deprecated->second};
  } else if (impl != nullptr) {
    s.cuda_graph_impl = FromScript<CudaGraphImpl>{parse_cuda_graph_impl(impl->value, f.field("--cuda-graph-impl")), impl->from};
  }
  if (f.cuda_graph_modules_from.empty()) return;
  if (f.cuda_graph_modules_from.size() > 1) {
    throw InputError(f.field("--cuda-graph-scope"), "with --cuda-graph-modules", "one of them (Megatron refuses both)");
  }
  const auto& [flag, from] = *f.cuda_graph_modules_from.begin();
  if (!s.cuda_graph_impl || s.cuda_graph_impl->value == CudaGraphImpl::none) {
    s.notes.push_back(fmt::format("{} not read: no CUDA graphs without --cuda-graph-impl (Megatron ignores it too)", from.text));
    return;
  }
  std::string joined;
  for (const auto& name : f.cuda_graph_modules) joined += (joined.empty() ? "" : ",") + name;
  s.cuda_graph_scope = FromScript<std::uint8_t>{parse_cuda_graph_scope(joined, f.field(flag)), from};
}

bool ignored_flag(std::string_view flag) {
  for (const auto p : kIgnoredNames) {
    if (flag == p) return true;
  }
  for (const auto p : kIgnoredPrefixes) {
    if (flag.substr(0, p.size()) == p) return true;
  }
  return false;
}

}  // namespace moemem::detail
