// The hf profile's state model: ZeRO's states as zero_states.cpp records them (weights, gradients,
// optimizer states, each sharded by stage), plus the buffers DeepSpeed's ZeRO optimizers allocate
// themselves, sized by the ds_config (StateSettings::deepspeed; DeepSpeed's defaults when the run
// gives --zero without a config). Facts from deepspeedai/DeepSpeed edaa7221:
// - ZeRO-1/2 (deepspeed/runtime/zero/stage_1_and_2.py): setup_buckets, called from the first
//   gradient hook of each backward (process_gradients), allocates with contiguous_gradients one
//   IPG buffer torch.empty(reduce_bucket_size, dtype=self.dtype) per communication dtype, and a
//   second one with overlap_comm ("double buffers"); contiguous_gradients is forced on under
//   cpu_offload (__init__: contiguous_gradients or self.cpu_offload). With offload_optimizer,
//   __init__ keeps temp_grad_buffer_for_gpu_offload (largest_param_numel x self.dtype on the GPU)
//   and temp_grad_buffer_for_cpu_offload (the same, pinned on the host). allgather_bucket_size
//   allocates nothing: all_gather_dp_groups (runtime/utils.py) gathers in place into
//   bit16_groups_flat with all_gather_into_tensor whenever torch has it.
// - ZeRO-3 (stage3.py __init__): with contiguous_gradients one IPG buffer of reduce_bucket_size x
//   dtype (no second buffer under overlap_comm). Parameters of at most
//   stage3_param_persistence_threshold elements stay gathered whole on every rank
//   (parameter_offload.py mark_persistent_parameters; model_persistence_threshold, default
//   sys.maxsize, never binds). The coordinator (partitioned_param_coordinator.py
//   fetch_sub_module) gathers the current module's parameters and prefetches the next ones up to
//   min(stage3_max_live_parameters - available, stage3_prefetch_bucket_size) elements.
// - The client optimizer steps DeepSpeed's flat fp32 partitions, not the model's tensors: ZeRO-1/2
//   put each param group's partition, one 1-D tensor, in its place (stage_1_and_2.py
//   single_partition_of_fp32_groups), ZeRO-3 each sub-group's (stage3.py
//   fp32_partitioned_groups_flat, sub_group_size 1e9 elements by default). So bitsandbytes' 8-bit
//   AdamW keeps byte states and one absmax per 256 elements of the partition (no tensor is under
//   its 4096-element floor but a tiny group's), and Adafactor's second moment of a 1-D tensor is
//   unfactored: 4 bytes per element. Adafactor's step builds grad**2 + eps and then the update
//   from the moment while the first is referenced, from fp32 gradients and parameters (no upcast
//   copies): 8 bytes per element of the partition it steps (ZeRO-3: of one sub-group, at most
//   sub_group_size elements).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "analyze/internal.hpp"
#include "moemem/deepspeed_buffers.hpp"
#include "profiles/hf.hpp"

namespace moemem {

DeepSpeedSizes resolve_sizes(const DeepSpeedBuffers& b, std::int64_t hidden) {
  const auto h = static_cast<std::uint64_t>(hidden);
  const auto hh = static_cast<std::int64_t>(checked_mul(h, h, "hidden^2"));
  // int(0.9 * h * h): the Trainer writes the float, DeepSpeed's pp_int field truncates it.
  const auto prefetch = static_cast<std::int64_t>(0.9 * static_cast<double>(hh));
  return {b.reduce_bucket_size.value_or(hh), b.prefetch_bucket_size.value_or(prefetch),
          b.param_persistence_threshold.value_or(static_cast<std::int64_t>(checked_mul(h, 10, "10 hidden")))};
}

}  // namespace moemem

namespace moemem::detail {

namespace {

// DeepSpeed's parameters as the model holds them (each_hf_parameter): one per module weight, the
// parts of a fused checkpoint tensor together, and a routed entry's experts one each (Mixtral's
// nn.Linear per expert under transformers 4) or all in one (transformers 5's and gpt-oss's 3-D
// gate_up_proj, gathered whole under ZeRO-3). ZeRO-3 gathers a module's own parameters together
// (partitioned_param_coordinator.py fetch_sub_module, iter_params of the module): one weight for
// an nn.Linear, but the experts module's 3-D parameters (gate_up_proj and down_proj, with gpt-oss's
// biases) all at once.
struct ParamStats {
  std::int64_t largest = 0;           // elements of the largest parameter
  std::int64_t largest_module = 0;    // elements of the largest module's own parameters together
  std::int64_t largest_trainable = 0;
  std::int64_t largest_nf4 = 0;       // QLoRA: elements of the largest NF4-stored weight
  std::uint64_t persistent = 0;       // elements of the parameters at or under the threshold
  std::uint64_t persistent_count = 0;
};

bool fused_experts(const TrainingConfig& t) { return t.transformers_version == TransformersVersion::v5; }

// The compiled model's groups hold only the tensors the profile accounts (compile_model).
void add_group(const std::vector<Tensor>& tensors, std::int64_t times, std::int64_t threshold, bool fused, ParamStats& s) {
  if (times <= 0) return;
  std::uint64_t experts = 0;  // the layer's 3-D routed-expert parameters: one module
  each_hf_parameter(tensors, fused, [&](const Tensor& first, std::int64_t numel, std::int64_t params, bool trains, bool nf4) {
    const auto copies = static_cast<std::uint64_t>(params);
    s.largest = std::max(s.largest, numel);
    if (nf4) s.largest_nf4 = std::max(s.largest_nf4, numel);
    if (trains) s.largest_trainable = std::max(s.largest_trainable, numel);
    if (first.is_routed_expert && (fused || first.name.find('*') == std::string::npos)) {
      experts = checked_add(experts, static_cast<std::uint64_t>(numel), "experts module");
    }
    if (numel <= threshold) {
      const std::uint64_t n = checked_mul(copies, static_cast<std::uint64_t>(times), "persistent parameters");
      s.persistent += checked_mul(static_cast<std::uint64_t>(numel), n, "persistent parameters");
      s.persistent_count += n;
    }
  });
  s.largest_module = std::max({s.largest_module, s.largest, static_cast<std::int64_t>(experts)});
}

ParamStats param_stats(const EvalContext& c, std::int64_t threshold) {
  ParamStats s;
  const auto& cm = c.cm;
  const bool fused = fused_experts(c.t);
  for (std::size_t k = 0; k < kLayerClasses; ++k) {
    add_group(cm.layer[k], cm.layers_in(k, 0, c.model.num_layers), threshold, fused, s);
  }
  add_group(cm.embedding, 1, threshold, fused, s);
  add_group(cm.head, 1, threshold, fused, s);
  return s;
}

// The settings in effect: the config's, or DeepSpeed's defaults for a bare --zero (overlap_comm
// then true under stage 3 only, config.py overlap_comm_valid).
DeepSpeedBuffers settings(const TrainingConfig& t) {
  if (t.deepspeed) return *t.deepspeed;
  DeepSpeedBuffers d;
  d.overlap_comm = t.zero == 3;
  // --optimizer-cpu-offload without a config is offload_optimizer to the CPU, with its staging
  // buffers, as the config key would give.
  d.offload_optimizer = t.optimizer_offload > 0;
  return d;
}

void add_buffer(Ledger& ledger, Category cat, Count n, DType d, std::int64_t times, const char* item, std::string rule) {
  if (n.value() == 0 || times == 0) return;
  ledger.add(cat, bytes_of(Count(checked_mul(n.value(), static_cast<std::uint64_t>(times), item)), d),
             [&] { return ledger_item("deepspeed", item, std::move(rule), n, d, times); });
}

// With offload_optimizer and gradient accumulation, stage_1_and_2.py copy_grads_in_partition calls
// async_accumulate_grad_in_cpu_via_gpu for each parameter in the rank's partition: the first
// micro-batch copies its gradient into accumulated_grads_in_cpu[param_id], a pinned host buffer
// of the whole parameter (param.numel(), the parameter's dtype), kept from then on. So the host
// holds the partition's parameters whole: ceil(P / dp), plus the largest parameter for those
// straddling the partition's ends (errs high by at most one parameter).
Count accumulated_in_cpu(const EvalContext& c, const StageReport& st) {
  if (c.microbatches.value_or(1) <= 1) return Count{};
  const auto group = static_cast<std::uint64_t>(c.layout.config.dp * c.layout.config.cp);
  const std::uint64_t trained = st.trainable.non_expert.params.value() + st.trainable.expert.params.value();
  return Count(checked_add(ceil_div(trained, group), static_cast<std::uint64_t>(param_stats(c, 0).largest_trainable),
                           "accumulated gradients"));
}

void record_stage12(const EvalContext& c, const StageReport& st, const DeepSpeedBuffers& b, const DeepSpeedSizes& z,
                    Ledger& ledger) {
  const DType d = c.t.precision.weights;
  const bool contiguous = b.contiguous_gradients || b.offload_optimizer;
  if (contiguous) {
    const std::int64_t buffers = b.overlap_comm ? 2 : 1;
    add_buffer(ledger, Category::buffers, Count(static_cast<std::uint64_t>(z.reduce_bucket)), d, buffers,
               "IPG gradient buckets (stage_1_and_2.py setup_buckets)",
               fmt::format("reduce_bucket_size {} x {}{}", z.reduce_bucket, name_of(d), b.overlap_comm ? " x 2 (overlap_comm)" : ""));
  }
  if (b.offload_optimizer) {
    const Count largest(static_cast<std::uint64_t>(param_stats(c, 0).largest_trainable));
    add_buffer(ledger, Category::buffers, largest, d, 1, "offload gradient staging (temp_grad_buffer_for_gpu_offload)",
               fmt::format("largest trainable parameter {} x {}", largest.value(), name_of(d)));
    add_buffer(ledger, Category::host, largest, d, 1, "pinned gradient staging (temp_grad_buffer_for_cpu_offload, CPU memory)",
               fmt::format("largest trainable parameter {} x {}", largest.value(), name_of(d)));
    const Count accumulated = accumulated_in_cpu(c, st);
    add_buffer(ledger, Category::host, accumulated, d, 1,
               "pinned gradient accumulation (accumulated_grads_in_cpu, CPU memory)",
               fmt::format("the partition's parameters whole, ceil(trainable / dp) + the largest {} x {} (gradient "
                           "accumulation over {} micro-batches)",
                           largest.value(), name_of(d), c.microbatches.value_or(1)));
  }
}

void record_stage3(const EvalContext& c, const DeepSpeedBuffers& b, const DeepSpeedSizes& z, Ledger& ledger) {
  const DType d = c.t.precision.weights;
  if (b.contiguous_gradients) {
    add_buffer(ledger, Category::buffers, Count(static_cast<std::uint64_t>(z.reduce_bucket)), d, 1,
               "IPG gradient bucket (stage3.py)", fmt::format("reduce_bucket_size {} x {}", z.reduce_bucket, name_of(d)));
  }
  const ParamStats s = param_stats(c, z.persistence_threshold);
  add_buffer(ledger, Category::weights, Count(s.persistent), d, 1, "persistent parameters, gathered whole",
             fmt::format("{} parameters of <= stage3_param_persistence_threshold {} elements x {}", s.persistent_count,
                         z.persistence_threshold, name_of(d)));
  // The module being run plus the prefetched ones, bounded by max_live_parameters for the
  // prefetch (fetch_sub_module): the largest module's own parameters (one weight for HF's
  // nn.Linear modules, every 3-D parameter of a routed-experts module).
  const std::int64_t module = s.largest_module;
  const std::int64_t room = std::max<std::int64_t>(0, b.max_live_parameters - module);
  const std::int64_t prefetch = std::min(z.prefetch_bucket, room);
  const Count gathered(static_cast<std::uint64_t>(module + prefetch));
  add_buffer(ledger, Category::buffers, gathered, d, 1, "gathered parameters (current module + prefetch)",
             fmt::format("largest module {} + min(stage3_prefetch_bucket_size {}, stage3_max_live_parameters {} - {}) x {}",
                         module, z.prefetch_bucket, b.max_live_parameters, module, name_of(d)));
}

// What the optimizer sees under DeepSpeed: each group a flat 1-D partition (module comment).
void flatten_counts(OptimizerCounts& n) {
  n.matrices = Count{};
  n.factors = n.params;
  n.blocks = Count(ceil_div(n.params.value(), 256));
  n.small = Count{};
}

void deepspeed_prepare(const EvalContext& c, const Shares&, StageReport& st) {
  if (c.t.optimizer != OptimizerKind::adam8bit && c.t.optimizer != OptimizerKind::adafactor) return;
  flatten_counts(st.trainable.non_expert);
  flatten_counts(st.trainable.expert);
}

// Adafactor's step temporaries: 8 bytes per element of the flat partition it steps (ZeRO-3: at
// most one sub-group, sub_group_size elements). DeepSpeed flattens routed experts into the same
// group as everything else.
Bytes adafactor_step(const EvalContext& c, const StageReport& st) {
  if (c.t.optimizer != OptimizerKind::adafactor) return Bytes{};
  const auto group = static_cast<std::uint64_t>(c.layout.config.dp * c.layout.config.cp);
  const std::uint64_t trained = st.trainable.non_expert.params.value() + st.trainable.expert.params.value();
  std::uint64_t partition = ceil_div(trained, group);
  if (c.t.zero == 3) partition = std::min(partition, static_cast<std::uint64_t>(settings(c.t).sub_group_size));
  return Bytes(checked_mul(partition, 8, "adafactor step"));
}

// bf16 without ZeRO before DeepSpeed 0.17.6 (--deepspeed-version; read at v0.15.0 to v0.17.5):
// get_data_types makes fp32 the gradient-accumulation dtype and _do_optimizer_sanity_check picks
// BF16_Optimizer (runtime/bf16_optimizer.py), which flattens each param group's bf16 parameters
// (padded to a multiple of 2 x dp elements), keeps an fp32 gradient buffer of the whole flat group
// from its construction (fp32_groups_gradients_flat), and steps fp32 master partitions (flat / dp,
// ZeRO-1's layout) with the optimizer's states on them. The bf16 gradients are in param.grad at
// the end of backward and through the step: the engine's step calls no zero_grad for bf16 without
// ZeRO; clear_lp_grads, when the next backward starts, sets them to None up to 0.16.4 and zeroes
// them in place from 0.16.5 (set_to_none False), and the Trainer's model.zero_grad() after the step
// reaches DeepSpeedEngine.zero_grad, which sets them to None. Each bf16 gradient is added to the
// fp32 buffer through an fp32 copy of it (_update_hp_grad): in its gradient hook during backward
// with bf16.immediate_grad_update, else one after another once backward ends. Its default is
// constants.py's up to 0.17.0 (off up to 0.16.4, on from 0.16.5) and DeepSpeedBF16Config's from
// 0.17.1 (off); the config's key wins. Then the engine all-reduces the fp32 buffers
// (buffered_allreduce_fallback, buckets of MEMORY_OPT_ALLREDUCE_SIZE 5e8 elements: a tensor is
// appended, then the bucket is reduced once it holds more than 5e8, the rest at the end; so two
// groups share a bucket when the first alone holds at most 5e8): a bucket of one tensor is reduced
// through a bf16 copy (communication_data_type defaults to bf16), one of several through their fp32
// concatenation and its bf16 copy. The Trainer's own optimizer has two groups (the names without
// bias and norm patterns, get_decay_parameter_names, then the others); a config's optimizer is
// built from one. A foreach AdamW step (foreach_step) adds _foreach_sqrt's copy of a group's
// exp_avg_sq partition; FusedAdam, FusedLion and fused AdamW add nothing. Not charged: from 0.16.5,
// with gradient accumulation, autograd's accumulation into the zeroed gradients holds a second
// bf16 copy of one gradient at a time (at most 2 bytes x the largest parameter, under the fp32
// gradient buffer's 4 x P).
bool bf16_optimizer(const TrainingConfig& t) {
  return t.zero == 0 && t.deepspeed_release != 0 && t.deepspeed_release < 1706 && t.precision.weights == DType::bf16;
}

// The step runs torch AdamW's foreach path, whose _foreach_sqrt copies each group's exp_avg_sq
// partition: the config's torch_adam without params.fused, or the Trainer's own AdamW under
// transformers 4. The Trainer's default optim is adamw_torch (torch.optim.AdamW, foreach=None:
// foreach on CUDA), or adamw_hf in older transformers (a per-tensor loop whose sqrt makes the same
// copy), and adamw_torch_fused only with torch 2.8 or later (training_args.py default_optim).
// transformers 5 came after torch 2.9, so under --transformers-version 5 the Trainer's AdamW is
// taken as fused (no copy), as the FSDP2 path takes it; under 4 (most of DeepSpeed 0.15.0 to
// 0.17.5's life, before torch 2.8.0 of 2025-08-06) as foreach: high by that copy on torch 2.8 or
// later (the assumption line says so).
bool foreach_step(const TrainingConfig& t) {
  return settings(t).foreach_step || (!settings(t).config_optimizer && t.optimizer == OptimizerKind::adamw &&
                                      t.transformers_version == TransformersVersion::v4);
}

bool immediate_grad_update(const TrainingConfig& t) {
  if (const auto given = settings(t).immediate_grad_update) return *given;
  return t.deepspeed_release >= 1605 && t.deepspeed_release <= 1700;
}

// The Trainer's get_decay_parameter_names: no weight decay for names matching bias, layernorm,
// rmsnorm, a "norm" component or a "_norm" suffix of a component (lower-cased).
bool no_decay(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (name.find("bias") != std::string::npos || name.find("layernorm") != std::string::npos ||
      name.find("rmsnorm") != std::string::npos) {
    return true;
  }
  const std::string padded = "." + name + ".";
  return padded.find(".norm.") != std::string::npos || padded.find("_norm.") != std::string::npos;
}

// The flat groups' element counts, each padded to a multiple of 2 x dp (empty groups left out).
std::vector<std::uint64_t> bf16_groups(const EvalContext& c, const StageReport& st) {
  const auto align = static_cast<std::uint64_t>(2 * c.layout.config.dp * c.layout.config.cp);
  const std::uint64_t trained = st.trainable.non_expert.params.value() + st.trainable.expert.params.value();
  std::uint64_t others = 0;
  if (!settings(c.t).config_optimizer) {
    const auto add = [&](const std::vector<Tensor>& tensors, std::int64_t times) {
      if (times <= 0) return;
      each_hf_parameter(tensors, fused_experts(c.t), [&](const Tensor& first, std::int64_t numel, std::int64_t params, bool trains, bool) {
        if (!trains || !no_decay(first.name)) return;
        others += checked_mul(checked_mul(static_cast<std::uint64_t>(numel), static_cast<std::uint64_t>(params), "no-decay"),
                              static_cast<std::uint64_t>(times), "no-decay");
      });
    };
    const auto& cm = c.cm;
    for (std::size_t k = 0; k < kLayerClasses; ++k) add(cm.layer[k], cm.layers_in(k, 0, c.model.num_layers));
    add(cm.embedding, 1);
    add(cm.head, 1);
  }
  std::vector<std::uint64_t> groups;
  for (const std::uint64_t n : {trained - others, others}) {
    if (n > 0) groups.push_back(checked_mul(ceil_div(n, align), align, "flat group"));
  }
  return groups;
}

std::uint64_t sum_of(const std::vector<std::uint64_t>& v) {
  std::uint64_t s = 0;
  for (const auto n : v) s += n;
  return s;
}

// With immediate_grad_update, the fp32 copy of one gradient in its hook, beside the backward's
// activations: the largest trainable parameter's.
Bytes hook_copy(const EvalContext& c) {
  if (!bf16_optimizer(c.t) || !immediate_grad_update(c.t)) return Bytes{};
  return Bytes(checked_mul(static_cast<std::uint64_t>(param_stats(c, 0).largest_trainable), 4, "fp32 gradient"));
}

// From 0.16.5 clear_lp_grads zeroes the bf16 gradients instead of freeing them, so from the second
// micro-batch of a step autograd adds each new gradient into the zeroed one in place: the new
// gradient (at most the largest trainable parameter's, bf16) is alive beside param.grad.
Bytes accumulation_copy(const EvalContext& c) {
  if (!bf16_optimizer(c.t) || c.t.deepspeed_release < 1605 || c.microbatches.value_or(1) <= 1) return Bytes{};
  return Bytes(checked_mul(static_cast<std::uint64_t>(param_stats(c, 0).largest_trainable), 2, "bf16 gradient"));
}

// The backward's transients beside the activations.
Bytes backward_copies(const EvalContext& c) { return hook_copy(c) + accumulation_copy(c); }

// The largest temporary after backward: the all-reduce's bucket copies, the fp32 copy of one
// gradient (without immediate_grad_update) or the foreach step's copy of a partition's exp_avg_sq.
Bytes bf16_optimizer_step(const EvalContext& c, const StageReport& st) {
  if (!bf16_optimizer(c.t)) return Bytes{};
  constexpr std::uint64_t kBucket = 500'000'000;  // engine.py MEMORY_OPT_ALLREDUCE_SIZE
  const auto groups = bf16_groups(c, st);
  std::uint64_t peak = 0, bucket = 0, tensors = 0;
  const auto reduce = [&] {
    if (tensors == 0) return;
    peak = std::max(peak, checked_mul(bucket, tensors == 1 ? 2 : 6, "all-reduce bucket"));
    bucket = tensors = 0;
  };
  for (const auto n : groups) {
    bucket += n;
    ++tensors;
    if (bucket > kBucket) reduce();
  }
  reduce();
  if (!immediate_grad_update(c.t)) {
    peak = std::max(peak, checked_mul(static_cast<std::uint64_t>(param_stats(c, 0).largest_trainable), 4, "fp32 gradient"));
  }
  if (foreach_step(c.t) && !groups.empty()) {
    const auto dp = static_cast<std::uint64_t>(c.layout.config.dp * c.layout.config.cp);
    peak = std::max(peak, checked_mul(*std::max_element(groups.begin(), groups.end()) / dp, 4, "foreach step"));
  }
  return Bytes(peak);
}

// Without ZeRO (stage 0) DeepSpeed from 0.17.6 (889f0ead2, "Enable non-ZeRO mode") wraps the
// optimizer for bf16 as for fp16 (engine.py _do_optimizer_sanity_check: DDP_BFLOAT16 ->
// _configure_fp16_optimizer): fp32 master copies of the trainable parameters with the states on
// them, and 16-bit gradients in param.grad. Its step makes fp32 gradients for the master copies
// while the 16-bit ones are still held (the gradients column):
// - FP16_UnfusedOptimizer (any optimizer but DeepSpeed's FusedAdam: the Trainer's own, the config's
//   Lion or torch_adam) converts each gradient (fp16_param.grad.to(fp32)) and keeps them all
//   through optimizer.step: 4 bytes per trainable element (the Trainer's fused AdamW, FusedLion),
//   8 under torch_adam without params.fused (torch AdamW's foreach step adds _foreach_sqrt's copy
//   of exp_avg_sq);
// - FP16_Optimizer (the config's Adam/AdamW, FusedAdam) flattens each group's converted gradients:
//   the conversions and the flat copy exist together, 8 bytes per element of the group (the
//   Trainer hands DeepSpeed one group of the trainable parameters then).
Bytes stage0_step(const EvalContext& c, const StageReport& st) {
  if (c.t.zero != 0) return Bytes{};
  if (bf16_optimizer(c.t)) return bf16_optimizer_step(c, st);
  const std::uint64_t trained = st.trainable.non_expert.params.value() + st.trainable.expert.params.value();
  return Bytes(checked_mul(trained, static_cast<std::uint64_t>(settings(c.t).stage0_step_bytes), "stage 0 step"));
}

Bytes step_temporaries(const EvalContext& c, const StageReport& st) { return adafactor_step(c, st) + stage0_step(c, st); }

// BF16_Optimizer's states, recorded as ZeRO-1 records them with the padded flat groups standing
// for the trainable elements: the master copies and moments on each group's partition, F_g / dp
// (exact: F_g is a multiple of 2 x dp), and bf16 gradients of sum F_g. DeepSpeed's param.grad holds
// the unpadded gradients while its flat bf16 weights hold the padding (at most 2 x dp - 1 elements
// a group): the padding's bytes move from the weights to the gradients, the total is exact. Then
// the fp32 gradient buffer of every flat group.
void record_bf16_optimizer(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  TrainingConfig zero1 = c.t;
  zero1.zero = 1;
  const EvalContext c1{c.cm, c.model, c.profile, c.layout, zero1, c.attention, c.vocab, c.microbatches, c.detail, c.allowance,
                       c.cache};
  const auto groups = bf16_groups(c, st);
  StageReport padded = st;
  padded.trainable.non_expert = OptimizerCounts{};
  padded.trainable.non_expert.params = Count(sum_of(groups));
  padded.trainable.expert = OptimizerCounts{};
  kZeroStates.record(c1, padded, ledger);
  const Count flat(sum_of(groups));
  add_buffer(ledger, Category::gradients, flat, DType::fp32, 1, "fp32 gradient buffer (BF16_Optimizer)",
             fmt::format("{} trainable elements in {} flat group(s), each padded to 2 x dp, x fp32", flat.value(),
                         groups.size()));
  const Bytes hook = backward_copies(c);
  if (const Bytes step = bf16_optimizer_step(c, st); step > ledger.total(Category::activations) + hook) {
    ledger.add(Category::optimizer, step, [&] {
      return ledger_item("deepspeed", "BF16_Optimizer step temporaries (no ZeRO, DeepSpeed before 0.17.6)",
                         "the largest of: the all-reduce's bf16 bucket copy (and fp32 concatenation of several groups), "
                         "one gradient's fp32 copy, the foreach step's exp_avg_sq copy");
    });
  } else {
    const Count largest(static_cast<std::uint64_t>(param_stats(c, 0).largest_trainable));
    if (hook_copy(c).value() > 0) {
      add_buffer(ledger, Category::buffers, largest, DType::fp32, 1, "fp32 copy of one gradient (immediate_grad_update hook)",
                 fmt::format("largest trainable parameter {} x fp32, in its gradient hook during backward", largest.value()));
    }
    if (accumulation_copy(c).value() > 0) {
      add_buffer(ledger, Category::buffers, largest, DType::bf16, 1,
                 "new gradient added into the zeroed one (gradient accumulation, DeepSpeed 0.16.5 and later)",
                 fmt::format("largest trainable parameter {} x bf16, beside param.grad from the second micro-batch",
                             largest.value()));
    }
  }
}

void record_deepspeed(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  if (bf16_optimizer(c.t)) record_bf16_optimizer(c, st, ledger);
  else kZeroStates.record(c, st, ledger);
  // deepspeed_cost dropped the activations when the step is the peak.
  if (const Bytes step = adafactor_step(c, st); step.value() > 0 && step > ledger.total(Category::activations)) {
    ledger.add(Category::optimizer, step, [&] {
      return ledger_item("deepspeed", "Adafactor step temporaries",
                         "the flat fp32 partition's squared gradient and update (8 bytes per element)");
    });
  }
  if (const Bytes step = stage0_step(c, st);
      !bf16_optimizer(c.t) && step.value() > 0 && step > ledger.total(Category::activations)) {
    const bool eight = settings(c.t).stage0_step_bytes == 8;
    ledger.add(Category::optimizer, step, [&] {
      return ledger_item("deepspeed", "fp32 gradients for the master copies (optimizer step, no ZeRO)",
                         eight ? "the converted gradients and FusedAdam's flat copy of them (or torch AdamW's foreach "
                                 "sqrt temporary), 2 x trainable x fp32"
                               : "each gradient converted to fp32 (FP16_UnfusedOptimizer), trainable x fp32");
    });
  }
  if (c.t.finetune == Finetune::qlora) {
    // bitsandbytes MatMul4Bit (autograd/_functions.py) dequantises the whole weight to the compute
    // dtype for the forward GEMM and again for the input gradient; the copy lives for that GEMM.
    const Count largest(static_cast<std::uint64_t>(param_stats(c, 0).largest_nf4));
    add_buffer(ledger, Category::buffers, largest, c.t.activation_dtype, 1, "dequantised NF4 weight (bitsandbytes, transient)",
               fmt::format("largest NF4 weight {} x {} (MatMul4Bit dequantises it for each forward and input-gradient GEMM)",
                           largest.value(), name_of(c.t.activation_dtype)));
  }
  if (c.t.zero < 1) return;
  const DeepSpeedBuffers b = settings(c.t);
  const DeepSpeedSizes z = resolve_sizes(b, c.model.hidden);
  if (c.t.zero == 3) record_stage3(c, b, z, ledger);
  else record_stage12(c, st, b, z, ledger);
}

// The optimizer step is the peak when its temporaries (Adafactor's, or stage 0's fp32 gradients)
// outweigh the activations.
bool deepspeed_cost(const EvalContext& c, StageReport& st, Bytes activations) {
  kZeroStates.cost(c, st, activations);
  return step_temporaries(c, st) > activations + backward_copies(c);
}

void deepspeed_cache(const EvalContext& c, const StageReport& st, Bytes pct, Ledger& ledger) {
  kZeroStates.record_cache(c, st, pct, ledger);
}

}  // namespace

const StateModel kDeepSpeedStates{
    .prepare = deepspeed_prepare,
    .cost = deepspeed_cost,
    .record = record_deepspeed,
    .record_cache = deepspeed_cache,
};

}  // namespace moemem::detail
