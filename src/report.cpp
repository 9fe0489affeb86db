#include "moemem/report.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "moemem/sharding.hpp"

namespace moemem {

namespace {

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

// The chunk (model order) of every tensor position: decoder layers and MTP depths by index.
struct ChunkMap {
  std::int64_t embedding = 0, loss = 0;
  std::vector<std::int64_t> layer, mtp;

  ChunkMap(const Layout& layout, const ModelSpec& m)
      : embedding(layout.chunk_with_embedding()), loss(layout.chunk_with_loss()) {
    layer.assign(static_cast<std::size_t>(m.num_layers), 0);
    mtp.assign(static_cast<std::size_t>(m.mtp_layers), loss);
    for (std::size_t c = 0; c < layout.chunks.size(); ++c) {
      const auto& ch = layout.chunks[c];
      for (std::int64_t l = 0; l < ch.num_layers; ++l) layer[static_cast<std::size_t>(ch.first_layer + l)] = static_cast<std::int64_t>(c);
      for (std::int64_t k = 0; k < ch.mtp_depths; ++k) {
        if (ch.first_mtp + k < m.mtp_layers) mtp[static_cast<std::size_t>(ch.first_mtp + k)] = static_cast<std::int64_t>(c);
      }
    }
  }

  [[nodiscard]] std::int64_t of(const Tensor& t, std::int64_t num_layers) const {
    switch (t.placement) {
      case Placement::embedding: return embedding;
      case Placement::decoder: return layer[static_cast<std::size_t>(t.layer)];
      case Placement::head: return loss;
      case Placement::mtp: return mtp[static_cast<std::size_t>(t.layer - num_layers)];
    }
    return 0;
  }
};

Bytes times(Bytes b, std::int64_t n, const char* what) {
  return Bytes(checked_mul(b.value(), static_cast<std::uint64_t>(n), what));
}

}  // namespace

std::vector<ActivationTerm> layer_activation_terms(const Profile& profile, const ModelSpec& m, const Layout& layout,
                                                   const TrainingConfig& t, LayerKind kind) {
  std::vector<ActivationTerm> terms;
  const std::int64_t vocab = padded_vocab(m.vocab, t.vocab_multiple.value_or(profile.vocab_multiple), layout.config.tp);
  profile.layer_activations(ActivationContext{m, layout, t, t.attention.value_or(profile.default_attention), vocab},
                            kind, terms);
  return terms;
}

MemoryReport analyze(const ModelSpec& m, const Inventory& inv, const Profile& profile, const Layout& layout,
                     const TrainingConfig& t) {
  validate_training(t, layout);
  const auto& p = layout.config;
  if (!profile.models_fp8_and_routing) {
    if (t.fp8 != Fp8Recipe::none) {
      throw InputError("--fp8", std::string(name_of(t.fp8)), fmt::format("none for the {} profile (BF16 only)", profile.name));
    }
    if (t.moe_imbalance != 1.0 || t.moe_capacity_factor || t.deepep) {
      throw InputError("--moe-imbalance/--moe-capacity-factor/--moe-token-dispatcher", "set",
                       fmt::format("balanced routing with all-to-all dispatch for the {} profile", profile.name));
    }
  }
  const AttentionKernel attention = t.attention.value_or(profile.default_attention);
  if (attention == AttentionKernel::flash && !profile.supports_flash) {
    throw InputError("--attention", "flash", fmt::format("eager for the {} profile (it models materialised scores)", profile.name));
  }
  const std::int64_t vocab = padded_vocab(m.vocab, t.vocab_multiple.value_or(profile.vocab_multiple), p.tp);

  MemoryReport r;
  r.model_name = m.name;
  r.profile = std::string(profile.name);
  r.layout = layout;
  r.training = t;
  r.attention = attention;
  r.microbatches = microbatches_per_step(t, layout);
  r.padded_vocab = vocab;
  r.overhead = profile.overhead;
  for (const auto a : profile.assumptions) r.assumptions.emplace_back(a);

  const auto num_ranks = static_cast<std::int64_t>(layout.rank_chunks.size());
  r.stages.resize(idx(num_ranks));
  for (std::int64_t s = 0; s < num_ranks; ++s) {
    auto& st = r.stages[idx(s)];
    st.stage = s;
    st.layers = layout.stages[idx(s)];
    st.chunks = layout.rank_chunks[idx(s)];
    st.model_chunks = static_cast<std::int64_t>(st.chunks.size());
    for (const auto c : st.chunks) {
      const auto& ch = layout.chunks[idx(c)];
      st.has_embedding = st.has_embedding || ch.embedding;
      st.has_head = st.has_head || ch.loss;
      st.mtp_depths += ch.mtp_depths;
      if (ch.num_layers > 0) st.last_layer = std::max(st.last_layer, ch.first_layer + ch.num_layers - 1);
    }
  }

  // Parameters: one pass over the inventory; a chunk held by two ranks (DualPipe) counts on both.
  std::vector<std::vector<std::int64_t>> holders(layout.chunks.size());
  for (std::int64_t s = 0; s < num_ranks; ++s) {
    for (const auto c : layout.rank_chunks[idx(s)]) holders[idx(c)].push_back(s);
  }
  const ChunkMap chunk_map(layout, m);
  const std::int64_t embedding_chunk = chunk_map.embedding, loss_chunk = chunk_map.loss;
  for (const auto& tensor : inv.tensors) {
    if (!profile.accounts(tensor)) continue;
    r.total_params += tensor.params();
    const Count c = device_params(tensor, profile, p, vocab);
    for (const auto s : holders[idx(chunk_map.of(tensor, m.num_layers))]) {
      // MTP's embedding/head copies are the main model's own tensors on a rank that holds those.
      if (tensor.shared_in_training &&
          layout.rank_holds(s, tensor.role == Role::mtp_embedding ? embedding_chunk : loss_chunk)) {
        continue;
      }
      auto& st = r.stages[idx(s)];
      (profile.zero_group(tensor.role) == ZeroGroup::expert ? st.params.expert : st.params.non_expert) += c;
      st.params_by_module[static_cast<std::size_t>(tensor.module)] += c;
      if (t.fp8 != Fp8Recipe::none && fp8_gemm_weight(tensor.role)) st.fp8_weight_params += c;
    }
  }

  // Activations: the terms of one layer of each kind, once; then each chunk's layers (decoder and
  // MTP) under the recomputation mode, plus the chunk's extras (embedding, loss), always kept.
  struct KindBytes {
    Bytes all, kept, input;  // nothing recomputed; kept under the mode; kept under full recompute
  };
  std::array<KindBytes, 2> kinds{};
  std::vector<Bytes> chunk_bytes(layout.chunks.size()), chunk_transient(layout.chunks.size());
  try {
    for (const LayerKind kind : {LayerKind::dense, LayerKind::moe}) {
      if (kind == LayerKind::moe && !m.is_moe()) continue;
      const auto terms = layer_activation_terms(profile, m, layout, t, kind);
      auto& k = kinds[static_cast<std::size_t>(kind)];
      k.all = kept_bytes(terms, Recompute::none);
      k.kept = kept_bytes(terms, t.recompute, t.recompute_modules);
      k.input = kept_bytes(terms, Recompute::full);
    }
    const ActivationContext ctx{m, layout, t, attention, vocab};
    const LayerKind mtp_kind = m.is_moe() ? LayerKind::moe : LayerKind::dense;
    for (std::size_t c = 0; c < layout.chunks.size(); ++c) {
      const auto& ch = layout.chunks[c];
      std::vector<LayerKind> layers;
      for (std::int64_t l = 0; l < ch.num_layers; ++l) layers.push_back(m.layer_kinds[idx(ch.first_layer + l)]);
      for (std::int64_t k = 0; k < ch.mtp_depths; ++k) layers.push_back(mtp_kind);
      const auto kb = [&](LayerKind k) -> const KindBytes& { return kinds[static_cast<std::size_t>(k)]; };
      Bytes b, transient;
      const auto n = static_cast<std::int64_t>(layers.size());
      if (t.recompute != Recompute::full) {
        for (const auto k : layers) {
          b += kb(k).kept;
          // Output-discarding modules are recomputed one layer at a time during backward.
          transient = std::max(transient, Bytes(kb(k).all.value() - kb(k).kept.value()));
        }
      } else if (t.recompute_method == RecomputeMethod::uniform) {
        // Groups of N layers are checkpointed together: one input kept per group, and a whole
        // group's activations live while it is recomputed.
        for (std::int64_t g = 0; g < n; g += t.recompute_num_layers) {
          b += kb(layers[idx(g)]).input;
          Bytes group;
          for (std::int64_t l = g; l < std::min(n, g + t.recompute_num_layers); ++l) group += kb(layers[idx(l)]).all;
          transient = std::max(transient, group);
        }
      } else {
        // block: the first N layers of the chunk are checkpointed one by one, the rest kept whole.
        for (std::int64_t l = 0; l < n; ++l) {
          const auto& k = kb(layers[idx(l)]);
          if (l < t.recompute_num_layers) {
            b += k.input;
            transient = std::max(transient, k.all);
          } else {
            b += k.all;
          }
        }
      }
      std::vector<ActivationTerm> extra;
      profile.chunk_activations(ctx, ch, extra);
      b += kept_bytes(extra, Recompute::none);
      chunk_bytes[c] = b;
      chunk_transient[c] = transient;
    }
  } catch (const OverflowError&) {
    throw InputError("--micro-batch/--seq-len", fmt::format("{} x {}", t.micro_batch, t.seq_len),
                     "a batch and sequence whose activation sizes fit in 64 bits");
  }

  // Outside the allocator: the CUDA context, the world communicator and one per further
  // process-group dimension the layout creates (tp, pp, dp, cp, ep, etp, expert dp).
  Bytes runtime = profile.overhead.cuda_context;
  if (layout.world_size > 1) runtime += profile.overhead.nccl_world;
  for (const std::int64_t g : {p.tp, p.pp, p.dp, p.cp, p.ep, p.etp, layout.edp}) {
    if (g > 1 && layout.world_size > 1) runtime += profile.overhead.nccl_per_group;
  }
  // Context parallelism's ring: one layer's local K and V block.
  Bytes cp_kv_block;
  if (p.cp > 1) {
    const std::int64_t tokens = t.micro_batch * (t.seq_len / p.cp);
    const std::int64_t kv_heads = (m.attention == AttentionKind::mla ? m.num_heads : m.num_kv_heads) / p.tp;
    const std::int64_t dims = m.attention == AttentionKind::mla
                                  ? m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim
                                  : 2 * m.head_dim;
    cp_kv_block = bytes_of(Count(checked_mul(checked_mul(static_cast<std::uint64_t>(tokens), static_cast<std::uint64_t>(kv_heads),
                                                         "cp ring"), static_cast<std::uint64_t>(dims), "cp ring")),
                           t.activation_dtype);
  }

  const auto dense_group = p.dp * p.cp;
  for (auto& st : r.stages) {
    for (const auto c : st.chunks) {
      st.chunk_activations.push_back(chunk_bytes[idx(c)]);
      st.activations_per_microbatch += chunk_bytes[idx(c)];
    }
    if (profile.single_microbatch) {
      st.in_flight_microbatches = 1;
      st.bytes.activations = st.activations_per_microbatch;
    } else {
      const InFlight f = in_flight(p.schedule, st.stage, p.pp, st.model_chunks, r.microbatches);
      st.in_flight_microbatches = f.total;
      for (std::size_t i = 0; i < st.chunks.size(); ++i) {
        st.bytes.activations += times(st.chunk_activations[i], f.per_chunk[i], "activation bytes");
      }
    }
    if (profile.recompute_transient && t.recompute != Recompute::none) {
      for (const auto c : st.chunks) st.recompute_transient = std::max(st.recompute_transient, chunk_transient[idx(c)]);
      st.bytes.activations += st.recompute_transient;
    }
    if (profile.models_fp8_and_routing && p.cp > 1 && st.layers.num_layers > 0) {
      // Ring attention (context parallelism over p2p): the K and V block being sent and the one
      // being received for the layer in flight.
      st.cp_ring_buffers = Bytes(checked_mul(cp_kv_block.value(), 2, "cp ring buffers"));
      st.bytes.activations += st.cp_ring_buffers;
    }
    const StateBytes sb = state_bytes(st.params, dense_group, layout.edp, t.zero, t.precision);
    st.bytes.weights = sb.weights;
    if (t.fp8 != Fp8Recipe::none) {
      // Row- and column-wise FP8 copies of every FP8-GEMM weight, and their scales.
      const Count copies(checked_mul(st.fp8_weight_params.value(), 2, "fp8 weights"));
      const Count scales = t.fp8 == Fp8Recipe::blockwise ? Count(ceil_div(copies.value(), 128 * 128))
                           : t.fp8 == Fp8Recipe::mxfp8   ? fp8_scale_elements(copies, t.fp8)
                                                         : Count(2);
      st.fp8_weight_copies = bytes_of(copies, DType::fp8) + bytes_of(scales, fp8_scale_dtype(t.fp8));
      st.bytes.weights += st.fp8_weight_copies;
    }
    st.bytes.gradients = sb.gradients;
    st.bytes.optimizer = sb.optimizer;
    std::uint64_t milli_pct = 0;  // thousandths of a percent, so integral percentages stay exact
    switch (t.overhead) {
      case OverheadPoint::none: break;
      case OverheadPoint::low:
        st.bytes.buffers = profile.overhead.buffers_low;
        milli_pct = 1000ull * profile.overhead.fragmentation_pct_low;
        break;
      case OverheadPoint::high:
        st.bytes.buffers = profile.overhead.buffers_high;
        milli_pct = 1000ull * profile.overhead.fragmentation_pct_high;
        break;
    }
    if (t.fragmentation_pct) milli_pct = static_cast<std::uint64_t>(std::llround(*t.fragmentation_pct * 1000.0));
    if (t.deepep) st.bytes.buffers += profile.overhead.deepep_buffer;
    st.bytes.fragmentation =
        Bytes(ceil_div(checked_mul(st.bytes.allocated().value(), milli_pct, "fragmentation"), 100000));
    st.bytes.runtime = runtime;
  }

  for (const auto& st : r.stages) {
    if (st.bytes.total() > r.stages[idx(r.peak_stage)].bytes.total()) r.peak_stage = st.stage;
  }
  return r;
}

std::vector<StageFit> fit(const MemoryReport& r, Bytes capacity) {
  std::vector<StageFit> out;
  for (const auto& st : r.stages) {
    const std::uint64_t total = st.bytes.total().value(), cap = capacity.value();
    StageFit f;
    f.stage = st.stage;
    f.fits = total <= cap;
    // Both are far below 2^63 for any real report; saturate rather than wrap otherwise.
    const auto diff = [](std::uint64_t a, std::uint64_t b) {
      return static_cast<std::int64_t>(std::min<std::uint64_t>(a - b, static_cast<std::uint64_t>(INT64_MAX)));
    };
    f.headroom_bytes = f.fits ? diff(cap, total) : -diff(total, cap);
    out.push_back(f);
  }
  return out;
}

}  // namespace moemem
