// The hf profile under --ddp: the Hugging Face Trainer (accelerate) without DeepSpeed or FSDP, on
// a model loaded in bf16: PyTorch DDP over dp, or one process at dp 1. Facts:
// - accelerate's prepare_model for native AMP wraps forward in torch.autocast(bf16) and leaves the
//   parameters in their loaded dtype; the Trainer's default optimizer (adamw_torch_fused from torch
//   2.8, transformers training_args.py) creates exp_avg and exp_avg_sq with zeros_like(param):
//   bf16 moments for bf16 parameters, no master copy, and gradients in the parameters' dtype.
// - PEFT's get_peft_model(autocast_adapter_dtype=True, the default) upcasts bf16 adapters to fp32
//   (peft/tuners/tuners_utils.py _cast_adapter_dtype): fp32 adapter weights, gradients and moments.
// - zero_grad(set_to_none=True) (the Trainer's default) leaves no gradient at the start of
//   backward unless a previous micro-batch of the step left its own (gradient accumulation).
// - torch.nn.parallel.DistributedDataParallel with gradient_as_bucket_view False (its default;
//   the Trainer and accelerate's DistributedDataParallelKwargs keep it) allocates flat bucket
//   tensors for every gradient at construction (reducer.cpp initialize_buckets) and copies the
//   gradients into them for the all-reduce: a second copy of every trainable gradient when dp > 1.
// - The Trainer's optim="adamw_bnb_8bit" (bitsandbytes AdamW8bit) keeps two uint8 states with an
//   fp32 absmax per 256-element block, fp32 states for tensors under 4096 elements
//   (optim/optimizer.py Optimizer2State.init_state), stepped in place per tensor by a fused kernel;
//   optim="adafactor" (transformers optimization.py Adafactor, beta1 None) keeps fp32 row and
//   column second moments of each 2-D tensor (a full one of a 1-D tensor), and steps one tensor at
//   a time through fp32 temporaries: the gradient and the parameter upcast from bf16, the squared
//   gradient and the update built from it, alive together: 16 bytes per element of the largest
//   bf16 tensor (8 for an fp32 one, which needs no upcast copies).
#include <algorithm>

#include <fmt/format.h>

#include "analyze/internal.hpp"
#include "profiles/hf.hpp"

namespace moemem::detail {

namespace {

struct DdpCounts {
  Count all, trains;
  DType trained;            // the dtype of what trains: fp32 for PEFT's adapters, the weights' for full training
  OptimizerCounts optimizer;  // what trains, as the optimizers count it (non-expert and expert together)
  Count embedding32;        // 8-bit Adam: the nn.Embedding weight, stepped with 32-bit states
};

// The Trainer's 8-bit override (trainer.py create_optimizer: for a bitsandbytes optimizer built
// with optim_bits 8, as adamw_bnb_8bit is, GlobalOptimManager.register_module_override(module,
// "weight", {"optim_bits": 32}) for every nn.Embedding): bitsandbytes then keeps that weight's
// state1 and state2 in fp32, with no block scales.
Count embedding_with_32bit_states(const EvalContext& c) {
  if (c.t.optimizer != OptimizerKind::adam8bit) return Count{};
  std::uint64_t e = 0;
  for (const Tensor& t : c.cm.embedding) {
    if (t.role == Role::embedding && t.trainable) e += t.params().value();
  }
  return Count(e);
}

DdpCounts counts_of(const EvalContext& c, const StageReport& st) {
  OptimizerCounts n = st.trainable.non_expert;
  n += st.trainable.expert;
  const Count trains = n.params;
  const Count e = embedding_with_32bit_states(c);
  if (e.value() > 0) {
    // Out of the states optimizer_states lists: its 256-element blocks, or the fp32 states of
    // tensors below min_8bit_size (4096) for a toy vocabulary.
    n.params = Count(n.params.value() - e.value());
    if (e.value() < 4096) n.small = Count(n.small.value() - e.value());
    else n.blocks = Count(n.blocks.value() - ceil_div(e.value(), std::uint64_t{256}));
  }
  return {st.params.non_expert + st.params.expert, trains,
          c.t.finetune == Finetune::full ? c.t.precision.weights : DType::fp32, n, e};
}

Bytes embedding_state_bytes(const DdpCounts& n) { return times(bytes_of(n.embedding32, DType::fp32), 2, "ddp"); }

Bytes weight_bytes(const EvalContext& c, const DdpCounts& n) {
  return bytes_of(Count(n.all.value() - n.trains.value()), c.t.precision.weights) + bytes_of(n.trains, n.trained);
}
// torch AdamW: two moments in the parameter's dtype; the other optimizers' states as
// optimizer_states lists them, without the master copy DDP does not keep.
Bytes moment_bytes(const EvalContext& c, const DdpCounts& n) {
  if (c.t.optimizer == OptimizerKind::adamw) return times(bytes_of(n.trains, n.trained), 2, "ddp");
  Bytes b = embedding_state_bytes(n);
  for (const OptimizerState& s : optimizer_states(c.t, c.t.precision, n.optimizer)) {
    if (s.name != "master weights") b += bytes_of(s.elements, s.dtype);
  }
  return b;
}

// Adafactor's step temporaries: 16 bytes per element of the largest bf16 trainable parameter, 8
// of an fp32 one (module comment). A parameter is a checkpoint tensor: the parts moemem splits a
// fused one into (gate and up of gpt-oss's gate_up_proj) together, a routed entry's experts one
// parameter each or all together as HF's modeling code holds them (each_hf_parameter).
Bytes adafactor_step_bytes(const EvalContext& c, const DdpCounts& n) {
  if (c.t.optimizer != OptimizerKind::adafactor) return Bytes{};
  std::uint64_t largest = 0;
  const auto scan = [&](const std::vector<Tensor>& ts) {
    each_hf_parameter(ts, c.t.transformers_version == TransformersVersion::v5, [&](const Tensor&, std::int64_t numel, std::int64_t, bool trains, bool) {
      if (trains) largest = std::max(largest, static_cast<std::uint64_t>(numel));
    });
  };
  for (const std::size_t k : c.cm.classes) scan(c.cm.layer[k]);
  scan(c.cm.embedding);
  scan(c.cm.head);
  return Bytes(checked_mul(largest, n.trained == DType::fp32 ? 8 : 16, "adafactor step"));
}
Bytes bucket_bytes(const EvalContext& c, const DdpCounts& n) {
  return c.layout.config.dp > 1 ? bytes_of(n.trains, n.trained) : Bytes{};
}
bool accumulates(const EvalContext& c) { return c.microbatches.value_or(1) > 1; }

void ddp_prepare(const EvalContext&, const Shares&, StageReport& st) { st.fsdp = FsdpDetail{}; }

// Peak at the start of backward (weights, moments, buckets, activations and, with accumulation,
// the gradients) or at the optimizer step (weights, moments, buckets, gradients), the higher.
bool ddp_cost(const EvalContext& c, StageReport& st, Bytes activations) {
  const DdpCounts n = counts_of(c, st);
  const Bytes fixed = weight_bytes(c, n) + moment_bytes(c, n) + bucket_bytes(c, n);
  const Bytes grads = bytes_of(n.trains, n.trained);
  const Bytes backward = fixed + activations + (accumulates(c) ? grads : Bytes{});
  st.fsdp->optimizer_step_peak = fixed + grads + adafactor_step_bytes(c, n) > backward;
  return st.fsdp->optimizer_step_peak;
}

void ddp_record(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  const DdpCounts n = counts_of(c, st);
  const Count frozen(n.all.value() - n.trains.value());
  const DType w = c.t.precision.weights;
  if (frozen.value() > 0) {
    ledger.add(Category::weights, bytes_of(frozen, w), [&] {
      return ledger_item("ddp", "frozen parameters", fmt::format("{} x {}", frozen.value(), name_of(w)), frozen, w);
    });
  }
  const char* what = c.t.finetune == Finetune::full ? "parameters" : "adapters (PEFT upcasts them to fp32)";
  ledger.add(Category::weights, bytes_of(n.trains, n.trained), [&] {
    return ledger_item("ddp", what, fmt::format("{} x {}", n.trains.value(), name_of(n.trained)), n.trains, n.trained);
  });
  if (c.t.optimizer == OptimizerKind::adamw) {
    for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
      ledger.add(Category::optimizer, bytes_of(n.trains, n.trained), [&] {
        return ledger_item("ddp", moment, fmt::format("{} x {} (torch AdamW: the parameter's dtype)", n.trains.value(),
                                                      name_of(n.trained)),
                           n.trains, n.trained);
      });
    }
  } else {
    for (const OptimizerState& s : optimizer_states(c.t, c.t.precision, n.optimizer)) {
      if (s.name == "master weights" || s.elements.value() == 0) continue;
      ledger.add(Category::optimizer, bytes_of(s.elements, s.dtype), [&] {
        return ledger_item("ddp", std::string(s.name), fmt::format("{} x {} ({})", s.elements.value(), name_of(s.dtype), s.source),
                           s.elements, s.dtype);
      });
    }
    if (n.embedding32.value() > 0) {
      ledger.add(Category::optimizer, embedding_state_bytes(n), [&] {
        return ledger_item("ddp", "state1 + state2 of the embedding (fp32)",
                           fmt::format("2 x {} x fp32 (the Trainer's optim_bits 32 override for nn.Embedding)",
                                       n.embedding32.value()),
                           Count(2 * n.embedding32.value()), DType::fp32);
      });
    }
  }
  if (st.fsdp->optimizer_step_peak) {
    if (const Bytes step = adafactor_step_bytes(c, n); step.value() > 0) {
      ledger.add(Category::optimizer, step, [&] {
        return ledger_item("ddp", "Adafactor step temporaries",
                           fmt::format("the largest trainable tensor's fp32 gradient, parameter, squared gradient and "
                                       "update ({} bytes per element)",
                                       n.trained == DType::fp32 ? 8 : 16));
      });
    }
  }
  if (c.layout.config.dp > 1) {
    ledger.add(Category::gradients, bytes_of(n.trains, n.trained), [&] {
      return ledger_item("ddp", "DDP gradient buckets",
                         fmt::format("{} x {} (gradient_as_bucket_view False: a flat copy of every gradient)",
                                     n.trains.value(), name_of(n.trained)),
                         n.trains, n.trained);
    });
  }
  if (st.fsdp->optimizer_step_peak || accumulates(c)) {
    ledger.add(Category::gradients, bytes_of(n.trains, n.trained), [&] {
      return ledger_item("ddp", "gradients",
                         fmt::format("{} x {} ({})", n.trains.value(), name_of(n.trained),
                                     st.fsdp->optimizer_step_peak ? "the optimizer step"
                                                                  : "held across the step's micro-batches"),
                         n.trains, n.trained);
    });
  }
}

// The allocator's reserve, as ZeRO's state model records it (no side-stream buffers here).
void ddp_cache(const EvalContext& c, const StageReport& st, Bytes pct, Ledger& ledger) {
  kZeroStates.record_cache(c, st, pct, ledger);
}

}  // namespace

const StateModel kHfDdpStates{
    .prepare = ddp_prepare,
    .cost = ddp_cost,
    .record = ddp_record,
    .record_cache = ddp_cache,
};

}  // namespace moemem::detail
