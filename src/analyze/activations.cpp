// Activations: the terms one micro-batch keeps in each layer kind (a profile's rules), how a
// chunk's layers keep them under recomputation, what is recomputed at once in backward, and a
// stage's micro-batches in flight under its schedule.
#include <algorithm>

#include <fmt/format.h>

#include "analyze/internal.hpp"
#include "moemem/errors.hpp"

namespace moemem {

using detail::idx;

namespace {

// Full recomputation's groups in a chunk of n layers: Megatron's uniform method checkpoints groups
// of N layers from the first, block the first N layers one at a time. With the EP all-to-all
// overlap, Megatron-LM PR 6429 (37f1af1036, "Recompute EP A2A overlap activations per layer
// segment", superseding the chunk-wide design of #5920 / efe5752e56) keeps the same segments:
// recompute_method and recompute_num_layers mean what they mean without the overlap.
// torchtitan's layer SAC (RecomputeMethod::every, activation_checkpoint.py _apply_layer_sac): the
// process's block counter is incremented before each block, which is checkpointed when the counter
// is a multiple of N. Layer l of a chunk (0-based) is the rank's block blocks_before + l + 1.
struct FullGroups {
  RecomputeMethod method;
  std::int64_t size;
  std::int64_t blocks_before;
  [[nodiscard]] bool every_checkpoints(std::int64_t l) const { return (blocks_before + l + 1) % size == 0; }
};
bool every_block(const TrainingConfig& t) {
  return t.recompute == Recompute::full && t.recompute_method == RecomputeMethod::every;
}
FullGroups full_groups(const TrainingConfig& t, std::int64_t blocks_before) {
  return {t.recompute_method, t.recompute_num_layers, blocks_before};
}

}  // namespace

std::int64_t blocks_before_chunk(const Layout& layout, std::int64_t chunk) {
  std::int64_t before = 0;
  for (const auto& held : layout.rank_chunks) {
    if (std::find(held.begin(), held.end(), chunk) == held.end()) continue;
    for (const std::int64_t other : held) {
      if (other < chunk) before += layout.chunks[static_cast<std::size_t>(other)].num_layers;
    }
    break;
  }
  return before;
}

ChunkLayerCounts chunk_layer_counts(const ModelSpec& m, const Chunk& ch, const TrainingConfig& t, std::int64_t blocks_before) {
  ChunkLayerCounts c;
  const std::size_t mtp_class = m.mtp_class();
  const std::int64_t n = ch.num_layers + ch.mtp_depths;
  const FullGroups groups = full_groups(t, blocks_before);
  const auto kind_at = [&](std::int64_t l) { return l < ch.num_layers ? m.class_at(ch.first_layer + l) : mtp_class; };
  for (std::int64_t l = 0; l < n; ++l) {
    if (t.recompute != Recompute::full) {
      ++c.mode[kind_at(l)];
    } else if (groups.method == RecomputeMethod::uniform) {
      if (l % groups.size == 0) ++c.input[kind_at(l)];  // one input per group of N
    } else if (groups.method == RecomputeMethod::every) {
      ++(l < ch.num_layers && groups.every_checkpoints(l) ? c.input : c.whole)[kind_at(l)];
    } else {
      ++(l < groups.size ? c.input : c.whole)[kind_at(l)];  // block: the first N checkpointed
    }
  }
  return c;
}

std::vector<ActivationTerm> layer_activation_terms(const Profile& profile, const ModelSpec& m, const Layout& layout,
                                                   const TrainingConfig& t, LayerKind kind, MixerKind mixer) {
  std::vector<ActivationTerm> terms;
  const std::int64_t vocab = padded_vocab(m.vocab, t.vocab_multiple.value_or(profile.vocab_multiple), layout.config.tp);
  detail::layer_terms(profile, ActivationContext{m, layout, t, attention_kernel(profile, m, t), vocab, mixer},
                      kind, terms);
  return terms;
}

namespace detail {

namespace {

using ClassBytes = std::array<KindBytes, kLayerClasses>;

// Every class the evaluation costs (CompiledModel::classes); the others hold no layer.
ClassBytes kind_bytes(const EvalContext& c) {
  ClassBytes kinds{};
  for (const std::size_t cls : c.cm.classes) {
    thread_local std::vector<ActivationTerm> terms;
    terms.clear();
    ActivationContext ac{c.cm.shape_model(cls), c.layout, c.t, c.attention, c.vocab, c.model.class_mixer(cls)};
    layer_terms(c.profile, ac, c.model.class_kind(cls), terms);
    auto& k = kinds[cls];
    k.all = kept_bytes(terms, Recompute::none);
    k.kept = kept_bytes(terms, c.t.recompute, c.t.recompute_modules);
    k.input = kept_bytes(terms, Recompute::full);
    k.unsaved = transient_bytes(terms);
    if (c.t.recompute == Recompute::selective) k.rerun_unsaved = transient_bytes(terms, c.t.recompute_modules);
  }
  return kinds;
}

// What one layer holds at once beyond the saved activations, the largest over the chunk: any
// layer's forward holds its unsaved terms (MoE dispatch copies); under selective recomputation a
// layer's discarded outputs come back one layer at a time, with the unsaved terms the rerun modules
// re-create; under full recomputation a whole group of N layers (uniform) or one checkpointed
// layer (block) is rerun, and the rerun forward of one of its layers holds that layer's unsaved
// terms as well.
LayerTransient chunk_transient(const EvalContext& c, const Chunk& ch, const ChunkLayerCounts& counts,
                               const ClassBytes& kinds, std::int64_t blocks_before) {
  const auto& t = c.t;
  const std::size_t mtp_class = c.model.mtp_class();
  const auto kind_at = [&](std::int64_t l) { return l < ch.num_layers ? c.model.class_at(ch.first_layer + l) : mtp_class; };
  const auto of = [&](std::size_t k) -> const KindBytes& { return kinds[k]; };
  const std::int64_t n = ch.num_layers + ch.mtp_depths;
  LayerTransient best;
  const auto consider = [&](const LayerTransient& candidate) {
    if (candidate.total() > best.total()) best = candidate;
  };
  const bool full = t.recompute == Recompute::full;
  Bytes forward;
  std::size_t forward_class = 0;
  for (std::int64_t l = 0; l < n; ++l) {
    consider({Bytes{}, of(kind_at(l)).unsaved, kind_at(l), false, Bytes{}, 0});
    if (of(kind_at(l)).unsaved > forward) {
      forward = of(kind_at(l)).unsaved;
      forward_class = kind_at(l);
    }
  }
  if (!full) {
    for (const std::size_t k : c.cm.classes) {
      const auto& kb = of(k);
      if (counts.mode[k] > 0) {
        consider({Bytes(kb.all.value() - kb.kept.value()), kb.rerun_unsaved, k, true, Bytes{}, 0});
      }
    }
  } else {
    // Uniform: groups of N from the first layer; block: the first N layers, one at a time; every:
    // each checkpointed block, one at a time.
    const FullGroups groups = full_groups(t, blocks_before);
    const bool uniform = groups.method == RecomputeMethod::uniform;
    const bool every = groups.method == RecomputeMethod::every;
    const std::int64_t groups_end = uniform ? n : every ? ch.num_layers : std::min(n, groups.size);
    const std::int64_t size = uniform ? groups.size : 1;
    for (std::int64_t g = 0; g < groups_end; g += size) {
      if (every && !groups.every_checkpoints(g)) continue;
      LayerTransient group;
      for (std::int64_t l = g; l < std::min(groups_end, g + size); ++l) {
        // The group's first input is the checkpoint's saved input, which the rerun reads in place
        // (counted among the kept activations): what it re-creates is the rest.
        const Bytes input = l == g && c.profile.recompute_reuses_input ? of(kind_at(l)).input : Bytes{};
        group.recomputed += Bytes(of(kind_at(l)).all.value() - std::min(input.value(), of(kind_at(l)).all.value()));
        if (of(kind_at(l)).unsaved > group.unsaved) {
          group.unsaved = of(kind_at(l)).unsaved;
          group.unsaved_class = kind_at(l);
        }
      }
      consider(group);
    }
  }
  best.forward_unsaved = forward;
  best.forward_class = forward_class;
  return best;
}

// chunk_layer_counts; without full recomputation every layer keeps what the mode keeps, so the
// counts are the chunk's layers of each kind, from the compiled model's prefix counts.
ChunkLayerCounts layer_counts(const EvalContext& c, const Chunk& ch, std::int64_t blocks_before) {
  if (c.t.recompute == Recompute::full) return chunk_layer_counts(c.model, ch, c.t, blocks_before);
  ChunkLayerCounts counts;
  for (const std::size_t k : c.cm.classes) counts.mode[k] = c.cm.layers_in(k, ch.first_layer, ch.num_layers);
  counts.mode[c.model.mtp_class()] += ch.mtp_depths;
  return counts;
}

// Megatron's EP all-to-all overlap (--overlap-moe-expert-parallel-comm; Megatron-LM d98e8a64,
// pipeline_parallel/combined_1f1b.py and schedules.py get_pp_rank_microbatches): one more warm-up
// forward, then every steady step runs one micro-batch's forward and another's backward layer by
// layer (combined_forward_backward_step). The micro-batches held before a step are as many as
// 1F1B holds after its steady forward, so the schedule's count stands; during the step the
// forward's current layer, its kept and its unsaved tensors, is held beside the backward. Under PR
// 6429's full recomputation (37f1af1036) a segment's layers drop their activations once the
// segment has run forward: its current layer holds all it would save, and its unsaved tensors.
Bytes combined_forward_layer(const EvalContext& c, const ChunkLayerCounts& counts, const ClassBytes& kinds) {
  if (!c.t.ep_overlap) return Bytes{};
  const bool full = c.t.recompute == Recompute::full;
  Bytes largest;
  for (const std::size_t k : c.cm.classes) {
    if (full ? counts.input[k] + counts.whole[k] > 0 : counts.mode[k] > 0) {
      largest = std::max(largest, (full ? kinds[k].all : kinds[k].kept) + kinds[k].unsaved);
    }
  }
  return largest;
}

// Transformer Engine's CPU offload of activations (Megatron's --cpu-offloading-num-layers N, pp 1;
// TransformerBlock wraps each decoder layer in get_cpu_offload_context). TE d0067d0d
// transformer_engine/pytorch/cpu_offload.py DefaultOffloadSynchronizer._init_offload_synchronization_dicts
// offloads layers 0..N-1; layer i's offload finishes before layer L-N+i's forward and its reload
// starts after layer L-1-N+i's backward, so at most L-N consecutive decoder layers' saved tensors
// are on the GPU at once ("(num_layers - num_offloaded_layers) * T"). With layers of several
// classes the largest such window counts; the N offloaded layers' tensors are in host memory. MTP
// depths sit outside the block and stay on the GPU.
using ClassCounts = std::array<std::int64_t, kLayerClasses>;
struct Offload {
  ClassCounts gpu{}, host{}, all{};  // decoder layers of each class
};

std::int64_t of_kind(const ModelSpec& m, const ClassCounts& n, LayerKind kind) {
  std::int64_t sum = 0;
  for (std::size_t k = 0; k < kLayerClasses; ++k) sum += m.class_kind(k) == kind ? n[k] : 0;
  return sum;
}

Bytes kept_in(const ClassBytes& kinds, const ClassCounts& n) {
  Bytes b;
  for (std::size_t k = 0; k < kLayerClasses; ++k) b += times(kinds[k].kept, n[k], "offload");
  return b;
}

Offload cpu_offload(const EvalContext& c, const Chunk& ch, const ClassBytes& kinds) {
  Offload o;
  const std::int64_t n = c.t.cpu_offload_layers, l = ch.num_layers;
  const auto split = [&](std::int64_t first, std::int64_t count) {
    ClassCounts s{};
    for (std::size_t k = 0; k < kLayerClasses; ++k) s[k] = c.cm.layers_in(k, first, count);
    return s;
  };
  o.all = split(ch.first_layer, l);
  o.host = split(ch.first_layer, n);
  std::uint64_t best = 0;
  for (std::int64_t i = 0; i <= n; ++i) {
    const auto w = split(ch.first_layer + i, l - n);
    const std::uint64_t bytes = kept_in(kinds, w).value();
    if (i == 0 || bytes > best) {
      best = bytes;
      o.gpu = w;
    }
  }
  return o;
}

// The chunk's layer counts with the offloaded layers taken off the GPU.
void apply_offload(const EvalContext& c, const Chunk& ch, const ClassBytes& kinds, ChunkLayerCounts& counts) {
  if (c.t.cpu_offload_layers == 0 || ch.num_layers == 0) return;
  const Offload o = cpu_offload(c, ch, kinds);
  for (std::size_t k = 0; k < kLayerClasses; ++k) counts.mode[k] -= o.all[k] - o.gpu[k];
}

Bytes chunk_extras(const EvalContext& c, const Chunk& ch, Acts& acts) {
  const ChunkKey key{ch.embedding, ch.loss, ch.mtp_depths};
  auto found = acts.extras.find(key);
  if (found == acts.extras.end()) {
    thread_local std::vector<ActivationTerm> extra;
    extra.clear();
    chunk_terms(c.profile, c.activation_context(), ch, extra);
    found = acts.extras.emplace(key, kept_bytes(extra, Recompute::none)).first;
  }
  return found->second;
}

}  // namespace

void chunk_activations(const EvalContext& c, EvalCache* cache, ChunkActivations& out, const StageReport* only) {
  const auto& p = c.layout.config;
  const ActKey key{p.tp, p.cp, p.ep, p.etp_degree(), p.sp, c.vocab, c.attention, c.t.batch(), c.t.recomputation(),
                   c.t.numerics(), c.t.routing(), c.t.fsdp(), c.t.finetuning()};
  Acts local;
  Acts* acts = nullptr;
  if (cache != nullptr) {
    acts = cache->acts.find(key);
  }
  out.bytes.assign(c.layout.chunks.size(), Bytes{});
  out.transient.assign(c.layout.chunks.size(), LayerTransient{});
  out.combined_forward.assign(c.layout.chunks.size(), Bytes{});
  try {
    if (acts == nullptr) {
      local.kinds = kind_bytes(c);
      acts = cache != nullptr ? &cache->acts.insert(key, std::move(local)) : &local;
    }
    // A chunk's costs depend on the key and its place in the model only: each place is costed once.
    const auto cost_chunk = [&](std::size_t i) {
      const auto& ch = c.layout.chunks[i];
      const std::int64_t before = every_block(c.t) ? blocks_before_chunk(c.layout, static_cast<std::int64_t>(i)) : 0;
      const ChunkShape shape{ch.first_layer, ch.num_layers, ch.first_mtp, ch.mtp_depths, ch.embedding, ch.loss, before};
      const ChunkCost* found = acts->chunks.find(shape);
      if (found == nullptr) {
        ChunkLayerCounts counts = layer_counts(c, ch, before);
        apply_offload(c, ch, acts->kinds, counts);
        Bytes b;
        for (const std::size_t k : c.cm.classes) {
          const auto& kb = acts->kinds[k];
          b += times(kb.all, counts.whole[k], "activations") + times(kb.kept, counts.mode[k], "activations") +
               times(kb.input, counts.input[k], "activations");
        }
        const ChunkCost cost{b + chunk_extras(c, ch, *acts), chunk_transient(c, ch, counts, acts->kinds, before),
                             combined_forward_layer(c, counts, acts->kinds)};
        found = &acts->chunks.insert(shape, cost);
      }
      out.bytes[i] = found->bytes;
      out.transient[i] = found->transient;
      out.combined_forward[i] = found->combined_forward;
    };
    if (only != nullptr) {
      for (const auto ci : only->chunks) cost_chunk(idx(ci));
    } else {
      for (std::size_t i = 0; i < c.layout.chunks.size(); ++i) cost_chunk(i);
    }
  } catch (const OverflowError&) {
    throw InputError("--micro-batch/--seq-len", fmt::format("{} x {}", c.t.micro_batch, c.t.seq_len),
                     "a batch and sequence whose activation sizes fit in 64 bits");
  }
}

void stage_activations(const EvalContext& c, const ChunkActivations& chunks, Bytes cp_kv_block, StageReport& st) {
  const auto& p = c.layout.config;
  for (const auto ci : st.chunks) {
    st.chunk_activations.push_back(chunks.bytes[idx(ci)]);
    st.activations_per_microbatch += chunks.bytes[idx(ci)];
  }
  if (c.profile.single_microbatch) {
    st.chunk_in_flight.assign(st.chunks.size(), 1);
    st.in_flight_microbatches = 1;
  } else {
    thread_local InFlight f;
    thread_local std::vector<std::uint64_t> weights;
    weights.clear();
    for (const auto& b : st.chunk_activations) weights.push_back(b.value());
    in_flight_into(p.schedule, st.stage, p.pp, st.model_chunks, c.microbatches, f, weights);
    st.chunk_in_flight.assign(f.per_chunk.begin(), f.per_chunk.end());
    st.in_flight_microbatches = f.total;
  }
  if (c.profile.recompute_transient) {
    for (const auto ci : st.chunks) {
      if (chunks.transient[idx(ci)].total() > st.transient.total()) st.transient = chunks.transient[idx(ci)];
    }
  }
  for (const auto ci : st.chunks) st.combined_forward = std::max(st.combined_forward, chunks.combined_forward[idx(ci)]);
  // The data loader's batch, on the chunks that receive one, beside the micro-batches in flight
  // (the one in forward among them): while that micro-batch runs forward, with one layer's unsaved
  // terms; or, split for context parallelism, in full before that forward has allocated anything
  // of its own (its chunk's tensors, counted among those in flight, are not there yet).
  if (c.profile.input_batch != nullptr) {
    for (std::size_t i = 0; i < st.chunks.size(); ++i) {
      const auto& ch = c.layout.chunks[idx(st.chunks[i])];
      if (!ch.embedding && !ch.loss && ch.mtp_depths == 0) continue;
      const InputBatch b = c.profile.input_batch(c.activation_context(), ch.embedding || ch.mtp_depths > 0,
                                                 ch.loss || ch.mtp_depths > 0);
      const LayerTransient& lt = chunks.transient[idx(st.chunks[i])];
      const std::uint64_t own = st.chunk_activations[i].value();
      // Under the EP all-to-all overlap the batch sits beside a backward: the whole batch while it
      // is split, else the forward's (the micro-batch's own tensors are counted in flight anyway).
      if (st.combined_forward.value() > 0) {
        const Bytes beside = std::max(b.forward, b.at_load);
        if (beside > st.input_batch.total()) st.input_batch = BatchMoment{beside, Bytes{}, b.forward, 0, b.rule, b.at_load > b.forward};
        continue;
      }
      const Bytes at_load(b.at_load.value() > own ? b.at_load.value() - own : 0);
      const Bytes forward = b.forward + lt.forward_unsaved;
      if (std::max(forward, at_load) > st.input_batch.total()) {
        st.input_batch = forward >= at_load ? BatchMoment{b.forward, lt.forward_unsaved, b.forward, lt.forward_class, b.rule, false}
                                            : BatchMoment{at_load, Bytes{}, b.forward, 0, b.rule, true};
      }
    }
  }
  // The loss's backward comes after the last forward and before any layer's recomputation: the
  // larger of it and the layer transient enters.
  if (c.profile.loss_peak != nullptr && st.has_head) st.loss = c.profile.loss_peak(c.activation_context());
  // Ring attention (context parallelism over p2p): the K and V block being sent and the one being
  // received for the layer in flight.
  if (c.profile.models_fp8_and_routing && p.cp > 1 && st.layers.num_layers > 0) {
    st.cp_ring_buffers = Bytes(checked_mul(cp_kv_block.value(), 2, "cp ring buffers"));
  }
}

namespace {

std::string layers_text(std::int64_t n) { return n == 1 ? "1 layer" : fmt::format("{} layers", n); }

// How the ledger names a layer class: its FFN kind, and "linear-attention" for Gated DeltaNet,
// "mamba" for Mamba-2, a block of one MLP or MoE alone (Nemotron-H's) by that; a
// Nemotron-NAS class its block shape (ModelSpec::nas_shapes, numbered from 0).
std::string class_name(const ModelSpec& m, std::size_t cls) {
  static constexpr std::array<std::string_view, 10> kNames = {
      "dense", "moe", "dense linear-attention", "moe linear-attention", "dense mamba", "moe mamba", "MLP block",
      "MoE block", "dense sliding-window", "moe sliding-window"};
  if (m.nas_classes()) {
    return fmt::format("NAS block shape {}{}", cls, m.class_mixer(cls) == MixerKind::none ? " (no attention)" : "");
  }
  return std::string(kNames[cls]);
}

// Every saved tensor of one held chunk, times its layers and the chunk's micro-batches in flight.
void record_chunk_terms(const EvalContext& c, std::int64_t chunk, std::int64_t mb, Ledger& ledger) {
  const auto& ch = c.layout.chunks[idx(chunk)];
  ChunkLayerCounts counts = chunk_layer_counts(c.model, ch, c.t, every_block(c.t) ? blocks_before_chunk(c.layout, chunk) : 0);
  apply_offload(c, ch, kind_bytes(c), counts);
  const std::string where = fmt::format("chunk {}", chunk);
  for (std::size_t ki = 0; ki < kLayerClasses; ++ki) {
    if (counts.whole[ki] == 0 && counts.mode[ki] == 0 && counts.input[ki] == 0) continue;
    const auto terms =
        layer_activation_terms(c.profile, c.cm.shape_model(ki), c.layout, c.t, c.model.class_kind(ki), c.model.class_mixer(ki));
    const std::string kind_name = class_name(c.model, ki);
    for (const auto& term : terms) {
      // Whole layers keep what no recomputation keeps, the mode's layers what the mode keeps,
      // checkpointed ones their input (the same rules as kept_bytes, so the items sum to the totals).
      std::int64_t count = 0;
      if (is_kept(term, Recompute::none, 0)) count += counts.whole[ki];
      if (is_kept(term, c.t.recompute, c.t.recompute_modules)) count += counts.mode[ki];
      if (is_kept(term, Recompute::full, 0)) count += counts.input[ki];
      if (count == 0) continue;
      ledger.add(Category::activations, times(times(term.bytes(), count, "activations"), mb, "activations"), [&] {
        return ledger_item(std::string(name_of(term.module)), std::string(term.name),
                           fmt::format("{} ({}, {}) x {} {} x {} micro-batches, {}", term.elements.value(), term.rule,
                                       name_of(term.dtype), layers_text(count), kind_name, mb, where),
                           term.elements, term.dtype, count * mb);
      });
    }
  }
  std::vector<ActivationTerm> extra;
  chunk_terms(c.profile, c.activation_context(), ch, extra);
  for (const auto& term : extra) {
    ledger.add(Category::activations, times(term.bytes(), mb, "activations"), [&] {
      return ledger_item(std::string(name_of(term.module)), std::string(term.name),
                         fmt::format("{} ({}, {}) x {} micro-batches, {}", term.elements.value(), term.rule,
                                     name_of(term.dtype), mb, where),
                         term.elements, term.dtype, mb);
    });
  }
}

// The layer transient: what a recomputation brings back, and the unsaved tensors of the layer whose
// forward (or selective rerun) sets it.
void record_layer_transient(const EvalContext& c, const LayerTransient& lt, Ledger& ledger) {
  if (lt.recomputed.value() > 0) {
    ledger.add(Category::activations, lt.recomputed, [] {
      return ledger_item("recompute", "recomputation transient", "the largest layer or group recomputed at once during backward");
    });
  }
  if (lt.unsaved.value() == 0) return;
  if (!ledger.detail()) {
    ledger.add(Category::activations, lt.unsaved, [] { return LedgerItem{}; });
    return;
  }
  const auto terms = layer_activation_terms(c.profile, c.cm.shape_model(lt.unsaved_class), c.layout, c.t,
                                            c.model.class_kind(lt.unsaved_class), c.model.class_mixer(lt.unsaved_class));
  for (const auto& term : terms) {
    if (!term.transient || (lt.rerun && (term.dropped_by & c.t.recompute_modules) == 0)) continue;
    ledger.add(Category::activations, term.bytes(), [&] {
      return ledger_item(std::string(name_of(term.module)), std::string(term.name),
                         fmt::format("{} ({}, {}) while one {} layer computes, not saved", term.elements.value(),
                                     term.rule, name_of(term.dtype), class_name(c.model, lt.unsaved_class)),
                         term.elements, term.dtype, 1);
    });
  }
}

void record_input_batch(const BatchMoment& b, Ledger& ledger) {
  if (b.batch.value() == 0) return;
  ledger.add(Category::activations, b.batch, [&] {
    return ledger_item("input", "data loader batch",
                       b.whole ? fmt::format("{}, whole while it is split for context parallelism (beside its slices), "
                                             "before that micro-batch's forward",
                                             b.rule)
                               : fmt::format("{}, one micro-batch in forward", b.rule));
  });
}

void record_ring_buffers(const StageReport& st, Ledger& ledger) {
  if (st.cp_ring_buffers.value() > 0) {
    ledger.add(Category::activations, st.cp_ring_buffers, [] {
      return ledger_item("attention", "context-parallel ring buffers", "2 x one layer's local K and V block");
    });
  }
}

// The offloaded layers' saved tensors, in host memory (pinned buffers, one micro-batch: pp 1).
void record_offloaded(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  if (c.t.cpu_offload_layers == 0) return;
  const auto kinds = kind_bytes(c);
  for (const auto ci : st.chunks) {
    const auto& ch = c.layout.chunks[idx(ci)];
    if (ch.num_layers == 0) continue;
    const Offload o = cpu_offload(c, ch, kinds);
    const Bytes host = kept_in(kinds, o.host);
    ledger.add(Category::host, host, [&] {
      return ledger_item("offload", "offloaded activations (CPU memory)",
                         fmt::format("the first {} decoder layers' saved tensors ({} dense, {} moe), one micro-batch",
                                     c.t.cpu_offload_layers, of_kind(c.model, o.host, LayerKind::dense), of_kind(c.model, o.host, LayerKind::moe)));
    });
  }
}

}  // namespace

void record_activations(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  for (std::size_t i = 0; i < st.chunks.size(); ++i) {
    const std::int64_t mb = st.chunk_in_flight[i];
    if (mb == 0) continue;
    if (ledger.detail()) record_chunk_terms(c, st.chunks[i], mb, ledger);
    else ledger.add(Category::activations, times(st.chunk_activations[i], mb, "activation bytes"), [] { return LedgerItem{}; });
  }
  // One moment beyond the micro-batches in flight: the loss's backward, a layer computing or
  // recomputed, or a forward beside the data loader's batch, whichever is largest. Under the EP
  // all-to-all overlap a forward runs beside every backward, its batch with it.
  const bool combined = st.combined_forward.value() > 0;
  const Bytes batch_moment = combined ? Bytes{} : st.input_batch.total();
  if (st.loss.allocated > st.transient.total() && st.loss.allocated >= batch_moment) {
    ledger.add(Category::activations, st.loss.allocated, [&] {
      return ledger_item("output_head", "loss backward transient",
                         fmt::format("{} (more than the recomputation transient)", st.loss.rule));
    });
  } else if (batch_moment > st.transient.total()) {
    record_input_batch(st.input_batch, ledger);
    record_layer_transient(c, LayerTransient{Bytes{}, st.input_batch.unsaved, st.input_batch.unsaved_class, false, Bytes{}, 0}, ledger);
  } else {
    record_layer_transient(c, st.transient, ledger);
  }
  if (combined) {
    ledger.add(Category::activations, st.combined_forward, [] {
      return ledger_item("pipeline", "next micro-batch's layer in forward",
                         "EP all-to-all overlap: one layer's saved (under full recomputation: all it saves until "
                         "its segment ends) and unsaved tensors, beside the backward (combined 1F1B)");
    });
    record_input_batch(st.input_batch, ledger);
  }
  record_ring_buffers(st, ledger);
  record_offloaded(c, st, ledger);
}

}  // namespace detail
}  // namespace moemem
