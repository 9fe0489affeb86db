// The hf profile under --fsdp2: Hugging Face modeling code sharded by PyTorch FSDP2 as accelerate
// applies it (the Trainer, TRL and axolotl with fsdp_version 2 and mixed_precision bf16), and the
// dispatch between it and DeepSpeed's states (hf_deepspeed.cpp). Facts from huggingface/accelerate
// (v1.14.0 and later, commit 60b5c258 for the units) and torch.distributed.fsdp (fully_shard):
// - utils/fsdp_utils.py fsdp2_prepare_model: every decoder layer (the model's _no_split_modules,
//   TRANSFORMER_BASED_WRAP) is its own fully_shard unit with reshard_after_forward from the
//   plugin (default True for fsdp_version 2, utils/dataclasses.py); the input embedding is its own
//   unit; the tail [final norm, lm_head] is one unit with reshard_after_forward False; the root
//   holds what is left (no parameters in the supported models). With mixed precision every
//   trainable parameter is upcast to fp32 ("FSDP upcast of low precision parameters to fp32"),
//   frozen ones keep their dtype.
// - FullyShardedDataParallelPlugin.set_mixed_precision: MixedPrecisionPolicy(param_dtype=bf16,
//   reduce_dtype=bf16, output_dtype=bf16): layers run on bf16 all-gathered copies, gradients are
//   reduce-scattered in bf16 and land as fp32 shards of the fp32 parameters.
// - The Trainer runs every micro-batch but the last of a step under accelerator.no_sync, which
//   for FSDP2 is set_requires_gradient_sync(False) (accelerator.py no_sync). FSDP2's
//   post_backward then keeps each unsharded gradient on the unsharded parameter
//   (FSDPParam.to_accumulated_grad_if_needed converts only when reduce_dtype differs from
//   param_dtype, both bf16 here) until the last micro-batch reduce-scatters it: with gradient
//   accumulation a device holds a bf16 gradient of every trainable parameter, unsharded.
// - The optimizer: transformers' default optim is adamw_torch_fused from torch 2.8
//   (training_args.py default_optim), whose step allocates nothing of parameter size; its moments
//   live on the fp32 shards, so there is no separate master copy.
// - --fsdp-offload-params (accelerate's fsdp_offload_params: fully_shard's
//   CPUOffloadPolicy(pin_memory=True)): the sharded parameters live in pinned host memory, FSDP2
//   copies each shard to the GPU for its all-gather (FSDPParam.all_gather_inputs) and the
//   reduce-scattered gradient back to a pinned host shard (foreach_reduce: non-blocking D2H copy);
//   the optimizer is built on the host parameters, so its states and its step are on the CPU. The
//   GPU keeps the gathered units, the activations and, under no_sync, the unsharded gradients.
// - --fsdp1 (accelerate's fsdp_version 1, Accelerator.prepare_model: FullyShardedDataParallel with
//   the plugin's auto_wrap_policy, sharding_strategy and MixedPrecision(param_dtype=bf16,
//   reduce_dtype=bf16)): each decoder layer a unit, the root unit holding the rest (embedding,
//   final norm, lm_head); accelerate upcasts every FlatParameter to fp32 under mixed precision
//   ("mimic DeepSpeed's casting"). torch.distributed.fsdp._runtime_utils: _post_forward_reshard
//   never frees the root's unsharded parameters after forward ("not state._is_root"), and frees the
//   others only under FULL_SHARD (SHARD_GRAD_OP keeps every layer gathered until its backward);
//   _post_backward_hook reduce-scatters the bf16 unsharded gradient and _cast_grad_to_param_dtype
//   makes the shard fp32 (_saved_grad_shard); outside sync (no_sync) it returns early, leaving the
//   unsharded bf16 gradient on the FlatParameter. So the same peaks as FSDP2 with the embedding in
//   the never-resharded unit. CPUOffload(offload_params=True) keeps the shards and gradients on the
//   host; each FlatParameter's padding to a multiple of dp (at most dp - 1 elements) is left out.
#include <algorithm>

#include <fmt/format.h>

#include "analyze/internal.hpp"
#include "profiles/hf.hpp"

namespace moemem::detail {

namespace {

Count params_of(const Share& s) { return s.params.non_expert + s.params.expert; }
Count trainable_of(const Share& s) { return s.trainable.non_expert.params + s.trainable.expert.params; }

// FSDP2 shards every parameter on dim 0 (fully_shard's default Shard(0); accelerate's
// fsdp2_prepare_model passes no shard_placement_fn): FSDPParam._init_sharded_param pads each rank's
// shard to chunks[0], ceil(dim0 / dp) rows, and the all-gather writes world x that padded shard
// into the unsharded parameter's storage (init_all_gather_outputs), as the reduce-scatter reads it.
// So a parameter of dim0 rows costs ceil(dim0 / dp) rows on the worst rank (rank 0) and
// dp x ceil(dim0 / dp) rows gathered: exact for most dense weights (dims that dp divides), but a
// 3-D experts parameter [E, ...] (transformers 5, gpt-oss) under dp > E keeps a whole expert per
// rank, and gathers dp / E times its size. dim0 is E for a 3-D experts parameter, else the
// output features of the weight (its parts' rows together; a vector's length).
struct DimZero {
  Count trainable, frozen;               // elements of the worst rank's shards
  Count gathered, gathered_trainable;    // elements of the all-gather's storage (dp x the padded shard)
};
DimZero dim0_padded(const std::vector<Tensor>& tensors, std::int64_t times, bool fused, std::int64_t dp) {
  DimZero d;
  if (times <= 0) return d;
  const auto world = static_cast<std::uint64_t>(dp);
  each_hf_parameter(tensors, fused, [&](const Tensor& first, std::int64_t numel, std::int64_t params, bool trains, bool) {
    const auto n = static_cast<std::uint64_t>(numel);
    if (n == 0) return;
    const bool three_d = first.is_routed_expert && (fused || first.name.find('*') == std::string::npos);
    const auto cols = static_cast<std::uint64_t>(std::max<std::int64_t>(first.cols, 1));
    std::uint64_t dim0 = three_d ? static_cast<std::uint64_t>(first.copies) : (n % cols == 0 ? n / cols : n);
    if (dim0 == 0 || n % dim0 != 0) dim0 = n;
    const std::uint64_t copies = checked_mul(static_cast<std::uint64_t>(params), static_cast<std::uint64_t>(times), "fsdp");
    const std::uint64_t shard = checked_mul(checked_mul(ceil_div(dim0, world), n / dim0, "fsdp"), copies, "fsdp");
    const Count gathered(checked_mul(shard, world, "fsdp"));
    (trains ? d.trainable : d.frozen) += Count(shard);
    d.gathered += gathered;
    if (trains) d.gathered_trainable += gathered;
  });
  return d;
}

// The units: the tail (final norm and lm_head; with tied embeddings the embedding stands in for
// lm_head in the tail) and one decoder layer, the largest of its classes (a layer's routed
// experts are in its unit: Hugging Face's MoE blocks hold them as submodules). Under FSDP1 the
// root unit is the embedding, final norm and lm_head together (what no decoder-layer unit holds).
// Under FSDP2 the units' gathered sizes and the shards are dim-0 padded (dim0_padded).
void hf_fsdp2_prepare(const EvalContext& c, const Shares& sh, StageReport& st) {
  FsdpDetail f;
  const bool tail_embedding = c.model.tie_embeddings || c.t.accelerate_fsdp1;
  if (!c.t.accelerate_fsdp1) {
    const bool fused = c.t.transformers_version == TransformersVersion::v5;
    const std::int64_t dp = c.layout.config.dp;
    const auto& cm = c.cm;
    DimZero all;
    const auto add = [&](const DimZero& d) {
      all.trainable += d.trainable;
      all.frozen += d.frozen;
    };
    const DimZero head = dim0_padded(cm.head, 1, fused, dp), emb = dim0_padded(cm.embedding, 1, fused, dp);
    add(head);
    add(emb);
    f.root_params = head.gathered;
    f.root_trainable = head.gathered_trainable;
    if (tail_embedding) {
      f.root_params += emb.gathered;
      f.root_trainable += emb.gathered_trainable;
    }
    for (std::size_t k = 0; k < kLayerClasses; ++k) {
      const std::int64_t n = cm.layers_in(k, 0, c.model.num_layers);
      if (n <= 0) continue;
      add(dim0_padded(cm.layer[k], n, fused, dp));
      const DimZero one = dim0_padded(cm.layer[k], 1, fused, dp);
      if (one.gathered > f.block_params) {
        f.block_params = one.gathered;
        f.block_trainable = one.gathered_trainable;
      }
    }
    f.shard_params = all.trainable;
    f.frozen_shard_params = all.frozen;
    st.fsdp = f;
    return;
  }
  f.root_params = params_of(sh.head);
  f.root_trainable = trainable_of(sh.head);
  if (tail_embedding) {
    f.root_params += params_of(sh.emb);
    f.root_trainable += trainable_of(sh.emb);
  }
  std::size_t largest = 0;
  for (std::size_t k = 1; k < kLayerClasses; ++k) {
    if (params_of(sh.layer[k]) > params_of(sh.layer[largest])) largest = k;
  }
  f.block_params = params_of(sh.layer[largest]);
  f.block_trainable = trainable_of(sh.layer[largest]);
  st.fsdp = f;
}

Count all_params(const StageReport& st) { return st.params.non_expert + st.params.expert; }
OptimizerCounts all_trainable(const StageReport& st) {
  OptimizerCounts n = st.trainable.non_expert;
  n += st.trainable.expert;
  return n;
}
Count shard_of(Count n, std::int64_t dp) { return Count(ceil_div(n.value(), static_cast<std::uint64_t>(dp))); }

// What the step keeps per shard: the optimizer's states without a master copy (the fp32 shard
// is the parameter the optimizer updates).
Bytes moment_bytes(const EvalContext& c, const OptimizerCounts& shard) {
  const auto states = optimizer_states(c.t.finetuning(), c.t.precision, shard);
  Bytes b;
  for (std::size_t i = 1; i < states.size(); ++i) b += bytes_of(states[i].elements, states[i].dtype);
  return b;
}

// The frozen parameters' shard: FSDP2's dim-0 padded one, or FSDP1's even split.
Count frozen_shard(const EvalContext& c, const StageReport& st) {
  if (!c.t.accelerate_fsdp1) return st.fsdp->frozen_shard_params;
  return shard_of(Count(all_params(st).value() - all_trainable(st).params.value()), c.layout.config.dp);
}

// The optimizer's counts on the trainable shard: the states live on the (padded) fp32 shard.
OptimizerCounts trainable_shard(const EvalContext& c, const StageReport& st) {
  OptimizerCounts n = all_trainable(st).sharded(c.layout.config.dp);
  n.params = st.fsdp->shard_params;
  return n;
}

// Parameter shards: fp32 for what trains (accelerate's upcast), the weights' dtype for the rest.
Bytes shard_bytes(const EvalContext& c, const StageReport& st) {
  return bytes_of(st.fsdp->shard_params, DType::fp32) + bytes_of(frozen_shard(c, st), c.t.precision.weights);
}

// Gradient accumulation under no_sync: a bf16 gradient of every trainable parameter, unsharded.
Bytes held_grads(const EvalContext& c, const StageReport& st) {
  if (c.microbatches.value_or(1) <= 1) return Bytes{};
  return bytes_of(all_trainable(st).params, c.t.activation_dtype);
}

// Layers gathered at backward: the layer whose backward runs and the one FSDP2 prefetches
// (backward prefetch of the next unit in reverse forward order); every layer when none is
// resharded after forward. The tail is never resharded after forward.
std::int64_t layers_gathered(const EvalContext& c, const StageReport& st) {
  if (c.t.reshard == ReshardPolicy::never) return st.layers.num_layers;
  return std::min<std::int64_t>(2, st.layers.num_layers);
}

// Peak at the start of backward (activations, the loss's gradients, the gathered units and, with
// accumulation, the unsharded gradients) or at the optimizer step (shards, fp32 gradient shards
// and moments), whichever is higher.
bool hf_fsdp2_cost(const EvalContext& c, StageReport& st, Bytes activations) {
  FsdpDetail& f = *st.fsdp;
  const std::int64_t dp = c.layout.config.dp;
  const DType w = c.t.activation_dtype;
  if (c.t.accelerate_fsdp1) f.shard_params = shard_of(all_trainable(st).params, dp);
  f.blocks_kept = layers_gathered(c, st);
  f.root_unsharded = bytes_of(f.root_params, w);
  f.blocks_unsharded = times(bytes_of(f.block_params, w), f.blocks_kept, "fsdp");
  // On the GPU unless offloaded (then the step runs on the CPU and backward is the GPU's peak).
  const bool offload = c.t.fsdp_offload_params;
  const Bytes states = offload ? Bytes{} : shard_bytes(c, st) + moment_bytes(c, trainable_shard(c, st));
  const Bytes backward = states + f.root_unsharded + f.blocks_unsharded + held_grads(c, st) + activations;
  f.optimizer_step_peak = !offload && states + bytes_of(f.shard_params, DType::fp32) > backward;
  if (dp > 1) {
    // The all-gather outputs (copied out into the parameters) and the bf16 reduce-scatter inputs
    // and outputs are allocated on FSDP2's own streams, whose cached blocks the default stream
    // cannot reuse: two layers' all-gathers and two layers' and the tail's reduce-scatters; with
    // offload also a layer's fp32 shard copied to the GPU for its all-gather.
    f.all_gather_cache = std::max(f.root_unsharded, times(bytes_of(f.block_params, w), 2, "fsdp"));
    // The shard copied up for an all-gather: fp32 under FSDP2, already cast to bf16 under FSDP1
    // (_use_low_precision_shard copies the host shard into the low-precision _mp_shard).
    if (offload) f.all_gather_cache += bytes_of(shard_of(f.block_params, dp), c.t.accelerate_fsdp1 ? w : DType::fp32);
    const Count reduced = f.root_trainable + Count(checked_mul(f.block_trainable.value(), 2, "fsdp"));
    f.reduce_scatter_cache = bytes_of(reduced, w) + bytes_of(shard_of(reduced, dp), w);
  }
  return f.optimizer_step_peak;
}

void record_hf_fsdp2(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  const FsdpDetail& f = *st.fsdp;
  const std::int64_t dp = c.layout.config.dp;
  const DType w = c.t.activation_dtype;
  const OptimizerCounts trains = all_trainable(st);
  const Count frozen(all_params(st).value() - trains.params.value());
  // --fsdp-offload-params: shards, gradient shards and states in pinned host memory.
  const bool offload = c.t.fsdp_offload_params;
  const char* where = offload ? " (CPU memory)" : "";
  const char* split = c.t.accelerate_fsdp1 ? "ceil({} / dp {})" : "each parameter's ceil(dim0 / dp {1}) rows, of {0}";
  ledger.add(offload ? Category::host : Category::weights, bytes_of(f.shard_params, DType::fp32), [&] {
    return ledger_item("fsdp", fmt::format("fp32 shard of the trainable parameters{}", where),
                       fmt::format("{} x fp32 (accelerate upcasts what trains)", fmt::format(fmt::runtime(split), trains.params.value(), dp)),
                       f.shard_params, DType::fp32);
  });
  if (frozen.value() > 0) {
    const Count n = frozen_shard(c, st);
    ledger.add(offload ? Category::host : Category::weights, bytes_of(n, c.t.precision.weights), [&] {
      return ledger_item("fsdp", fmt::format("shard of the frozen parameters{}", where),
                         fmt::format(fmt::runtime(split), frozen.value(), dp), n, c.t.precision.weights);
    });
  }
  const OptimizerCounts shard = trainable_shard(c, st);
  const auto states = optimizer_states(c.t.finetuning(), c.t.precision, shard);
  for (std::size_t i = 1; i < states.size(); ++i) {  // [0] is the master copy, which FSDP2 does not keep
    ledger.add(offload ? Category::host : Category::optimizer, bytes_of(states[i].elements, states[i].dtype), [&] {
      return ledger_item("fsdp", fmt::format("{}{}", states[i].name, where),
                         fmt::format("shard of {} trainable", trains.params.value()), states[i].elements, states[i].dtype);
    });
  }
  if (offload) {
    ledger.add(Category::host, bytes_of(f.shard_params, DType::fp32), [&] {
      return ledger_item("fsdp", "fp32 gradient shard (CPU memory, pinned)", "as the trainable shard", f.shard_params, DType::fp32);
    });
  }
  if (f.optimizer_step_peak) {
    ledger.add(Category::gradients, bytes_of(f.shard_params, DType::fp32), [&] {
      return ledger_item("fsdp", "fp32 gradient shard", "as the trainable shard (optimizer step)", f.shard_params, DType::fp32);
    });
    return;
  }
  if (const Bytes g = held_grads(c, st); g.value() > 0) {
    ledger.add(Category::gradients, g, [&] {
      return ledger_item("fsdp", "unsharded gradients held across micro-batches",
                         fmt::format("{} trainable x {} ({} micro-batches: the Trainer's no_sync keeps them until the last)",
                                     trains.params.value(), name_of(w), *c.microbatches),
                         trains.params, w);
    });
  }
  ledger.add(Category::weights, f.root_unsharded, [&] {
    return c.t.accelerate_fsdp1
               ? ledger_item("fsdp", "root unit gathered (embedding, final norm, lm_head)",
                             fmt::format("{} parameters x {} (FSDP1 never frees the root after forward)",
                                         f.root_params.value(), name_of(w)),
                             f.root_params, w)
               : ledger_item("fsdp", "tail gathered (final norm, lm_head)",
                             fmt::format("{} parameters x {} (reshard_after_forward False)", f.root_params.value(), name_of(w)),
                             f.root_params, w);
  });
  ledger.add(Category::weights, f.blocks_unsharded, [&] {
    return ledger_item("fsdp", "decoder layers gathered",
                       fmt::format("{} layers x {} {} x {} ({})", f.blocks_kept, f.block_params.value(),
                                   c.t.accelerate_fsdp1 ? "parameters" : "elements (dp x each dim-0 padded shard)", name_of(w),
                                   c.t.reshard == ReshardPolicy::never ? (c.t.accelerate_fsdp1 ? "SHARD_GRAD_OP: all of them" : "reshard-after-forward never: all of them")
                                                                       : "the layer in backward and the one prefetched"),
                       f.block_params, w, f.blocks_kept);
  });
}

void hf_fsdp2_cache(const EvalContext& c, const StageReport& st, Bytes pct, Ledger& ledger) {
  const FsdpDetail& f = *st.fsdp;
  if (f.all_gather_cache.value() > 0) {
    ledger.add(Category::fragmentation, f.all_gather_cache, [] {
      return ledger_item("fsdp", "all-gather stream cache", "max(tail, two decoder layers' all-gather outputs)");
    });
  }
  if (f.reduce_scatter_cache.value() > 0) {
    ledger.add(Category::fragmentation, f.reduce_scatter_cache, [] {
      return ledger_item("fsdp", "reduce-scatter stream cache", "bf16 reduce-scatter inputs and outputs of the tail and two layers");
    });
  }
  kZeroStates.record_cache(c, st, pct, ledger);  // the percentage and the loss's block, as ZeRO's
}

// The dispatch: FSDP under --fsdp1 or --fsdp2, plain DDP under --ddp, DeepSpeed's ZeRO otherwise.
void hf_prepare(const EvalContext& c, const Shares& sh, StageReport& st) {
  if (c.t.accelerate_fsdp()) hf_fsdp2_prepare(c, sh, st);
  else if (c.t.hf_ddp) kHfDdpStates.prepare(c, sh, st);
  else kDeepSpeedStates.prepare(c, sh, st);
}
bool hf_cost(const EvalContext& c, StageReport& st, Bytes activations) {
  if (c.t.hf_ddp) return kHfDdpStates.cost(c, st, activations);
  return c.t.accelerate_fsdp() ? hf_fsdp2_cost(c, st, activations) : kDeepSpeedStates.cost(c, st, activations);
}
void hf_record(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  if (c.t.accelerate_fsdp()) record_hf_fsdp2(c, st, ledger);
  else if (c.t.hf_ddp) kHfDdpStates.record(c, st, ledger);
  else kDeepSpeedStates.record(c, st, ledger);
}
void hf_record_cache(const EvalContext& c, const StageReport& st, Bytes pct, Ledger& ledger) {
  if (c.t.hf_ddp) kHfDdpStates.record_cache(c, st, pct, ledger);
  else if (c.t.accelerate_fsdp()) hf_fsdp2_cache(c, st, pct, ledger);
  else kDeepSpeedStates.record_cache(c, st, pct, ledger);
}

}  // namespace

const StateModel kHfStates{
    .prepare = hf_prepare,
    .cost = hf_cost,
    .record = hf_record,
    .record_cache = hf_record_cache,
};

}  // namespace moemem::detail
