#include "moemem/explain.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "moemem/sharding.hpp"

namespace moemem {

namespace {

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

Bytes times(Bytes b, std::int64_t n) { return Bytes(checked_mul(b.value(), static_cast<std::uint64_t>(n), "explain")); }

std::string layers_text(std::int64_t n) { return n == 1 ? "1 layer" : fmt::format("{} layers", n); }

}  // namespace

std::vector<ExplainItem> explain_stage(const ModelSpec& m, const Inventory& inv, const Profile& profile,
                                       const Layout& layout, const TrainingConfig& t, std::int64_t stage) {
  const MemoryReport r = analyze(m, inv, profile, layout, t);
  if (stage < 0 || stage >= static_cast<std::int64_t>(r.stages.size())) {
    throw InputError("--stage", std::to_string(stage), fmt::format("a stage from 0 to {}", r.stages.size() - 1));
  }
  const auto& st = r.stages[idx(stage)];
  const auto& p = layout.config;
  std::vector<ExplainItem> out;

  // FSDP2 (torchtitan): shards, working copies and the side-stream caches.
  if (profile.fsdp2) {
    const std::int64_t group = p.dp / t.dp_replicate * p.cp;
    const Count shard = st.fsdp_shard_params;
    const std::string shard_text =
        fmt::format("ceil({} / (dp/dp_replicate*cp {}))", (st.params.non_expert + st.params.expert).value(), group);
    out.push_back({"weights", "fsdp", "fp32 parameter shard", shard_text + " x fp32", bytes_of(shard, DType::fp32)});
    if (st.optimizer_step_peak) {
      out.push_back({"gradients", "fsdp", "fp32 gradient shard", shard_text + " x fp32 (optimizer step)", bytes_of(shard, DType::fp32)});
      out.push_back({"optimizer", "fsdp", "exp_avg + exp_avg_sq", "2 x " + shard_text + " x fp32", bytes_of(shard, DType::fp32) + bytes_of(shard, DType::fp32)});
      out.push_back({"optimizer", "fsdp", "foreach AdamW temporary", shard_text + " x fp32", bytes_of(shard, DType::fp32)});
    } else {
      out.push_back({"weights", "fsdp", "bf16 root copy", fmt::format("{} embedding/norm/output parameters x bf16 (root not resharded)", st.fsdp_root_params.value()), st.fsdp_root_unsharded});
      if (st.fsdp_blocks_kept > 0) {
        out.push_back({"weights", "fsdp", "blocks kept unsharded", fmt::format("{} blocks x {} parameters ({}, reshard-after-forward {})", st.fsdp_blocks_kept, st.fsdp_block_params.value(), t.fsdp_float8_all_gather ? "FP8 linear weights" : "bf16", name_of(t.reshard)), st.fsdp_blocks_unsharded});
      }
      out.push_back({"optimizer", "fsdp", "exp_avg + exp_avg_sq", "2 x " + shard_text + " x fp32", bytes_of(shard, DType::fp32) + bytes_of(shard, DType::fp32)});
    }
  }
  // Weights: the tensors this rank holds, grouped by role across layers (ZeRO-3 shards them, so
  // then one line per ZeRO group instead).
  if (profile.fsdp2) {
  } else if (t.zero < 3) {
    std::map<std::pair<std::string, std::string>, Count> by_role;
    std::vector<std::pair<std::string, std::string>> order;
    const std::int64_t vocab = r.padded_vocab;
    const std::int64_t emb = layout.chunk_with_embedding(), loss = layout.chunk_with_loss();
    for (const auto& tensor : inv.tensors) {
      if (!profile.accounts(tensor)) continue;
      std::int64_t chunk = 0;
      switch (tensor.placement) {
        case Placement::embedding: chunk = emb; break;
        case Placement::decoder: chunk = layout.chunk_of_layer(tensor.layer); break;
        case Placement::head: chunk = loss; break;
        case Placement::mtp: chunk = layout.chunk_of_mtp(tensor.layer - m.num_layers); break;
      }
      if (!layout.rank_holds(stage, chunk)) continue;
      if (tensor.shared_in_training && layout.rank_holds(stage, tensor.role == Role::mtp_embedding ? emb : loss)) continue;
      const auto key = std::make_pair(std::string(name_of(tensor.module)),
                                      std::string(name_of(tensor.role)) + (tensor.part.empty() ? "" : fmt::format(" [{}]", tensor.part)));
      if (!by_role.contains(key)) order.push_back(key);
      by_role[key] += device_params(tensor, profile, p, vocab);
    }
    for (const auto& key : order) {
      const Count c = by_role[key];
      out.push_back({"weights", key.first, key.second,
                     fmt::format("{} parameters on this device x {}", c.value(), name_of(t.precision.weights)),
                     bytes_of(c, t.precision.weights)});
    }
  } else {
    const Count dense(ceil_div(st.params.non_expert.value(), static_cast<std::uint64_t>(p.dp * p.cp)));
    const Count expert(ceil_div(st.params.expert.value(), static_cast<std::uint64_t>(layout.edp)));
    out.push_back({"weights", "non-expert", "ZeRO-3 shard", fmt::format("ceil({} / dp*cp {}) x {}", st.params.non_expert.value(), p.dp * p.cp, name_of(t.precision.weights)), bytes_of(dense, t.precision.weights)});
    out.push_back({"weights", "expert", "ZeRO-3 shard", fmt::format("ceil({} / edp {}) x {}", st.params.expert.value(), layout.edp, name_of(t.precision.weights)), bytes_of(expert, t.precision.weights)});
  }
  if (st.fp8_weight_copies.value() > 0) {
    out.push_back({"weights", "fp8", "FP8 weight copies", fmt::format("2 x {} FP8-GEMM parameters (row- and column-wise) + scales, {}", st.fp8_weight_params.value(), name_of(t.fp8)), st.fp8_weight_copies});
  }

  if (!profile.fsdp2) {
  // Gradients and optimizer states, by ZeRO group.
  const std::int64_t groups[2] = {p.dp * p.cp, layout.edp};
  const Count parts[2] = {st.params.non_expert, st.params.expert};
  const char* group_names[2] = {"non-expert (dp*cp)", "expert (edp)"};
  for (int g = 0; g < 2; ++g) {
    const Count shard(ceil_div(parts[g].value(), static_cast<std::uint64_t>(groups[g])));
    const bool grads_sharded = t.zero >= 2, opt_sharded = t.zero >= 1;
    const Count gc = grads_sharded ? shard : parts[g];
    const Count oc = opt_sharded ? shard : parts[g];
    const std::string gtext = grads_sharded ? fmt::format("ceil({} / {})", parts[g].value(), groups[g]) : std::to_string(parts[g].value());
    const std::string otext = opt_sharded ? fmt::format("ceil({} / {})", parts[g].value(), groups[g]) : std::to_string(parts[g].value());
    out.push_back({"gradients", group_names[g], "main gradients", fmt::format("{} x {}", gtext, name_of(t.precision.gradients)), bytes_of(gc, t.precision.gradients)});
    out.push_back({"optimizer", group_names[g], "master weights", fmt::format("{} x {}", otext, name_of(t.precision.master)), bytes_of(oc, t.precision.master)});
    out.push_back({"optimizer", group_names[g], "exp_avg", fmt::format("{} x {}", otext, name_of(t.precision.exp_avg)), bytes_of(oc, t.precision.exp_avg)});
    out.push_back({"optimizer", group_names[g], "exp_avg_sq", fmt::format("{} x {}", otext, name_of(t.precision.exp_avg_sq)), bytes_of(oc, t.precision.exp_avg_sq)});
  }
  }

  // Activations: per held chunk, per saved tensor, times layers and in-flight micro-batches.
  std::vector<std::uint64_t> chunk_weights;
  for (const auto& b : st.chunk_activations) chunk_weights.push_back(b.value());
  const InFlight f = profile.single_microbatch ? InFlight{std::vector<std::int64_t>(st.chunks.size(), 1),
                                                           static_cast<std::int64_t>(st.chunks.size())}
                                                : in_flight(p.schedule, stage, p.pp, st.model_chunks, r.microbatches,
                                                            chunk_weights);
  const ActivationContext ctx{m, layout, t, r.attention, r.padded_vocab};
  for (std::size_t i = 0; i < st.chunks.size(); ++i) {
    const auto& ch = layout.chunks[idx(st.chunks[i])];
    const std::int64_t mb = f.per_chunk[i];
    if (mb == 0 || st.optimizer_step_peak) continue;
    const ChunkLayerCounts counts = chunk_layer_counts(m, ch, t);
    const std::string where = fmt::format("chunk {}", st.chunks[i]);
    for (const LayerKind kind : {LayerKind::dense, LayerKind::moe}) {
      const auto ki = static_cast<std::size_t>(kind);
      if (counts.whole[ki] == 0 && counts.mode[ki] == 0 && counts.input[ki] == 0) continue;
      const auto terms = layer_activation_terms(profile, m, layout, t, kind);
      const char* kind_name = kind == LayerKind::moe ? "moe" : "dense";
      for (const auto& term : terms) {
        // Whole layers keep every term, the mode's layers what the mode keeps, checkpointed ones their input.
        std::int64_t count = counts.whole[ki];
        if (is_kept(term, t.recompute, t.recompute_modules)) count += counts.mode[ki];
        if (term.kept_under_full) count += counts.input[ki];
        if (count == 0) continue;
        out.push_back({"activations", std::string(name_of(term.module)), std::string(term.name),
                       fmt::format("{} ({}, {}) x {} {} x {} micro-batches, {}", term.elements.value(), term.rule,
                                   name_of(term.dtype), layers_text(count), kind_name, mb, where),
                       times(times(term.bytes(), count), mb)});
      }
    }
    std::vector<ActivationTerm> extra;
    profile.chunk_activations(ctx, ch, extra);
    for (const auto& term : extra) {
      out.push_back({"activations", std::string(name_of(term.module)), std::string(term.name),
                     fmt::format("{} ({}, {}) x {} micro-batches, {}", term.elements.value(), term.rule,
                                 name_of(term.dtype), mb, where),
                     times(term.bytes(), mb)});
    }
  }
  if (st.optimizer_step_peak) {
    // No activations at the optimizer step.
  } else if (st.loss.allocated > st.recompute_transient) {
    out.push_back({"activations", "output_head", "loss backward transient",
                   profile.fsdp2 ? fmt::format("loss {} at the start of backward (more than the recomputation transient)",
                                               name_of(effective_loss(t)))
                                 : "bf16 copy of the logits' fp32 gradient (more than the recomputation transient)",
                   st.loss.allocated});
  } else if (st.recompute_transient.value() > 0) {
    out.push_back({"activations", "recompute", "recomputation transient",
                   "the largest layer or group recomputed at once during backward", st.recompute_transient});
  }
  if (st.cp_ring_buffers.value() > 0 && !st.optimizer_step_peak) {
    out.push_back({"activations", "attention", "context-parallel ring buffers", "2 x one layer's local K and V block",
                   st.cp_ring_buffers});
  }
  if (st.bytes.buffers.value() > 0) {
    out.push_back({"buffers", "communication", "buffers", t.deepep ? "profile allowance + DeepEP buffer" : "profile allowance",
                   st.bytes.buffers});
  }
  if (profile.fsdp2) {
    const Bytes cached = st.fsdp_all_gather_cache + st.fsdp_reduce_scatter_cache + st.loss.cached;
    if (st.fsdp_all_gather_cache.value() > 0) {
      out.push_back({"fragmentation", "fsdp", "all-gather stream cache", "max(root bf16 copy, two blocks' all-gather outputs)", st.fsdp_all_gather_cache});
    }
    if (st.fsdp_reduce_scatter_cache.value() > 0) {
      out.push_back({"fragmentation", "fsdp", "reduce-scatter stream cache", "fp32 reduce-scatter inputs and outputs of the root and two blocks", st.fsdp_reduce_scatter_cache});
    }
    if (st.loss.cached.value() > 0) {
      out.push_back({"fragmentation", "allocator", "bf16 logits block", "freed before the fp32 loss tensors, too small to reuse", st.loss.cached});
    }
    if (st.bytes.fragmentation > cached) {
      out.push_back({"fragmentation", "allocator", "reserved - allocated", "--fragmentation-pct of allocated bytes", Bytes(st.bytes.fragmentation.value() - cached.value())});
    }
  } else if (st.bytes.fragmentation.value() > 0) {
    out.push_back({"fragmentation", "allocator", "reserved - allocated", "percentage of allocated bytes", st.bytes.fragmentation});
  }
  if (st.bytes.runtime.value() > 0) {
    out.push_back({"runtime", "cuda/nccl", "CUDA context and NCCL communicators", "outside PyTorch's allocator",
                   st.bytes.runtime});
  }
  return out;
}

}  // namespace moemem
