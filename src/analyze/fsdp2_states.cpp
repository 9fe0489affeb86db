// FSDP2's state model, as torchtitan applies it: sharded fp32 parameters and AdamW moments,
// bf16 working copies of the root and of the blocks not resharded after forward, gradients only
// at the optimizer step, and the side-stream collective buffers the allocator keeps reserved.
#include <algorithm>

#include <fmt/format.h>

#include "analyze/internal.hpp"

namespace moemem::detail {

namespace {

void fsdp2_prepare(const EvalContext&, const Shares& sh, StageReport& st) {
  FsdpDetail f;
  Share root;
  if (st.has_embedding) root.add(sh.emb, 1, false);
  if (st.has_head) root.add(sh.head, 1, false);
  f.root_params = root.params.non_expert + root.params.expert;
  f.block_params = sh.dense.params.non_expert;
  f.block_fp8_params = sh.dense.fp8.non_expert;
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
bool fsdp2_state(const EvalContext& c, StageReport& st, Bytes activations) {
  const auto& p = c.layout.config;
  const auto& t = c.t;
  FsdpDetail& f = *st.fsdp;
  const std::uint64_t shard_group = static_cast<std::uint64_t>(p.dp / t.dp_replicate * p.cp);
  f.shard_params = Count(ceil_div((st.params.non_expert + st.params.expert).value(), shard_group));
  f.blocks_kept = t.reshard == ReshardPolicy::always  ? 0
                  : t.reshard == ReshardPolicy::never ? st.layers.num_layers
                  : p.pp > 1                          ? st.layers.num_layers
                                                      : std::min<std::int64_t>(1, st.layers.num_layers);
  const Bytes block = t.fsdp_float8_all_gather
                          ? bytes_per(f.block_fp8_params, 1) +
                                bytes_per(Count(f.block_params.value() - f.block_fp8_params.value()), 2)
                          : bytes_per(f.block_params, 2);
  f.root_unsharded = bytes_per(f.root_params, 2);
  f.blocks_unsharded = Bytes(checked_mul(block.value(), static_cast<std::uint64_t>(f.blocks_kept), "fsdp"));
  // With PP the first backward's fp32 gradients stay while the later micro-batches run backward
  // (pp_accumulated_grads); charged with the activations in flight at the first backward: as many
  // as at the second where forwards resume between backwards (1F1B's steady state), one
  // micro-batch's block inputs more where every forward came first (GPipe, 1F1B's first stage
  // when micro-batches = stages).
  const Bytes backward = bytes_per(f.shard_params, 12) + f.root_unsharded + f.blocks_unsharded +
                         pp_accumulated_grads(c, st) + activations;
  f.optimizer_step_peak = bytes_per(f.shard_params, 16) > backward;
  if (shard_group > 1) {
    f.all_gather_cache = std::max(f.root_unsharded, Bytes(checked_mul(block.value(), 2, "fsdp")));
    const Count reduced = f.root_params + Count(checked_mul(f.block_params.value(), 2, "fsdp"));
    f.reduce_scatter_cache = bytes_per(reduced, 4) + bytes_per(Count(ceil_div(reduced.value(), shard_group)), 4);
  }
  return f.optimizer_step_peak;
}

void record_fsdp2(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  const auto& p = c.layout.config;
  const FsdpDetail& f = *st.fsdp;
  const Count shard = f.shard_params;
  const auto text = [&] {
    return fmt::format("ceil({} / (dp/dp_replicate*cp {}))", (st.params.non_expert + st.params.expert).value(),
                       p.dp / c.t.dp_replicate * p.cp);
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
    return;
  }
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
  ledger.add(Category::weights, f.root_unsharded, [&] {
    return ledger_item("fsdp", "bf16 root copy",
                       fmt::format("{} embedding/norm/output parameters x bf16 (root not resharded)", f.root_params.value()),
                       f.root_params, DType::bf16);
  });
  if (f.blocks_kept > 0) {
    ledger.add(Category::weights, f.blocks_unsharded, [&] {
      return ledger_item("fsdp", "blocks kept unsharded",
                         fmt::format("{} blocks x {} parameters ({}, reshard-after-forward {})", f.blocks_kept,
                                     f.block_params.value(), c.t.fsdp_float8_all_gather ? "FP8 linear weights" : "bf16",
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
      return ledger_item("fsdp", "all-gather stream cache", "max(root bf16 copy, two blocks' all-gather outputs)");
    });
  }
  if (f.reduce_scatter_cache.value() > 0) {
    ledger.add(Category::fragmentation, f.reduce_scatter_cache, [] {
      return ledger_item("fsdp", "reduce-scatter stream cache", "fp32 reduce-scatter inputs and outputs of the root and two blocks");
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
