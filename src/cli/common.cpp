#include "cli/common.hpp"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

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
  app.add_option_function<std::string>(flag, [&target, flag](const std::string& s) { target = parse_int(s, flag); }, help)
      ->type_name("INT");
}

void add_model_options(CLI::App& app, ModelOptions& o) {
  app.add_option("--model", o.model, "Preset name (the files in data/models, e.g. deepseek-v3, mixtral-8x7b, llama-3.1-70b) or path to a config.json")
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--mtp", [&o](const std::string& s) { o.mtp = parse_int(s, "--mtp"); },
         "Multi-token-prediction depths to include (default: the config's, 0 in the paper profile)")
      ->type_name("INT");
}

void add_layout_options(CLI::App& app, LayoutOptions& o) {
  add_int(app, "--tp", o.tp, "Tensor-parallel degree");
  add_int(app, "--pp", o.pp, "Pipeline-parallel degree (stages)");
  add_int(app, "--dp", o.dp, "Data-parallel degree");
  add_int(app, "--cp", o.cp, "Context-parallel degree");
  add_int(app, "--ep", o.ep, "Expert-parallel degree");
  add_int(app, "--etp", o.etp, "Expert-tensor-parallel degree");
  add_int(app, "--vpp", o.vpp, "Virtual pipeline stages (model chunks) per rank: interleaved 1F1B");
  app.add_flag("--sp,--sequence-parallel", o.sp, "Sequence parallelism (split non-attention activations over tp)");
  app.add_option("--layers-per-stage", o.layers_per_stage,
                 "Decoder layers of each pipeline chunk in model order, e.g. 4,4,...,1 (default: ceil(L/chunks), "
                 "the last the rest)");
  app.add_option("--schedule", o.schedule, "Pipeline schedule: 1f1b|interleaved|dualpipe|dualpipev|gpipe|zb-h1")
      ->capture_default_str();
  app.add_option("--pipeline-model-parallel-layout", o.pipeline_layout,
                 "Megatron layout string, e.g. 'Et|(tt|)*30mL' (E embedding, t layer, m MTP, L loss, | stage)");
  add_optional_int(app, "--decoder-first-pipeline-num-layers", o.first_stage_layers, "Decoder layers on the first stage");
  add_optional_int(app, "--decoder-last-pipeline-num-layers", o.last_stage_layers, "Decoder layers on the last stage");
  app.add_flag("--account-for-embedding-in-pipeline-split", o.account_for_embedding,
               "Count the embedding as one layer when splitting evenly");
  app.add_flag("--account-for-loss-in-pipeline-split", o.account_for_loss,
               "Count the loss (head) as one layer when splitting evenly");
}

void add_training_options(CLI::App& app, TrainingOptions& o) {
  app.add_option("--profile", o.profile, "Accounting profile: megatron|paper|torchtitan")->capture_default_str();
  add_int(app, "--micro-batch", o.micro_batch, "Micro-batch size b");
  add_int(app, "--seq-len", o.seq_len, "Sequence length s");
  add_optional_int(app, "--zero", o.zero, "ZeRO stage 0-3 (default 0)");
  app.add_option("--recompute,--recompute-granularity", o.recompute,
                 "Activation recomputation: none|selective|full (default none)");
  app.add_option("--recompute-modules", o.recompute_modules,
                 "Selective recomputation modules: core_attn,mla_up_proj,layernorm,moe_act,mlp,moe,shared_experts "
                 "(default core_attn)");
  app.add_option("--recompute-method", o.recompute_method, "Full recomputation: uniform|block")->capture_default_str();
  add_int(app, "--recompute-num-layers", o.recompute_num_layers, "Layers per checkpointed group (uniform) or per chunk (block)");
  app.add_option("--overhead", o.overhead,
                 "Which end of the profile's buffer/fragmentation range enters totals: none|low|high")
      ->capture_default_str();
  app.add_option("--params-dtype", o.params_dtype, "Weight dtype (profile default: bf16)");
  app.add_option("--main-grads-dtype", o.main_grads_dtype, "Gradient dtype (profile default: fp32)");
  app.add_option("--main-params-dtype", o.main_params_dtype, "Master-weight dtype (profile default: fp32)");
  app.add_option("--exp-avg-dtype", o.exp_avg_dtype, "Adam first-moment dtype (profile default: paper bf16, megatron fp32)");
  app.add_option("--exp-avg-sq-dtype", o.exp_avg_sq_dtype, "Adam second-moment dtype (profile default: paper bf16, megatron fp32)");
  app.add_flag("--distributed-optimizer,--use-distributed-optimizer", o.distributed_optimizer,
               "Megatron's distributed optimizer: shard master weights and moments (= --zero 1)");
  add_optional_int(app, "--global-batch", o.global_batch, "Sequences per optimizer step (gives the micro-batches per step)");
  app.add_option("--attention", o.attention, "Attention kernel: flash|eager (profile default)");
  app.add_option("--logits-dtype", o.logits_dtype, "Dtype in which the loss keeps the logits")->capture_default_str();
  add_optional_int(app, "--make-vocab-size-divisible-by", o.vocab_multiple,
                   "Pad the vocabulary to a multiple of this x tp (megatron default 128)");
  app.add_option("--fp8", o.fp8, "FP8 recipe: none|tensorwise|delayed|blockwise|mxfp8");
  app.add_option("--recipe", o.recipe,
                 "A published training recipe: deepseek-v3 (FP8 blockwise with FP8-cached SwiGLU inputs, bf16 moments, "
                 "fp32 master and gradients, recompute of norms, MLA up-projections and the expert activation, ZeRO-1); "
                 "flags given as well take precedence");
  app.add_option("--moe-imbalance", o.moe_imbalance, "Tokens the hottest expert rank receives, times the average (>= 1)");
  app.add_option("--moe-capacity-factor", o.moe_capacity_factor, "Expert capacity, times the average tokens (excess dropped)");
  app.add_option("--moe-token-dispatcher", o.dispatcher, "alltoall|deepep (DeepEP keeps a communication buffer)")
      ->capture_default_str();
  app.add_option("--fragmentation-pct", o.fragmentation_pct,
                 "Allocator cache and fragmentation, % of allocated (profile default)");
  app.add_option("--cuda-context", o.cuda_context, "CUDA context and library handles per GPU, e.g. 0.52GiB (profile default)");
  app.add_option("--nccl-per-group", o.nccl_per_group,
                 "NCCL memory per further process-group dimension, e.g. 0.4GiB (profile default)");
  app.add_flag("--compile", o.compile, "torchtitan: torch.compile of each block (and of the loss: --loss fused)");
  app.add_option("--loss", o.loss, "torchtitan: how the loss keeps the logits: upcast|fused|chunked (default fused with --compile, else upcast)");
  app.add_option("--reshard-after-forward", o.reshard_after_forward, "torchtitan: FSDP reshard policy: default|always|never")
      ->capture_default_str();
  app.add_flag("--fsdp-float8-all-gather", o.fsdp_float8_all_gather, "torchtitan: FSDP all-gathers float8 linear weights (needs --fp8)");
  app.add_option("--dp-replicate", o.dp_replicate, "torchtitan: HSDP replicas (parameters shard over dp/dp-replicate x cp)")
      ->capture_default_str();
  app.add_option("--gpu", o.gpu, "GPU whose memory to check against: h100-80g|h800-80g|h200-141g|a100-80g|b200-192g");
  app.add_option("--gpu-memory", o.gpu_memory, "GPU memory to check against, e.g. 80GiB");
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

ModelSpec load_model_for(const ModelOptions& o, const Profile& profile) {
  ModelSpec m = o.spec ? *o.spec : load_model(o.model);
  if (o.mtp) set_mtp_layers(m, o.mtp);
  else if (!profile.include_mtp_by_default) m.mtp_layers = 0;
  return m;
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
  const int ways = (p.pipeline_layout.empty() ? 0 : 1) + (p.layers_per_stage.empty() ? 0 : 1) +
                   (p.first_stage_layers || p.last_stage_layers ? 1 : 0) +
                   (p.account_for_embedding || p.account_for_loss ? 1 : 0);
  if (ways > 1) {
    throw InputError("pipeline split", "several ways given",
                     "one of --pipeline-model-parallel-layout, --layers-per-stage, --decoder-first/last-pipeline-num-layers, "
                     "--account-for-embedding/loss-in-pipeline-split");
  }
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

// A recipe fills in what the user did not say.
TrainingOptions with_recipe(TrainingOptions o) {
  if (o.recipe.empty()) return o;
  if (o.recipe != "deepseek-v3") throw InputError("--recipe", o.recipe, "deepseek-v3");
  // DeepSeek-V3 technical report (arXiv 2412.19437) §3.2-3.3: FP8 GEMMs with 1x128 / 128x128
  // scaling and FP8-cached activations (SwiGLU inputs included, its output recomputed), BF16
  // AdamW moments, FP32 master weights and gradient accumulation, recomputation of all RMSNorm
  // and MLA up-projections, ZeRO-1 data parallelism; the EMA lives in CPU memory.
  auto fill = [](std::string& field, const char* value) {
    if (field.empty()) field = value;
  };
  fill(o.fp8, "blockwise");
  fill(o.main_grads_dtype, "fp32");
  fill(o.main_params_dtype, "fp32");
  fill(o.exp_avg_dtype, "bf16");
  fill(o.exp_avg_sq_dtype, "bf16");
  if (o.recompute.empty() && o.recompute_modules.empty()) {
    o.recompute = "selective";
    o.recompute_modules = "layernorm,mla_up_proj,moe_act";
  }
  if (!o.zero) o.distributed_optimizer = true;
  return o;
}

TrainingConfig to_training(const TrainingOptions& opts, const Profile& profile) {
  const TrainingOptions o = with_recipe(opts);
  TrainingConfig t;
  t.micro_batch = o.micro_batch;
  t.seq_len = o.seq_len;
  const std::int64_t zero = o.zero.value_or(0);
  if (zero < 0 || zero > 3) throw InputError("--zero", std::to_string(zero), "0, 1, 2 or 3");
  t.zero = static_cast<int>(zero);
  if (o.distributed_optimizer) {
    if (zero > 1) {
      throw InputError("--distributed-optimizer", "with --zero " + std::to_string(zero), "--zero 0 or 1 (it is ZeRO-1)");
    }
    t.zero = 1;
  }
  t.global_batch = o.global_batch;
  t.vocab_multiple = o.vocab_multiple;
  if (!o.attention.empty()) {
    if (o.attention == "flash") t.attention = AttentionKernel::flash;
    else if (o.attention == "eager") t.attention = AttentionKernel::eager;
    else throw InputError("--attention", o.attention, "flash or eager");
  }
  t.logits_dtype = parse_dtype(o.logits_dtype, "--logits-dtype");
  if (!o.fp8.empty()) t.fp8 = parse_fp8_recipe(o.fp8);
  t.fp8_swiglu_input = o.recipe == "deepseek-v3" && t.fp8 != Fp8Recipe::none;
  // DeepSeek-V3 report §3.3.2: scales are computed and weights quantized online for each 128x128
  // block, so no FP8 weight copy stays resident (Transformer Engine's recipes keep one).
  t.fp8_online_weights = o.recipe == "deepseek-v3" && t.fp8 == Fp8Recipe::blockwise;
  if (!o.moe_imbalance.empty()) t.moe_imbalance = parse_double_impl(o.moe_imbalance, "--moe-imbalance");
  if (!o.moe_capacity_factor.empty()) t.moe_capacity_factor = parse_double_impl(o.moe_capacity_factor, "--moe-capacity-factor");
  if (o.dispatcher == "deepep") t.deepep = true;
  else if (o.dispatcher != "alltoall") throw InputError("--moe-token-dispatcher", o.dispatcher, "alltoall or deepep");
  if (!o.cuda_context.empty()) t.cuda_context = parse_memory_size(o.cuda_context, "--cuda-context", true);
  if (!o.nccl_per_group.empty()) t.nccl_per_group = parse_memory_size(o.nccl_per_group, "--nccl-per-group", true);
  if (!o.fragmentation_pct.empty()) t.fragmentation_pct = parse_double_impl(o.fragmentation_pct, "--fragmentation-pct");
  t.compile = o.compile;
  if (!o.loss.empty()) t.loss = parse_loss_impl(o.loss);
  t.reshard = parse_reshard_policy(o.reshard_after_forward);
  t.fsdp_float8_all_gather = o.fsdp_float8_all_gather;
  t.dp_replicate = o.dp_replicate;
  if (o.recompute.empty() || o.recompute == "none") t.recompute = Recompute::none;
  else if (o.recompute == "full") t.recompute = Recompute::full;
  else if (o.recompute == "selective") t.recompute = Recompute::selective;
  else throw InputError("--recompute", o.recompute, "none, selective or full");
  if (!o.recompute_modules.empty()) {
    if (t.recompute == Recompute::none) t.recompute = Recompute::selective;  // modules imply selective
    if (t.recompute != Recompute::selective) {
      throw InputError("--recompute-modules", o.recompute_modules, "to be used with --recompute selective");
    }
    t.recompute_modules = parse_recompute_modules(o.recompute_modules, "--recompute-modules");
  }
  if (o.recompute_method == "uniform") t.recompute_method = RecomputeMethod::uniform;
  else if (o.recompute_method == "block") t.recompute_method = RecomputeMethod::block;
  else throw InputError("--recompute-method", o.recompute_method, "uniform or block");
  t.recompute_num_layers = o.recompute_num_layers;
  if (profile.name == "paper" && (t.recompute == Recompute::selective || t.recompute_method != RecomputeMethod::uniform ||
                                  t.recompute_num_layers != 1)) {
    throw InputError("--recompute", o.recompute + " " + o.recompute_method,
                     "none or full (uniform, one layer) in the paper profile, as the report analyses");
  }
  if (o.overhead == "none") t.overhead = OverheadPoint::none;
  else if (o.overhead == "low") t.overhead = OverheadPoint::low;
  else if (o.overhead == "high") t.overhead = OverheadPoint::high;
  else throw InputError("--overhead", o.overhead, "none, low or high");
  t.precision = profile.default_precision;
  if (!o.params_dtype.empty()) t.precision.weights = parse_dtype(o.params_dtype, "--params-dtype");
  if (!o.main_grads_dtype.empty()) t.precision.gradients = parse_dtype(o.main_grads_dtype, "--main-grads-dtype");
  if (!o.main_params_dtype.empty()) t.precision.master = parse_dtype(o.main_params_dtype, "--main-params-dtype");
  if (!o.exp_avg_dtype.empty()) t.precision.exp_avg = parse_dtype(o.exp_avg_dtype, "--exp-avg-dtype");
  if (!o.exp_avg_sq_dtype.empty()) t.precision.exp_avg_sq = parse_dtype(o.exp_avg_sq_dtype, "--exp-avg-sq-dtype");
  return t;
}

Evaluation resolve(const ModelOptions& mo, const LayoutOptions& lo, const TrainingOptions& to) {
  Evaluation e;
  e.profile = &get_profile(to.profile);
  e.model = load_model_for(mo, *e.profile);
  e.inventory = build_inventory(e.model);
  e.layout = resolve_layout(e.model, to_parallel(lo));
  e.training = to_training(to, *e.profile);
  validate_training(e.training, e.layout);
  return e;
}

double parse_double(const std::string& text, const char* field) { return parse_double_impl(text, field); }

std::optional<GpuChoice> gpu_choice(const TrainingOptions& to) {
  if (!to.gpu.empty() && !to.gpu_memory.empty()) {
    throw InputError("--gpu/--gpu-memory", to.gpu + " and " + to.gpu_memory, "one of the two");
  }
  if (!to.gpu.empty()) {
    const Gpu g = lookup_gpu(to.gpu);
    return GpuChoice{g.name, g.capacity};
  }
  if (!to.gpu_memory.empty()) return GpuChoice{to.gpu_memory, parse_memory_size(to.gpu_memory, "--gpu-memory")};
  return std::nullopt;
}

}  // namespace moemem::cli
