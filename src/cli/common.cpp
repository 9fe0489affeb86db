#include "cli/common.hpp"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "moemem/accelerate.hpp"
#include "moemem/deepspeed.hpp"
#include "moemem/errors.hpp"
#include "moemem/gpu.hpp"

namespace moemem::cli {

std::int64_t parse_int(const std::string& text, const char* field) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ptr != end || ec == std::errc::invalid_argument) {
    throw InputError(field, text, "an integer");
  }
  if (ec == std::errc::result_out_of_range) throw InputError(field, text, "an integer that fits in 64 bits");
  return v;
}

void add_int(CLI::App& app, const char* flag, std::int64_t& target, const char* help) {
  app.add_option_function<std::string>(flag, [&target, flag](const std::string& s) { target = parse_int(s, flag); }, help)
      ->default_str(std::to_string(target))
      ->type_name("INT");
}

void add_optional_int(CLI::App& app, const char* flag, std::optional<std::int64_t>& target, const char* help) {
  auto* option =
      app.add_option_function<std::string>(flag, [&target, flag](const std::string& s) { target = parse_int(s, flag); }, help)
          ->type_name("INT");
  if (target) option->default_str(std::to_string(*target));  // a command's preset (paper: --etp 1)
}

void add_model_options(CLI::App& app, ModelOptions& o) {
  app.add_option("--model", o.model, "Preset name (the files in data/models, e.g. deepseek-v3, mixtral-8x7b, llama-3.1-70b) or path to a config.json")
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--mtp", [&o](const std::string& s) { o.mtp = parse_int(s, "--mtp"); },
         "Multi-token-prediction depths to include (default: the config's, 0 in the paper profile)")
      ->type_name("INT");
  app.add_flag("--strict", o.strict,
               "Config keys moemem does not understand (they may change memory) are errors instead of warnings");
}

void add_layout_options(CLI::App& app, LayoutOptions& o) {
  add_int(app, "--tp", o.tp, "Tensor-parallel degree");
  add_int(app, "--pp", o.pp, "Pipeline-parallel degree (stages)");
  add_int(app, "--dp", o.dp, "Data-parallel degree");
  add_int(app, "--cp", o.cp, "Context-parallel degree");
  add_int(app, "--ep", o.ep, "Expert-parallel degree");
  add_optional_int(app, "--etp", o.etp,
                   o.etp ? "Expert-tensor-parallel degree"
                         : "Expert-tensor-parallel degree (default: tp with the megatron profile, as Megatron's "
                           "--expert-tensor-parallel-size; 1 otherwise)");
  add_int(app, "--vpp", o.vpp, "Virtual pipeline stages (model chunks) per rank: interleaved 1F1B");
  app.add_flag("--sp,--sequence-parallel", o.sp, "Sequence parallelism (split non-attention activations over tp)");
  // An empty value would read as the option not given (the even split): refused instead.
  const auto nonempty = [&app](const char* flag, std::string& target, const char* expected, const char* help) {
    app.add_option_function<std::string>(
           flag,
           [&target, flag, expected](const std::string& v) {
             if (v.empty()) throw InputError(flag, "", expected);
             target = v;
           },
           help)
        ->type_name("TEXT");
  };
  nonempty("--layers-per-stage", o.layers_per_stage, "a comma-separated list of layer counts, e.g. 4,4,4,1",
           "Decoder layers of each pipeline chunk in model order, e.g. 4,4,...,1 (default: ceil(L/chunks), "
           "the last the rest)");
  app.add_option("--schedule", o.schedule, "Pipeline schedule: 1f1b|interleaved|dualpipe|dualpipev|gpipe|zb-h1")
      ->capture_default_str();
  nonempty("--pipeline-model-parallel-layout", o.pipeline_layout, "a non-empty layout such as Et|(tt|)*30mL",
           "Megatron layout string, e.g. 'Et|(tt|)*30mL' (E embedding, t layer, m MTP, L loss, | stage)");
  add_optional_int(app, "--decoder-first-pipeline-num-layers", o.first_stage_layers, "Decoder layers on the first stage");
  add_optional_int(app, "--decoder-last-pipeline-num-layers", o.last_stage_layers, "Decoder layers on the last stage");
  app.add_flag("--account-for-embedding-in-pipeline-split", o.account_for_embedding,
               "Count the embedding as one layer when splitting evenly");
  app.add_flag("--account-for-loss-in-pipeline-split", o.account_for_loss,
               "Count the loss (head) as one layer when splitting evenly");
}

// The framework releases and the dropout probabilities (analyze, explain and search).
void add_release_options(CLI::App& app, TrainingOptions& o) {
  app.add_option("--megatron-version", o.numerics.megatron_version,
                 "Megatron-Core release (megatron profile): 0.6 (to 0.7), 0.12 (0.8 to 0.12) or current (0.13+); "
                 "before 0.13 MoE layers keep the unweighted expert output, 0.6 also silu's output")
      ->capture_default_str();
  app.add_option("--torchtitan-version", o.numerics.torchtitan_version,
                 "torchtitan release (torchtitan profile): 0.1.0 (and earlier commits) keeps FSDP's root (embedding, norm, "
                 "output) and the last block unsharded after forward, 0.2.0 on only [norm, output]; 0.1.0 and 0.2.0 keep "
                 "every micro-batch's output on the last pipeline stage until the step ends, 0.2.1, 0.2.2 and current free "
                 "it; from 0.2.2 SDPA takes K and V unrepeated (enable_gqa); current: per-op SAC and ChunkedCELoss by "
                 "default, FSDP at dp_shard 1")
      ->capture_default_str();
  app.add_option("--transformers-version", o.numerics.transformers_version,
                 "transformers release (hf profile): 4 (per-expert modules looped over; DeepSeek-V3's router in fp32) "
                 "or 5 (3-D expert parameters, grouped_mm by default, routers in bf16)")
      ->capture_default_str();
  app.add_option("--deepspeed-version", o.numerics.deepspeed_version,
                 "DeepSpeed release (hf profile under DeepSpeed): current (0.17.6 and later) or X.Y.Z from 0.15.0; "
                 "before 0.17.6 bf16 without ZeRO runs BF16_Optimizer (fp32 gradient buffer, master copies and "
                 "moments partitioned over dp)")
      ->capture_default_str();
  app.add_option("--experts-implementation", o.numerics.experts_implementation,
                 "transformers' experts_implementation (hf profile): eager (the loop over hit experts) or grouped_mm "
                 "(transformers 5's default; not in 4)");
  app.add_option("--hidden-dropout", o.numerics.hidden_dropout,
                 "Dropout after attention and MLP: keeps a one-byte mask each (profile default: megatron 0.1, others 0)");
  app.add_option("--attention-dropout", o.numerics.attention_dropout,
                 "Dropout of the attention probabilities: a mask with --attention eager (profile default: megatron 0.1, others 0)");
}

// torchtitan's FSDP2 and loss settings (analyze, explain and search).
void add_fsdp2_options(CLI::App& app, TrainingOptions& o) {
  app.add_flag("--compile", o.fsdp.compile, "torchtitan: torch.compile of each block (and of the loss: --loss fused)");
  app.add_option("--loss", o.fsdp.loss, "torchtitan: how the loss keeps the logits: upcast|fused|chunked (default: chunked, torchtitan's "
                                    "ChunkedCELoss, with --torchtitan-version current; else fused with --compile, upcast without)");
  app.add_option("--reshard-after-forward", o.fsdp.reshard_after_forward, "torchtitan (and hf --fsdp1/--fsdp2): FSDP reshard policy: default|always|never")
      ->capture_default_str();
  app.add_flag("--fsdp-float8-all-gather", o.fsdp.fsdp_float8_all_gather, "torchtitan: FSDP all-gathers float8 linear weights (needs --fp8)");
  app.add_option("--accelerate-config", o.accelerate_config,
                 "--profile hf: accelerate's config YAML (distributed_type FSDP): --fsdp1 or --fsdp2 by its fsdp_version, "
                 "with its sharding strategy (fsdp_sharding_strategy, fsdp_reshard_after_forward), "
                 "fsdp_activation_checkpointing and fsdp_offload_params; num_processes must equal --dp");
  app.add_flag("--fsdp1", o.fsdp.fsdp1,
               "--profile hf: PyTorch FSDP1 (FullyShardedDataParallel, flat parameters) through accelerate (mixed precision "
               "bf16, FULL_SHARD) instead of DeepSpeed; --reshard-after-forward never is SHARD_GRAD_OP");
  app.add_flag("--ddp", o.fsdp.ddp,
               "--profile hf: the Trainer without DeepSpeed or FSDP (PyTorch DDP over dp, one process at dp 1): bf16 "
               "weights, gradients and AdamW moments on every rank, no master copy, PEFT's adapters in fp32, DDP's "
               "gradient buckets");
  app.add_flag("--fsdp2", o.fsdp.fsdp2,
               "--profile hf: PyTorch FSDP2 through accelerate (fsdp_version 2, mixed precision bf16) instead of DeepSpeed; "
               "--reshard-after-forward never keeps every layer gathered");
  app.add_flag("--fsdp-offload-params", o.fsdp.fsdp_offload_params,
               "--profile hf --fsdp1/--fsdp2: FSDP's CPU offload (accelerate's fsdp_offload_params): parameter shards, "
               "gradient shards and optimizer states in host memory, the optimizer step on the CPU");
}

void add_training_options(CLI::App& app, TrainingOptions& o) {
  app.add_option("--profile", o.profile, "Accounting profile: megatron|paper|torchtitan|hf")->capture_default_str();
  add_int(app, "--micro-batch", o.batch.micro_batch, "Micro-batch size b");
  add_int(app, "--seq-len", o.batch.seq_len, "Sequence length s");
  add_optional_int(app, "--zero", o.states.zero, "ZeRO stage 0-3 (default 0)");
  app.add_option("--recompute,--recompute-granularity", o.recompute.recompute,
                 "Activation recomputation: none|selective|full (default none)");
  app.add_option("--recompute-modules", o.recompute.recompute_modules,
                 "Selective recomputation modules: core_attn,mla_up_proj,layernorm,moe_act,mlp,moe,shared_experts,gdn_norm_out "
                 "(default core_attn)");
  app.add_option("--recompute-method", o.recompute.recompute_method,
                 "Full recomputation: uniform|block (default uniform; only with --recompute full)");
  add_optional_int(app, "--recompute-num-layers", o.recompute.recompute_num_layers,
                   "Full recomputation: layers per checkpointed group (uniform) or per chunk (block) (default 1)");
  app.add_option("--selective-ac-option", o.recompute.selective_ac_option,
                 "torchtitan: activation_checkpoint.selective_ac_option, op (per-op SAC) or N (every N-th block "
                 "checkpointed whole, releases up to 0.2.2); default: the release's (current: op; 0.2.2 and earlier: 2)");
  add_int(app, "--cpu-offloading-num-layers", o.recompute.cpu_offload_layers,
          "Megatron (pp 1, no recomputation): offload the saved activations of the first N decoder layers to the host");
  app.add_option("--overhead", o.overheads.overhead,
                 "Which end of the profile's buffer/fragmentation range enters totals: none|low|high")
      ->capture_default_str();
  app.add_option("--params-dtype", o.states.params_dtype, "Weight dtype (profile default: bf16)");
  app.add_option("--main-grads-dtype", o.states.main_grads_dtype, "Gradient dtype (profile default: fp32)");
  app.add_option("--main-params-dtype", o.states.main_params_dtype, "Master-weight dtype (profile default: fp32)");
  app.add_option("--exp-avg-dtype", o.states.exp_avg_dtype, "Adam first-moment dtype (profile default: paper bf16, megatron fp32)");
  app.add_option("--exp-avg-sq-dtype", o.states.exp_avg_sq_dtype, "Adam second-moment dtype (profile default: paper bf16, megatron fp32)");
  app.add_flag("--optimizer-cpu-offload", o.states.optimizer_cpu_offload,
               "Megatron-Core's optimizer CPU offload: a fraction of each rank's optimizer states (and a pinned copy of "
               "their gradients) in host memory, the 'host' column");
  app.add_option("--optimizer-offload-fraction", o.states.optimizer_offload_fraction,
                 "Fraction of the optimizer states offloaded with --optimizer-cpu-offload (Megatron's default 1.0)");
  app.add_flag("--distributed-optimizer,--use-distributed-optimizer", o.states.distributed_optimizer,
               "Megatron's distributed optimizer: shard master weights and moments (= --zero 1)");
  add_optional_int(app, "--global-batch", o.batch.global_batch, "Sequences per optimizer step (gives the micro-batches per step)");
  app.add_option("--attention", o.numerics.attention, "Attention kernel: flash|eager|sdpa (profile default; sdpa: --profile hf, HF's attn_implementation sdpa)");
  app.add_option("--logits-dtype", o.numerics.logits_dtype, "Dtype in which the loss keeps the logits")->capture_default_str();
  add_optional_int(app, "--make-vocab-size-divisible-by", o.numerics.vocab_multiple,
                   "Pad the vocabulary to a multiple of this x tp (megatron default 128)");
  app.add_option("--fp8", o.numerics.fp8, "FP8 recipe: none|tensorwise|delayed|blockwise|mxfp8");
  app.add_option("--recipe", o.numerics.recipe,
                 "A published training recipe: deepseek-v3 (the V3 report's memory techniques: FP8 blockwise with FP8-cached "
                 "SwiGLU inputs, E5M6 attention output, FP8 node-limited dispatch, bf16 moments, fp32 master and gradients, "
                 "recompute of norms and MLA up-projections, EMA on the CPU, ZeRO-1) or deepseek-v2 (ZeRO-1, recompute of "
                 "norms and MLA up-projections); flags given as well take precedence");
  app.add_option("--recipe-off", o.numerics.recipe_off,
                 "The recipe's techniques to leave out, comma-separated: rmsnorm-recompute, mla-up-recompute, "
                 "fp8-swiglu-input, e5m6-attention-output, fp8-dispatch, node-limited-dispatch, bf16-moments, ema-on-cpu, "
                 "online-fp8-weights, fp8");
  add_release_options(app, o);
  app.add_option("--cuda-graph-impl", o.numerics.cuda_graph_impl,
                 "Megatron's per-layer CUDA graphs: none|local|transformer_engine (static buffers, megatron profile)")
      ->capture_default_str();
  app.add_option("--cuda-graph-scope", o.numerics.cuda_graph_scope,
                 "Parts of each layer graphed: attn,mlp,moe_router,moe_preprocess or full (default: full)");
  app.add_option("--moe-imbalance", o.moe.moe_imbalance, "Tokens the hottest expert rank receives, times the average (>= 1)");
  app.add_flag("--moe-shared-expert-overlap", o.moe.shared_expert_overlap,
               "Shared experts overlapped with the dispatch: they keep the all-gathered full-sequence input (megatron)");
  app.add_flag("--overlap-moe-expert-parallel-comm", o.moe.ep_overlap,
               "EP all-to-all overlap (combined 1F1B): the next micro-batch's forward runs beside each backward (megatron)");
  app.add_flag("--delay-wgrad-compute", o.moe.delay_wgrad,
               "Expert weight gradients delayed past the next dispatch (needs --overlap-moe-expert-parallel-comm; megatron)");
  app.add_flag("--tp-comm-overlap", o.moe.tp_comm_overlap,
               "Transformer Engine's userbuffers for TP communication overlap (needs tp > 1 and --sp; megatron)");
  app.add_flag("--no-rope-fusion", o.moe.no_rope_fusion,
               "Megatron's unfused RoPE: each attention layer keeps its cos and sin for q and k (megatron)");
  app.add_flag("--no-gradient-accumulation-fusion", o.moe.no_grad_accum_fusion,
               "Weight gradients returned to autograd, not added into main_grad by the GEMM: no cached "
               "placeholders (megatron)");
  app.add_flag("--no-create-attention-mask-in-dataloader", o.moe.no_attention_mask,
               "No b x s x s boolean attention mask from the data loader on the ranks that receive the batch "
               "(Megatron creates one by default; megatron)");
  app.add_option("--moe-capacity-factor", o.moe.moe_capacity_factor, "Expert capacity, times the average tokens (excess dropped)");
  app.add_option("--moe-token-dispatcher", o.moe.dispatcher, "alltoall|allgather|deepep (DeepEP keeps a communication buffer; allgather gathers the etp x ep group's tokens)")
      ->capture_default_str();
  app.add_option("--fragmentation-pct", o.overheads.fragmentation_pct,
                 "Allocator cache and fragmentation, % of allocated (profile default)");
  app.add_option("--cuda-context", o.overheads.cuda_context, "CUDA context and library handles per GPU, e.g. 0.52GiB (profile default)");
  app.add_option("--nccl-per-group", o.overheads.nccl_per_group,
                 "NCCL memory per further process-group dimension, e.g. 0.4GiB (profile default)");
  add_fsdp2_options(app, o);
  add_int(app, "--dp-replicate", o.fsdp.dp_replicate, "torchtitan: HSDP replicas (parameters shard over dp/dp-replicate x cp)");
  app.add_option("--gpu", o.gpu.gpu, "GPU whose memory to check against: h100-80g|h800-80g|h200-141g|a100-80g|b200-192g");
  app.add_option("--gpu-memory", o.gpu.gpu_memory, "GPU memory to check against, e.g. 80GiB");
  app.add_option("--finetune", o.finetune.finetune,
                 "What trains: full|lora|qlora (LoRA freezes the base and trains adapters A r x in, B out x r)")
      ->capture_default_str();
  add_optional_int(app, "--lora-rank", o.finetune.lora_rank, "LoRA rank r (required with --finetune lora)");
  app.add_option("--lora-targets", o.finetune.lora_targets,
                 "Linears LoRA adapts: all-linear (default: every decoder linear but the router; under --profile hf, as PEFT, "
                 "every nn.Linear but lm_head) or module names, e.g. "
                 "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj (routed experts included, as PEFT matches them)");
  app.add_option("--lora-dropout", o.finetune.lora_dropout, "LoRA dropout probability (default 0; > 0 keeps a mask and a copy of each adapted input)");
  app.add_option("--optimizer", o.finetune.optimizer, "Optimizer: adamw|adam8bit|adafactor|sgd|lion|muon (default adamw)");
  app.add_option("--sgd-momentum", o.finetune.sgd_momentum,
                 "SGD momentum (default: Megatron's 0.9; 0 with the hf profile, the Trainer's torch.optim.SGD; 0 keeps no momentum "
                 "buffer)");
  app.add_option("--deepspeed", o.deepspeed,
                 "DeepSpeed JSON configuration (--profile hf): zero_optimization.stage, offload_optimizer (host column), "
                 "bf16/fp16 and optimizer.type; keys that change memory and are not modelled are refused by name");
}

void add_format_option(CLI::App& app, std::string& format) {
  app.add_option("--format", format, "Output: table|json|csv|markdown")->capture_default_str();
}

std::vector<std::int64_t> parse_int_list(const std::string& text, const char* field) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    std::int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < 0) {
      throw InputError(field, text, "a comma-separated list of non-negative integers, e.g. 4,4,4,1");
    }
    out.push_back(v);
    start = end + 1;
  }
  return out;
}

ModelRequest to_model_request(const ModelOptions& o) { return ModelRequest{o.model, o.spec, o.mtp}; }

ModelSpec load_model_for(const ModelOptions& o, const Profile& profile) {
  return load_requested_model(to_model_request(o), profile);
}

ParallelConfig to_parallel(const LayoutOptions& o) {
  ParallelConfig p;
  p.tp = o.tp;
  p.pp = o.pp;
  p.dp = o.dp;
  p.cp = o.cp;
  p.ep = o.ep;
  p.etp = o.etp;
  p.sp = o.sp;
  p.vpp = o.vpp;
  p.schedule = parse_schedule(o.schedule);
  p.pipeline_layout = o.pipeline_layout;
  p.first_stage_layers = o.first_stage_layers;
  p.last_stage_layers = o.last_stage_layers;
  p.account_for_embedding = o.account_for_embedding;
  p.account_for_loss = o.account_for_loss;
  if (!o.layers_per_stage.empty()) p.layers_per_stage = parse_int_list(o.layers_per_stage, "--layers-per-stage");
  return p;
}

double parse_double_impl(const std::string& text, const char* field) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) {
    throw InputError(field, text, "a number");
  }
  return v;
}

namespace {

// Text options parsed into a typed value when given.
template <class T, class Parse>
std::optional<T> given(const std::string& text, Parse&& parse) {
  if (text.empty()) return std::nullopt;
  return parse(text);
}

// --finetune, --lora-*, --optimizer, --sgd-momentum: LoRA flags only with LoRA, a rank required.
FinetuneSettings to_finetune(const FinetuneOptions& o) {
  FinetuneSettings f;
  f.finetune = parse_finetune(o.finetune, "--finetune");
  f.optimizer = o.optimizer.empty() ? OptimizerKind::adamw : parse_optimizer(o.optimizer, "--optimizer");
  f.optimizer_given = !o.optimizer.empty();
  f.sgd_momentum_given = !o.sgd_momentum.empty();
  const bool lora = f.finetune != Finetune::full;
  if (!lora && (o.lora_rank || !o.lora_targets.empty() || !o.lora_dropout.empty())) {
    throw InputError("--lora-rank/--lora-targets/--lora-dropout", "given", "--finetune lora or qlora with them");
  }
  if (lora && !o.lora_rank) throw InputError("--lora-rank", "not given", "a rank r >= 1 with --finetune lora or qlora");
  if (o.lora_rank) f.lora_rank = *o.lora_rank;
  if (!o.lora_targets.empty()) f.lora_targets = o.lora_targets;
  if (!o.lora_dropout.empty()) f.lora_dropout = parse_double_impl(o.lora_dropout, "--lora-dropout");
  if (!o.sgd_momentum.empty()) {
    if (f.optimizer != OptimizerKind::sgd) throw InputError("--sgd-momentum", o.sgd_momentum, "--optimizer sgd with it");
    f.sgd_momentum = parse_double_impl(o.sgd_momentum, "--sgd-momentum");
    if (!(f.sgd_momentum >= 0 && f.sgd_momentum < 1)) throw InputError("--sgd-momentum", o.sgd_momentum, "a momentum from 0 up to 1");
  }
  return f;
}

}  // namespace

TrainingRequest to_training_request(const TrainingOptions& o) {
  TrainingRequest r;
  if (!o.numerics.recipe.empty()) r.recipe = parse_recipe(o.numerics.recipe, "--recipe");
  if (!o.numerics.recipe_off.empty()) r.recipe_off = parse_techniques(o.numerics.recipe_off, "--recipe-off");
  r.micro_batch = o.batch.micro_batch;
  r.seq_len = o.batch.seq_len;
  r.global_batch = o.batch.global_batch;
  r.zero = o.states.zero;
  // The distributed optimizer is ZeRO-1: with --zero 0 it used to become ZeRO-1 silently.
  if (o.states.distributed_optimizer && o.states.zero == 0) {
    throw InputError("--zero", "0 with --distributed-optimizer",
                     "--zero 1 or no --zero with --distributed-optimizer (which shards the optimizer states: ZeRO-1), "
                     "or --zero 0 without it");
  }
  r.distributed_optimizer = o.states.distributed_optimizer;
  if (!o.states.optimizer_offload_fraction.empty() && !o.states.optimizer_cpu_offload) {
    throw InputError("--optimizer-offload-fraction", o.states.optimizer_offload_fraction, "to be used with --optimizer-cpu-offload");
  }
  if (o.states.optimizer_cpu_offload) {
    r.optimizer_offload = o.states.optimizer_offload_fraction.empty()
                              ? 1.0
                              : parse_double(o.states.optimizer_offload_fraction, "--optimizer-offload-fraction");
  }
  r.vocab_multiple = o.numerics.vocab_multiple;
  r.attention = given<AttentionKernel>(o.numerics.attention, [](const std::string& v) { return parse_attention_kernel(v, "--attention"); });
  r.logits_dtype = parse_dtype(o.numerics.logits_dtype, "--logits-dtype");
  r.fp8 = given<Fp8Recipe>(o.numerics.fp8, [](const std::string& v) { return parse_fp8_recipe(v); });
  r.megatron_version = parse_megatron_version(o.numerics.megatron_version);
  r.torchtitan_version = parse_torchtitan_version(o.numerics.torchtitan_version);
  r.transformers_version = parse_transformers_version(o.numerics.transformers_version);
  r.deepspeed_release = parse_deepspeed_version(o.numerics.deepspeed_version);
  r.experts_implementation = given<ExpertsImplementation>(
      o.numerics.experts_implementation, [](const std::string& v) { return parse_experts_implementation(v); });
  r.hidden_dropout = given<double>(o.numerics.hidden_dropout, [](const std::string& v) { return parse_double_impl(v, "--hidden-dropout"); });
  r.attention_dropout =
      given<double>(o.numerics.attention_dropout, [](const std::string& v) { return parse_double_impl(v, "--attention-dropout"); });
  r.moe_imbalance = given<double>(o.moe.moe_imbalance, [](const std::string& v) { return parse_double_impl(v, "--moe-imbalance"); });
  r.moe_capacity_factor =
      given<double>(o.moe.moe_capacity_factor, [](const std::string& v) { return parse_double_impl(v, "--moe-capacity-factor"); });
  r.dispatcher = parse_dispatcher(o.moe.dispatcher, "--moe-token-dispatcher");
  r.shared_expert_overlap = o.moe.shared_expert_overlap;
  r.ep_overlap = o.moe.ep_overlap;
  r.delay_wgrad = o.moe.delay_wgrad;
  r.tp_comm_overlap = o.moe.tp_comm_overlap;
  r.no_rope_fusion = o.moe.no_rope_fusion;
  r.no_grad_accum_fusion = o.moe.no_grad_accum_fusion;
  r.no_dataloader_attention_mask = o.moe.no_attention_mask;
  r.cuda_graphs.impl = parse_cuda_graph_impl(o.numerics.cuda_graph_impl, "--cuda-graph-impl");
  if (!o.numerics.cuda_graph_scope.empty()) {
    if (r.cuda_graphs.impl == CudaGraphImpl::none) {
      throw InputError("--cuda-graph-scope", o.numerics.cuda_graph_scope, "to be used with --cuda-graph-impl local|transformer_engine");
    }
    r.cuda_graphs.scope = parse_cuda_graph_scope(o.numerics.cuda_graph_scope, "--cuda-graph-scope");
  }
  r.cuda_context = given<Bytes>(o.overheads.cuda_context, [](const std::string& v) { return parse_memory_size(v, "--cuda-context", true); });
  r.nccl_per_group =
      given<Bytes>(o.overheads.nccl_per_group, [](const std::string& v) { return parse_memory_size(v, "--nccl-per-group", true); });
  r.fragmentation_pct =
      given<double>(o.overheads.fragmentation_pct, [](const std::string& v) { return parse_double_impl(v, "--fragmentation-pct"); });
  r.fsdp.compile = o.fsdp.compile;
  r.fsdp.loss = given<LossImpl>(o.fsdp.loss, [](const std::string& v) { return parse_loss_impl(v); });
  r.fsdp.reshard = parse_reshard_policy(o.fsdp.reshard_after_forward);
  r.fsdp.fsdp_float8_all_gather = o.fsdp.fsdp_float8_all_gather;
  r.fsdp.dp_replicate = o.fsdp.dp_replicate;
  r.fsdp.accelerate_fsdp2 = o.fsdp.fsdp2;
  r.fsdp.accelerate_fsdp1 = o.fsdp.fsdp1;
  r.fsdp.hf_ddp = o.fsdp.ddp;
  r.fsdp.fsdp_offload_params = o.fsdp.fsdp_offload_params;
  r.recompute = given<Recompute>(o.recompute.recompute, [](const std::string& v) { return parse_recompute(v, "--recompute"); });
  r.recompute_modules = given<std::uint16_t>(
      o.recompute.recompute_modules, [](const std::string& v) { return parse_recompute_modules(v, "--recompute-modules"); });
  r.recompute_method = given<RecomputeMethod>(
      o.recompute.recompute_method, [](const std::string& v) { return parse_recompute_method(v, "--recompute-method"); });
  r.recompute_num_layers = o.recompute.recompute_num_layers;
  if (!o.recompute.selective_ac_option.empty()) r.selective_ac_option = o.recompute.selective_ac_option;
  r.cpu_offload_layers = o.recompute.cpu_offload_layers;
  r.overhead = parse_overhead_point(o.overheads.overhead, "--overhead");
  const auto dtype = [](const char* flag) { return [flag](const std::string& v) { return parse_dtype(v, flag); }; };
  r.params_dtype = given<DType>(o.states.params_dtype, dtype("--params-dtype"));
  r.main_grads_dtype = given<DType>(o.states.main_grads_dtype, dtype("--main-grads-dtype"));
  r.main_params_dtype = given<DType>(o.states.main_params_dtype, dtype("--main-params-dtype"));
  r.exp_avg_dtype = given<DType>(o.states.exp_avg_dtype, dtype("--exp-avg-dtype"));
  r.exp_avg_sq_dtype = given<DType>(o.states.exp_avg_sq_dtype, dtype("--exp-avg-sq-dtype"));
  r.finetune = to_finetune(o.finetune);
  if (!o.deepspeed.empty()) {
    if (o.profile != "hf") throw InputError("--deepspeed", o.deepspeed, "--profile hf with a DeepSpeed configuration");
    if (o.fsdp.fsdp2) throw InputError("--deepspeed", o.deepspeed, "no --deepspeed with --fsdp2 (FSDP2 replaces DeepSpeed)");
    if (o.states.optimizer_cpu_offload) {
      throw InputError("--optimizer-cpu-offload", "set",
                       "not given with --deepspeed (the config's zero_optimization.offload_optimizer offloads the optimizer)");
    }
    // DeepSpeed takes its dtypes from the config (bf16/fp16 sections: the module's weights, fp32
    // master partitions and states): a flag saying otherwise would cost a run DeepSpeed cannot make.
    for (const auto& [flag, value] : {std::pair{"--params-dtype", &o.states.params_dtype},
                                      std::pair{"--main-grads-dtype", &o.states.main_grads_dtype},
                                      std::pair{"--main-params-dtype", &o.states.main_params_dtype},
                                      std::pair{"--exp-avg-dtype", &o.states.exp_avg_dtype},
                                      std::pair{"--exp-avg-sq-dtype", &o.states.exp_avg_sq_dtype}}) {
      if (!value->empty()) {
        throw InputError(flag, *value, "not given with --deepspeed (the config's bf16/fp16 sections set the dtypes)");
      }
    }
    apply_deepspeed(read_deepspeed_config(o.deepspeed), r);
  }
  if (!o.accelerate_config.empty()) {
    if (o.profile != "hf") {
      throw InputError("--accelerate-config", o.accelerate_config, "--profile hf with an accelerate config (FSDP2)");
    }
    if (!o.deepspeed.empty()) throw InputError("--accelerate-config", o.accelerate_config, "no --deepspeed as well");
    apply_accelerate(read_accelerate_config(o.accelerate_config), r, o.accelerate_config);
  }
  return r;
}

TrainingConfig to_training(const TrainingOptions& o, const Profile& profile) {
  return resolve_training(to_training_request(o), profile);
}

Request to_request(const ModelOptions& mo, const LayoutOptions& lo, const TrainingOptions& to) {
  Request r;
  r.model = to_model_request(mo);
  r.parallel = to_parallel(lo);
  r.training = to_training_request(to);
  if (!to.accelerate_config.empty()) {
    check_accelerate_processes(read_accelerate_config(to.accelerate_config), lo.dp, "--dp", to.accelerate_config);
  }
  r.profile = to.profile;
  return r;
}

Request to_request(const ModelOptions& mo, const LayoutOptions& lo, const TrainingOptions& to,
                   const MegatronScript& script) {
  Request r = to_request(mo, lo, to);
  if (script.settings) apply_megatron_settings(*script.settings, r, script.given);
  return r;
}

Evaluation resolve(const ModelOptions& mo, const LayoutOptions& lo, const TrainingOptions& to) {
  return make_scenario(to_request(mo, lo, to));
}

double parse_double(const std::string& text, const char* field) { return parse_double_impl(text, field); }

std::optional<GpuChoice> gpu_choice(const TrainingOptions& to) {
  if (!to.gpu.gpu.empty() && !to.gpu.gpu_memory.empty()) {
    throw InputError("--gpu/--gpu-memory", to.gpu.gpu + " and " + to.gpu.gpu_memory, "one of the two");
  }
  if (!to.gpu.gpu.empty()) {
    const Gpu g = lookup_gpu(to.gpu.gpu);
    return GpuChoice{g.name, g.capacity};
  }
  if (!to.gpu.gpu_memory.empty()) return GpuChoice{to.gpu.gpu_memory, parse_memory_size(to.gpu.gpu_memory, "--gpu-memory")};
  return std::nullopt;
}

}  // namespace moemem::cli
