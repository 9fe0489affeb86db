// Weights, gradients and optimizer states of one device: Megatron's ZeRO stages / distributed
// optimizer (with Transformer Engine's FP8 weight copies), or FSDP2 as torchtitan applies it.
#include <algorithm>

#include <fmt/format.h>

#include "analyze/internal.hpp"

namespace moemem::detail {

namespace {

Bytes bytes_per(Count c, std::uint64_t per) { return Bytes(checked_mul(c.value(), per, "fsdp bytes")); }

// FSDP2 as torchtitan applies it (parallelize_llama.py apply_fsdp; torch.distributed.fsdp
// fully_shard): parameters shard over dp/dp_replicate x cp in fp32; AdamW's moments with them;
// gradients are None until backward writes fp32 shards. At the start of backward (the usual
// peak) a device holds the shards and moments, the root's bf16 copy (the root module is not
// resharded after forward), the blocks not resharded after forward, and the activations; at the
// optimizer step it holds shards, gradients, moments and one fp32 temporary per parameter
// (foreach AdamW's sqrt of exp_avg_sq). All-gather outputs and fp32 reduce-scatter inputs are
// allocated on FSDP's own streams, whose cached blocks the default stream cannot reuse: the
// root's and two blocks' all-gathers, and two blocks' and the root's fp32 reduce-scatter input
// and output stay reserved.
void fsdp2_state(const EvalContext& c, StageReport& st, Bytes activations) {
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
  const Bytes backward = bytes_per(f.shard_params, 12) + f.root_unsharded + f.blocks_unsharded + activations;
  f.optimizer_step_peak = bytes_per(f.shard_params, 20) > backward;
  if (shard_group > 1) {
    f.all_gather_cache = std::max(f.root_unsharded, Bytes(checked_mul(block.value(), 2, "fsdp")));
    const Count reduced = f.root_params + Count(checked_mul(f.block_params.value(), 2, "fsdp"));
    f.reduce_scatter_cache = bytes_per(reduced, 4) + bytes_per(Count(ceil_div(reduced.value(), shard_group)), 4);
  }
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
    ledger.add(Category::optimizer, fp32,
               [&] { return ledger_item("fsdp", "foreach AdamW temporary", text() + " x fp32", shard, DType::fp32); });
    return;
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

// Row- and column-wise FP8 copies of every FP8-GEMM weight, and their scales (none when the
// weights are quantized online per GEMM, as DeepSeek-V3 does).
Bytes fp8_weight_copies(const EvalContext& c, const StageReport& st) {
  const auto& t = c.t;
  if (t.fp8 == Fp8Recipe::none || t.fp8_online_weights) return Bytes{};
  const Count copies(checked_mul(st.fp8_weight_params.value(), 2, "fp8 weights"));
  const Count scales = t.fp8 == Fp8Recipe::blockwise ? Count(ceil_div(copies.value(), 128 * 128))
                       : t.fp8 == Fp8Recipe::mxfp8   ? fp8_scale_elements(copies, t.fp8)
                                                     : Count(2);
  return bytes_of(copies, DType::fp8) + bytes_of(scales, fp8_scale_dtype(t.fp8));
}

// ZeRO: stage 1 shards the optimizer states, 2 also the gradients, 3 also the weights; the
// non-expert part over dp*cp, the expert part over edp (the worst rank holds the ceiling).
void record_zero(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  const auto& p = c.layout.config;
  const auto& t = c.t;
  const auto& pr = t.precision;
  const std::int64_t groups[2] = {p.dp * p.cp, c.layout.edp};
  const Count parts[2] = {st.params.non_expert, st.params.expert};
  const auto shard = [&](int g) { return Count(ceil_div(parts[g].value(), static_cast<std::uint64_t>(groups[g]))); };
  const auto shard_text = [&](int g) { return fmt::format("ceil({} / {})", parts[g].value(), groups[g]); };
  if (t.zero >= 3) {
    const char* names[2] = {"non-expert", "expert"};
    const char* over[2] = {"dp*cp", "edp"};
    for (int g = 0; g < 2; ++g) {
      ledger.add(Category::weights, bytes_of(shard(g), pr.weights), [&] {
        return ledger_item(names[g], "ZeRO-3 shard",
                           fmt::format("ceil({} / {} {}) x {}", parts[g].value(), over[g], groups[g], name_of(pr.weights)),
                           shard(g), pr.weights);
      });
    }
  } else if (ledger.detail()) {
    record_weights_by_role(c, st, ledger);
  } else {
    ledger.add(Category::weights, bytes_of(parts[0] + parts[1], pr.weights), [] { return LedgerItem{}; });
  }
  if (st.fp8_weight_copies.value() > 0) {
    ledger.add(Category::weights, st.fp8_weight_copies, [&] {
      return ledger_item("fp8", "FP8 weight copies",
                         fmt::format("2 x {} FP8-GEMM parameters (row- and column-wise) + scales, {}",
                                     st.fp8_weight_params.value(), name_of(t.fp8)),
                         st.fp8_weight_params, DType::fp8, 2);
    });
  }
  const char* group_names[2] = {"non-expert (dp*cp)", "expert (edp)"};
  for (int g = 0; g < 2; ++g) {
    const Count gc = t.zero >= 2 ? shard(g) : parts[g];
    const Count oc = t.zero >= 1 ? shard(g) : parts[g];
    const auto gtext = [&] { return t.zero >= 2 ? shard_text(g) : std::to_string(parts[g].value()); };
    const auto otext = [&] { return t.zero >= 1 ? shard_text(g) : std::to_string(parts[g].value()); };
    const auto state = [&](Category cat, const char* item, Count n, DType d, const auto& count_text) {
      ledger.add(cat, bytes_of(n, d), [&] {
        return ledger_item(group_names[g], item, fmt::format("{} x {}", count_text(), name_of(d)), n, d);
      });
    };
    state(Category::gradients, "main gradients", gc, pr.gradients, gtext);
    state(Category::optimizer, "master weights", oc, pr.master, otext);
    state(Category::optimizer, "exp_avg", oc, pr.exp_avg, otext);
    state(Category::optimizer, "exp_avg_sq", oc, pr.exp_avg_sq, otext);
  }
}

}  // namespace

void stage_states(const EvalContext& c, StageReport& st, Bytes activations) {
  if (st.fsdp) fsdp2_state(c, st, activations);
  else st.fp8_weight_copies = fp8_weight_copies(c, st);
}

void record_states(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  if (st.fsdp) record_fsdp2(c, st, ledger);
  else record_zero(c, st, ledger);
}

}  // namespace moemem::detail
