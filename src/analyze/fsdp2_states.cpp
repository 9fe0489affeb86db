// FSDP2's state model, as torchtitan applies it: sharded fp32 parameters and AdamW moments,
// bf16 working copies of the root and of the blocks not resharded after forward, gradients only
// at the optimizer step, and the side-stream collective buffers the allocator keeps reserved.
#include <algorithm>

#include <fmt/format.h>

#include "analyze/internal.hpp"

namespace moemem::detail {

namespace {

// A block is the largest layer class on the rank: a MoE block with its routed experts (this rank's
// 1/ep of them under expert parallelism), the FSDP unit torchtitan's apply_fsdp wraps per block
// (the experts a unit of their own over dp_shard_mod_ep, gathered with their block).
void fsdp2_prepare(const EvalContext& c, const Shares& sh, StageReport& st) {
  FsdpDetail f;
  Share root;
  if (st.has_embedding) root.add(sh.emb, 1, false);
  f.embedding_params = root.params.non_expert + root.params.expert;
  if (st.has_head) root.add(sh.head, 1, false);
  f.root_params = root.params.non_expert + root.params.expert;
  for (const std::size_t k : c.cm.classes) {
    const auto& l = sh.layer[k];
    const Count n = l.params.non_expert + l.params.expert;
    if (n.value() > f.block_params.value()) {
      f.block_params = n;
      f.block_fp8_params = l.fp8.non_expert + l.fp8.expert;
    }
  }
  st.fsdp = f;
}

Bytes bytes_per(Count c, std::uint64_t per) { return Bytes(checked_mul(c.value(), per, "fsdp bytes")); }

// With pipeline parallelism, torch.distributed.pipelining runs every micro-batch's backward
// without gradient sync (stage.py _PipelineStageBase.backward_maybe_with_nosync: for an
// FSDPModule set_requires_gradient_sync(False) and set_reshard_after_backward(False) around each
// backward, then, after the last one, each FSDP group's post_backward by hand). FSDP2's
// post_backward without reduce_grads (torch/distributed/_composable/fsdp/_fsdp_param_group.py
// FSDPParamGroup.post_backward -> _fsdp_param.py FSDPParam.to_accumulated_grad_if_needed)
// moves each unsharded bf16 gradient to `unsharded_accumulated_grad` in the reduce dtype, and
// later micro-batches add into it (accumulate_unsharded_grad_if_needed); only the final
// post_backward reduce-scatters and frees it. torchtitan's reduce dtype is fp32
// (config_manager.py --training.mixed_precision_reduce, default and only choice "float32" at
// commit 9dec370, 2024-12-26). So from the end of a stage's first backward to the end of the
// step, the stage holds an fp32 gradient of every parameter it holds (after TP, before FSDP):
// 4 bytes x (root + blocks). torch 1963fc8 (2024-12-23) is the torch of torchtitan's 2024-12
// benchmark.
Bytes pp_accumulated_grads(const EvalContext& c, const StageReport& st) {
  if (c.layout.config.pp <= 1) return Bytes{};
  const FsdpDetail& f = *st.fsdp;
  const auto blocks = Count(checked_mul(f.block_params.value(), static_cast<std::uint64_t>(st.layers.num_layers), "fsdp"));
  return bytes_per(f.root_params + blocks, 4);
}

// What torch.distributed.pipelining (torch 1963fc8, 2024-12-23, the torch of torchtitan's 2024-12
// benchmark) keeps per micro-batch of a step on a pipeline rank, beyond the saved activations:
// - PipelineStage._prepare_forward_infra allocates, once and for good, one receive buffer per
//   micro-batch for a stage after the first (args_recv_info[chunk_id], _make_tensor_from_meta of
//   the stage input, requires_grad_), and _prepare_backward_infra one gradient receive buffer per
//   micro-batch for a stage before the last (grad_recv_info[mb], _create_grad_recv_info, of the
//   stage output's shape). The buffers of the micro-batches in flight are the first block's
//   saved input (counted with the activations); the others are extra.
// - forward_one_chunk appends every micro-batch's output to output_chunks, cleared only by
//   clear_runtime_states at the next step() (unconditionally at that time; "if self.is_last"
//   came in 2025, pytorch PR 153383, torch 2.8). On the last stage that output is the logits
//   (b*s/cp x vocab/tp, bf16 under loss parallel), so at the last micro-batch's loss the earlier
//   micro-batches' logits are held. torchtitan from e5ef99aab (PR 1922, 2025-10-22; release
//   0.2.1) calls step(return_outputs=False) and pytorch PR 165822 then keeps none: only
//   `--torchtitan-version 0.2.0` (and earlier) counts them. Before torch 2.8 a stage before the
//   last keeps its outputs too; counted with 0.2.0, which errs high for 0.2.0 on torch 2.8-2.9.
// - stage_backward reads each input's .grad; clear_runtime_states sets the receive buffers'
//   .grad to None at the next step, so at the optimizer step every micro-batch's input gradient
//   and every output of a stage before the last are still held.
// One micro-batch's stage input/output: b*s/cp/tp x h (the block output is a local tensor,
// Shard(1) of w2's RowwiseParallel), in the activation dtype.
struct PipelineHeld {
  Bytes recv_extra, grad_recv, logits_earlier;  // at the start of a backward
  Bytes at_step;                                // at the optimizer step
  std::int64_t microbatches = 0, recv_count = 0, grad_recv_count = 0;
  Count boundary, logits;  // one micro-batch's elements
};

PipelineHeld pipeline_held(const EvalContext& c, const StageReport& st) {
  PipelineHeld h;
  const auto& p = c.layout.config;
  if (p.pp <= 1) return h;
  const std::int64_t tokens = c.t.micro_batch * (c.t.seq_len / p.cp);
  h.boundary = Count(checked_mul(static_cast<std::uint64_t>(tokens / p.tp), static_cast<std::uint64_t>(c.model.hidden), "pp"));
  h.logits = Count(checked_mul(static_cast<std::uint64_t>(tokens), static_cast<std::uint64_t>(c.vocab / p.tp), "pp"));
  const Bytes one = bytes_of(h.boundary, c.t.activation_dtype);
  const Bytes logit = bytes_of(h.logits, c.t.activation_dtype);
  // torchtitan up to 0.2.0 calls the schedule's step() for its return value (TorchtitanVersion);
  // later ones pass return_outputs=False, and their torch (2.8 and later, pytorch PR 153383) keeps
  // output_chunks on the last stage only.
  const bool old = c.t.torchtitan_version <= TorchtitanVersion::v0_2_0;
  std::int64_t at_step = 0;
  for (std::size_t i = 0; i < st.chunks.size(); ++i) {
    const Chunk& ch = c.layout.chunks[static_cast<std::size_t>(st.chunks[i])];
    const std::int64_t flight = st.chunk_in_flight[i];
    const std::int64_t n = std::max(c.microbatches.value_or(flight), flight);
    h.microbatches = n;
    if (!ch.embedding) {
      h.recv_count += n - flight;
      at_step += 2 * n;  // receive buffers and their .grad
    }
    if (!ch.loss) {
      h.grad_recv_count += n;
      at_step += old ? 2 * n : n;  // gradient receive buffers (and output_chunks before torch 2.8)
    } else if (old) {
      h.logits_earlier = times(logit, n - 1, "pp");
      h.at_step = times(logit, n, "pp");
    }
  }
  h.recv_extra = times(one, h.recv_count, "pp");
  h.grad_recv = times(one, h.grad_recv_count, "pp");
  h.at_step = h.at_step + times(one, at_step, "pp");
  return h;
}

// FSDP2 as torchtitan applies it (parallelize_llama.py apply_fsdp; torch.distributed.fsdp
// fully_shard): parameters shard over dp/dp_replicate x cp in fp32; AdamW's moments with them;
// gradients are None until backward writes fp32 shards. At the start of backward (the usual
// peak) a device holds the shards and moments, the root's bf16 copy (the root module is not
// resharded after forward), the blocks not resharded after forward, and the activations; at the
// optimizer step it holds shards, gradients and moments. The step itself allocates nothing of
// parameter size: torchtitan builds AdamW with fused=True (components/optimizer.py
// build_optimizers: "fused": implementation == "fused"; [optimizer] implementation defaults to
// "fused" since commit 6e4988550, 2025-02-24, "use Fused AdamW as default" #881), and
// torch.optim's _fused_adamw calls torch._fused_adamw_, which updates parameters and moments in
// place. Before that commit torchtitan ran foreach AdamW, whose _multi_tensor_adamw allocates
// exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), one fp32 tensor per parameter; the 2024-12
// benchmark and PR #822's runs predate the change, but no option selects foreach here, and
// their peak is backward, not the step. All-gather outputs and fp32 reduce-scatter inputs are
// allocated on FSDP's own streams, whose cached blocks the default stream cannot reuse: the
// root's and two blocks' all-gathers, and two blocks' and the root's fp32 reduce-scatter input
// and output stay reserved.
}  // namespace

// torchtitan 9dec370 float8.py Float8Handler: enable_fsdp_float8_all_gather =
// parallel_dims.dp_shard_enabled and the option; parallel_dims.py: dp_shard_enabled is dp_shard > 1.
// With dp_shard 1 FSDP still shards over cp (dp_shard_cp), all-gathering bf16 weights.
bool fsdp_float8_all_gather_active(const EvalContext& c) {
  return c.t.fsdp_float8_all_gather && c.layout.config.dp / c.t.dp_replicate > 1;
}

namespace {

bool fsdp2_state(const EvalContext& c, StageReport& st, Bytes activations) {
  const auto& p = c.layout.config;
  const auto& t = c.t;
  FsdpDetail& f = *st.fsdp;
  const std::uint64_t shard_group = static_cast<std::uint64_t>(p.dp / t.dp_replicate * p.cp);
  // Routed experts, already 1/ep per rank, shard over what is left of the group (dp_shard_mod_ep):
  // every parameter ends up over the whole group.
  f.shard_params = Count(ceil_div(st.params.non_expert.value(), shard_group)) +
                   Count(ceil_div(st.params.expert.value(), shard_group / static_cast<std::uint64_t>(p.ep)));
  // What stays unsharded after forward. Up to 0.1.0 (parallelize.py apply_fsdp before 83e694105,
  // 2025-07-28): the root (embedding, norm, output; FSDP2's lazy_init never reshards the root after
  // forward) and, by default, the last block (or every block with PP). From 0.2.0 the embedding
  // and [norm, output] are units of their own: the embedding and every block follow the policy
  // (default: resharded without PP, kept with it), [norm, output] stays unless "always"; a tied
  // embedding is in the [norm, output] unit.
  const bool units = t.torchtitan_version >= TorchtitanVersion::v0_2_0;
  const Count head(f.root_params.value() - f.embedding_params.value());  // final norm and output
  // The root's largest FSDP unit: the whole root up to 0.1.0, else the embedding or [norm, output].
  const Count root_unit = units ? std::max(f.embedding_params, head) : f.root_params;
  const bool policy_keeps = t.reshard == ReshardPolicy::never || (t.reshard == ReshardPolicy::standard && p.pp > 1);
  f.blocks_kept = t.reshard == ReshardPolicy::always  ? 0
                  : t.reshard == ReshardPolicy::never ? st.layers.num_layers
                  : p.pp > 1                          ? st.layers.num_layers
                  : units                             ? 0
                                                      : std::min<std::int64_t>(1, st.layers.num_layers);
  if (!units) {
    f.root_kept_params = f.root_params;
  } else {
    const bool head_kept = t.reshard != ReshardPolicy::always;
    const bool embedding_kept = c.model.tie_embeddings ? head_kept : policy_keeps;
    f.root_kept_params = (head_kept ? head : Count{}) + (embedding_kept ? f.embedding_params : Count{});
  }
  const Bytes block = fsdp_float8_all_gather_active(c)
                          ? bytes_per(f.block_fp8_params, 1) +
                                bytes_per(Count(f.block_params.value() - f.block_fp8_params.value()), 2)
                          : bytes_per(f.block_params, 2);
  f.root_unsharded = bytes_per(f.root_kept_params, 2);
  f.blocks_unsharded = Bytes(checked_mul(block.value(), static_cast<std::uint64_t>(f.blocks_kept), "fsdp"));
  // With PP the first backward's fp32 gradients stay while the later micro-batches run backward
  // (pp_accumulated_grads); charged with the activations in flight at the first backward: as many
  // as at the second where forwards resume between backwards (1F1B's steady state), one
  // micro-batch's block inputs more where every forward came first (GPipe, 1F1B's first stage
  // when micro-batches = stages).
  const PipelineHeld held = pipeline_held(c, st);
  const Bytes backward = bytes_per(f.shard_params, 12) + f.root_unsharded + f.blocks_unsharded +
                         pp_accumulated_grads(c, st) + activations + held.recv_extra + held.grad_recv +
                         held.logits_earlier;
  f.optimizer_step_peak = bytes_per(f.shard_params, 16) + held.at_step > backward;
  if (shard_group > 1) {
    // The largest all-gather outputs on FSDP's stream, and the reduce-scatters in flight: the root's
    // unit (from 0.2.0 the embedding and [norm, output] gather and reduce at opposite ends of the
    // step, so only the larger counts) or two blocks (one prefetched while the other runs).
    f.all_gather_cache = std::max(bytes_per(root_unit, 2), Bytes(checked_mul(block.value(), 2, "fsdp")));
    const Count reduced = root_unit + Count(checked_mul(f.block_params.value(), 2, "fsdp"));
    f.reduce_scatter_cache = bytes_per(reduced, 4) + bytes_per(Count(ceil_div(reduced.value(), shard_group)), 4);
  }
  return f.optimizer_step_peak;
}

void record_pipeline_held(const EvalContext& c, const StageReport& st, bool step, Ledger& ledger) {
  const PipelineHeld h = pipeline_held(c, st);
  const auto dt = c.t.activation_dtype;
  if (step) {
    if (h.at_step.value() > 0) {
      ledger.add(Category::buffers, h.at_step, [&] {
        return ledger_item("pipeline", "held until the next step",
                           fmt::format("{} micro-batches x (receive buffers and their .grad, gradient receive buffers "
                                       "and output_chunks: b*s/cp/tp x h each; the last stage's logits)",
                                       h.microbatches));
      });
    }
    return;
  }
  if (h.recv_count > 0) {
    ledger.add(Category::buffers, h.recv_extra, [&] {
      return ledger_item("pipeline", "receive buffers of micro-batches not in flight",
                         fmt::format("({} micro-batches - in flight) x b*s/cp/tp x h (args_recv_info)", h.microbatches),
                         h.boundary, dt, h.recv_count);
    });
  }
  if (h.grad_recv_count > 0) {
    ledger.add(Category::buffers, h.grad_recv, [&] {
      return ledger_item("pipeline", "gradient receive buffers",
                         fmt::format("{} micro-batches x b*s/cp/tp x h (grad_recv_info)", h.microbatches), h.boundary, dt,
                         h.grad_recv_count);
    });
  }
  if (h.logits_earlier.value() > 0) {
    ledger.add(Category::activations, h.logits_earlier, [&] {
      return ledger_item("pipeline", "earlier micro-batches' logits",
                         fmt::format("({} micro-batches - 1) x b*s/cp x vocab/tp (output_chunks until the next step)",
                                     h.microbatches),
                         h.logits, dt, h.microbatches - 1);
    });
  }
}

void record_fsdp2(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  const auto& p = c.layout.config;
  const FsdpDetail& f = *st.fsdp;
  const Count shard = f.shard_params;
  const auto text = [&] {
    const std::int64_t group = p.dp / c.t.dp_replicate * p.cp;
    if (st.params.expert.value() == 0) return fmt::format("ceil({} / (dp/dp_replicate*cp {}))", st.params.non_expert.value(), group);
    return fmt::format("ceil({} / (dp/dp_replicate*cp {})) + ceil({} routed-expert / {} (dp_shard_mod_ep))",
                       st.params.non_expert.value(), group, st.params.expert.value(), group / p.ep);
  };
  const Bytes fp32 = bytes_of(shard, DType::fp32);
  const auto moments = [&] {
    ledger.add(Category::optimizer, fp32 + fp32,
               [&] { return ledger_item("fsdp", "exp_avg + exp_avg_sq", "2 x " + text() + " x fp32", shard, DType::fp32, 2); });
  };
  ledger.add(Category::weights, fp32,
             [&] { return ledger_item("fsdp", "fp32 parameter shard", text() + " x fp32", shard, DType::fp32); });
  if (f.optimizer_step_peak) {
    ledger.add(Category::gradients, fp32, [&] {
      return ledger_item("fsdp", "fp32 gradient shard", text() + " x fp32 (optimizer step)", shard, DType::fp32);
    });
    moments();
    record_pipeline_held(c, st, true, ledger);
    return;
  }
  record_pipeline_held(c, st, false, ledger);
  if (const Bytes grads = pp_accumulated_grads(c, st); grads.value() > 0) {
    ledger.add(Category::gradients, grads, [&] {
      const Count n = f.root_params + Count(checked_mul(f.block_params.value(),
                                                        static_cast<std::uint64_t>(st.layers.num_layers), "fsdp"));
      return ledger_item("fsdp", "unsharded gradients accumulated over micro-batches",
                         fmt::format("({} root + {} blocks x {}) parameters x fp32 (PP: no gradient sync until the "
                                     "last micro-batch)",
                                     f.root_params.value(), st.layers.num_layers, f.block_params.value()),
                         n, DType::fp32);
    });
  }
  if (f.root_kept_params.value() > 0) {
    ledger.add(Category::weights, f.root_unsharded, [&] {
      const bool units = c.t.torchtitan_version >= TorchtitanVersion::v0_2_0;
      return ledger_item("fsdp", "bf16 root copy",
                         fmt::format("{} embedding/norm/output parameters x bf16 ({})", f.root_kept_params.value(),
                                     units ? "the units not resharded after forward" : "root not resharded"),
                         f.root_kept_params, DType::bf16);
    });
  }
  if (f.blocks_kept > 0) {
    ledger.add(Category::weights, f.blocks_unsharded, [&] {
      return ledger_item("fsdp", "blocks kept unsharded",
                         fmt::format("{} blocks x {} parameters ({}, reshard-after-forward {})", f.blocks_kept,
                                     f.block_params.value(), fsdp_float8_all_gather_active(c) ? "FP8 linear weights" : "bf16",
                                     name_of(c.t.reshard)),
                         f.block_params, std::nullopt, f.blocks_kept);
    });
  }
  moments();
}

void fsdp2_record_cache(const EvalContext&, const StageReport& st, Bytes pct, Ledger& ledger) {
  const FsdpDetail& f = *st.fsdp;
  if (f.all_gather_cache.value() > 0) {
    ledger.add(Category::fragmentation, f.all_gather_cache, [] {
      return ledger_item("fsdp", "all-gather stream cache", "max(root's (or embedding's, norm/output's) bf16 copy, two blocks' all-gather outputs)");
    });
  }
  if (f.reduce_scatter_cache.value() > 0) {
    ledger.add(Category::fragmentation, f.reduce_scatter_cache, [] {
      return ledger_item("fsdp", "reduce-scatter stream cache",
                         "fp32 reduce-scatter inputs and outputs of the root (from 0.2.0 its larger unit) and two blocks");
    });
  }
  if (st.loss.cached.value() > 0) {
    ledger.add(Category::fragmentation, st.loss.cached, [] {
      return ledger_item("allocator", "bf16 logits block", "freed before the fp32 loss tensors, too small to reuse");
    });
  }
  if (pct.value() > 0) {
    ledger.add(Category::fragmentation, pct,
               [] { return ledger_item("allocator", "reserved - allocated", "--fragmentation-pct of allocated bytes"); });
  }
}

}  // namespace

const StateModel kFsdp2States{
    .prepare = fsdp2_prepare,
    .cost = fsdp2_state,
    .record = record_fsdp2,
    .record_cache = fsdp2_record_cache,
};

}  // namespace moemem::detail
