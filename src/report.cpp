#include "moemem/report.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <cmath>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "moemem/sharding.hpp"

namespace moemem {

namespace {

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

Bytes times(Bytes b, std::int64_t n, const char* what) {
  return Bytes(checked_mul(b.value(), static_cast<std::uint64_t>(n), what));
}

}  // namespace

ChunkLayerCounts chunk_layer_counts(const ModelSpec& m, const Chunk& ch, const TrainingConfig& t) {
  ChunkLayerCounts c;
  const LayerKind mtp_kind = m.is_moe() ? LayerKind::moe : LayerKind::dense;
  const std::int64_t n = ch.num_layers + ch.mtp_depths;
  const auto kind_at = [&](std::int64_t l) {
    return static_cast<std::size_t>(l < ch.num_layers ? m.layer_kinds[idx(ch.first_layer + l)] : mtp_kind);
  };
  for (std::int64_t l = 0; l < n; ++l) {
    if (t.recompute != Recompute::full) ++c.mode[kind_at(l)];
    else if (t.recompute_method == RecomputeMethod::uniform) {
      if (l % t.recompute_num_layers == 0) ++c.input[kind_at(l)];  // one input per group of N
    } else {
      ++(l < t.recompute_num_layers ? c.input : c.whole)[kind_at(l)];  // block: the first N checkpointed
    }
  }
  return c;
}

std::vector<ActivationTerm> layer_activation_terms(const Profile& profile, const ModelSpec& m, const Layout& layout,
                                                   const TrainingConfig& t, LayerKind kind) {
  std::vector<ActivationTerm> terms;
  const std::int64_t vocab = padded_vocab(m.vocab, t.vocab_multiple.value_or(profile.vocab_multiple), layout.config.tp);
  profile.layer_activations(ActivationContext{m, layout, t, t.attention.value_or(profile.default_attention), vocab},
                            kind, terms);
  return terms;
}

CompiledModel compile_model(const ModelSpec& m, const Inventory& inv, const Profile& profile) {
  CompiledModel cm;
  cm.model = &m;
  cm.profile = &profile;
  std::int64_t first_of_kind[2] = {-1, -1};
  for (std::int64_t l = 0; l < m.num_layers; ++l) {
    auto& f = first_of_kind[static_cast<int>(m.layer_kinds[idx(l)])];
    if (f < 0) f = l;
  }
  cm.moe_before.assign(idx(m.num_layers + 1), 0);
  for (std::int64_t l = 0; l < m.num_layers; ++l) {
    cm.moe_before[idx(l + 1)] = cm.moe_before[idx(l)] + (m.layer_kinds[idx(l)] == LayerKind::moe ? 1 : 0);
  }
  Count check;
  for (const auto& tensor : inv.tensors) {
    if (!profile.accounts(tensor)) continue;
    cm.total_params += tensor.params();
    switch (tensor.placement) {
      case Placement::embedding: cm.embedding.push_back(tensor); break;
      case Placement::head: cm.head.push_back(tensor); break;
      case Placement::mtp:
        if (tensor.layer == m.num_layers) cm.mtp_depth.push_back(tensor);
        break;
      case Placement::decoder: {
        const LayerKind kind = m.layer_kinds[idx(tensor.layer)];
        if (tensor.layer == first_of_kind[static_cast<int>(kind)]) {
          (kind == LayerKind::moe ? cm.moe_layer : cm.dense_layer).push_back(tensor);
        }
        break;
      }
    }
  }
  // Every layer of a kind must have the same tensors: recount the model from the classes.
  auto sum = [](const std::vector<Tensor>& ts) {
    Count c;
    for (const auto& x : ts) c += x.params();
    return c;
  };
  const auto moe_layers = static_cast<std::uint64_t>(m.num_moe_layers());
  const auto dense_layers = static_cast<std::uint64_t>(m.num_layers) - moe_layers;
  check += Count(checked_mul(sum(cm.dense_layer).value(), dense_layers, "parameters"));
  check += Count(checked_mul(sum(cm.moe_layer).value(), moe_layers, "parameters"));
  check += sum(cm.embedding) + sum(cm.head);
  check += Count(checked_mul(sum(cm.mtp_depth).value(), static_cast<std::uint64_t>(m.mtp_layers), "parameters"));
  if (check != cm.total_params) throw std::logic_error("compile_model: layers of one kind differ in their tensors");
  return cm;
}

MemoryReport analyze(const ModelSpec& m, const Inventory& inv, const Profile& profile, const Layout& layout,
                     const TrainingConfig& t) {
  return analyze(compile_model(m, inv, profile), layout, t);
}

namespace {

// The parameters one device holds of a group of tensors.
struct Share {
  ParamSplit params;
  std::array<Count, kModuleCount> by_module{};
  ParamSplit fp8;  // parameters whose GEMMs run in FP8, by ZeRO group

  void add(const Share& o, std::int64_t times, bool modules) {
    if (times == 0) return;
    const auto n = static_cast<std::uint64_t>(times);
    auto mul = [n](Count c) { return Count(checked_mul(c.value(), n, "parameters")); };
    params.non_expert += mul(o.params.non_expert);
    params.expert += mul(o.params.expert);
    if (modules) {
      for (std::size_t i = 0; i < kModuleCount; ++i) by_module[i] += mul(o.by_module[i]);
    }
    fp8.non_expert += mul(o.fp8.non_expert);
    fp8.expert += mul(o.fp8.expert);
  }
};

Share share_of(const std::vector<Tensor>& ts, const Profile& profile, const ParallelConfig& p, std::int64_t vocab,
               bool fp8, int shared_filter) {
  // shared_filter: 0 = tensors not shared with the main model, 1 = MTP embedding copy, 2 = head copy.
  Share s;
  for (const auto& t : ts) {
    const int kind = !t.shared_in_training ? 0 : t.role == Role::mtp_embedding ? 1 : 2;
    if (kind != shared_filter) continue;
    const Count c = device_params(t, profile, p, vocab);
    const bool expert = profile.zero_group(t.role) == ZeroGroup::expert;
    (expert ? s.params.expert : s.params.non_expert) += c;
    s.by_module[static_cast<std::size_t>(t.module)] += c;
    if (fp8 && fp8_gemm_weight(t.role)) (expert ? s.fp8.expert : s.fp8.non_expert) += c;
  }
  return s;
}

// A layer kind's activation bytes: nothing recomputed; kept under the mode; kept under full
// recomputation (its input).
struct KindBytes {
  Bytes all, kept, input;
};

struct SharesKey {
  std::int64_t tp, ep, etp, vocab;
  bool fp8;
  auto operator<=>(const SharesKey&) const = default;
};
struct Shares {
  Share dense, moe, emb, head, mtp, mtp_emb, mtp_head;
};

// Everything the activation terms depend on besides the model.
struct ActKey {
  std::int64_t tp, cp, ep, etp, micro_batch, seq_len, vocab;
  bool sp, fp8_swiglu;
  AttentionKernel attention;
  Fp8Recipe fp8;
  DType activation, logits;
  Recompute recompute;
  std::uint16_t modules;
  double imbalance, capacity;
  auto operator<=>(const ActKey&) const = default;
};
struct ChunkKey {
  bool embedding, loss;
  std::int64_t mtp;
  auto operator<=>(const ChunkKey&) const = default;
};
struct Acts {
  std::array<KindBytes, 2> kinds{};
  std::map<ChunkKey, Bytes> extras;
};

}  // namespace

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
static void fsdp2_state(StageReport& st, const Layout& layout, const TrainingConfig& t) {
  const auto& p = layout.config;
  const std::uint64_t shard_group = static_cast<std::uint64_t>(p.dp / t.dp_replicate * p.cp);
  const Count params = st.params.non_expert + st.params.expert;
  st.fsdp_shard_params = Count(ceil_div(params.value(), shard_group));
  const Count shard = st.fsdp_shard_params;
  const auto bytes = [](Count c, std::uint64_t per) { return Bytes(checked_mul(c.value(), per, "fsdp bytes")); };
  st.fsdp_blocks_kept = t.reshard == ReshardPolicy::always  ? 0
                        : t.reshard == ReshardPolicy::never ? st.layers.num_layers
                        : p.pp > 1                          ? st.layers.num_layers
                        : std::min<std::int64_t>(1, st.layers.num_layers);
  const Bytes block = t.fsdp_float8_all_gather
                          ? bytes(st.fsdp_block_fp8_params, 1) + bytes(Count(st.fsdp_block_params.value() - st.fsdp_block_fp8_params.value()), 2)
                          : bytes(st.fsdp_block_params, 2);
  st.fsdp_root_unsharded = bytes(st.fsdp_root_params, 2);
  st.fsdp_blocks_unsharded = Bytes(checked_mul(block.value(), static_cast<std::uint64_t>(st.fsdp_blocks_kept), "fsdp"));
  const Bytes backward = bytes(shard, 12) + st.fsdp_root_unsharded + st.fsdp_blocks_unsharded + st.bytes.activations;
  const Bytes step = bytes(shard, 20);
  st.optimizer_step_peak = step > backward;
  if (st.optimizer_step_peak) {
    st.bytes.weights = bytes(shard, 4);
    st.bytes.gradients = bytes(shard, 4);
    st.bytes.optimizer = bytes(shard, 12);
    st.bytes.activations = Bytes{};
  } else {
    st.bytes.weights = bytes(shard, 4) + st.fsdp_root_unsharded + st.fsdp_blocks_unsharded;
    st.bytes.gradients = Bytes{};
    st.bytes.optimizer = bytes(shard, 8);
  }
  if (shard_group > 1) {
    const Bytes two_blocks = Bytes(checked_mul(block.value(), 2, "fsdp"));
    st.fsdp_all_gather_cache = std::max(st.fsdp_root_unsharded, two_blocks);
    const Count reduced = st.fsdp_root_params + Count(checked_mul(st.fsdp_block_params.value(), 2, "fsdp"));
    st.fsdp_reduce_scatter_cache = bytes(reduced, 4) + bytes(Count(ceil_div(reduced.value(), shard_group)), 4);
  }
}

class EvalCache {
 public:
  std::map<SharesKey, Shares> shares;
  std::map<ActKey, Acts> acts;
};

void EvalCacheDeleter::operator()(EvalCache* c) const { delete c; }
EvalCachePtr make_eval_cache() { return EvalCachePtr(new EvalCache()); }

MemoryReport analyze(const CompiledModel& cm, const Layout& layout, const TrainingConfig& t) {
  MemoryReport r;
  analyze_into(cm, layout, t, r);
  return r;
}

void analyze_into(const CompiledModel& cm, const Layout& layout, const TrainingConfig& t, MemoryReport& r,
                  EvalCache* cache, bool by_module) {
  const ModelSpec& m = *cm.model;
  const Profile& profile = *cm.profile;
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
  if (!m.is_moe() && (t.moe_imbalance != 1.0 || t.moe_capacity_factor || t.deepep)) {
    throw InputError("--moe-imbalance/--moe-capacity-factor/--moe-token-dispatcher", "set",
                     fmt::format("no routing options for {}, a model without routed experts", m.name));
  }
  if (profile.fsdp2) {
    if (t.zero != 0) {
      throw InputError("--zero", std::to_string(t.zero), "0 with the torchtitan profile (FSDP2 shards parameters, gradients and states)");
    }
    if (t.fsdp_float8_all_gather && t.fp8 == Fp8Recipe::none) {
      throw InputError("--fsdp-float8-all-gather", "set", "together with --fp8 (float8 linear layers)");
    }
  } else if (t.compile || t.loss || t.reshard != ReshardPolicy::standard || t.fsdp_float8_all_gather || t.dp_replicate != 1) {
    throw InputError("--compile/--loss/--reshard-after-forward/--fsdp-float8-all-gather/--dp-replicate", "set",
                     fmt::format("the torchtitan profile (not {})", profile.name));
  }
  const AttentionKernel attention = t.attention.value_or(profile.default_attention);
  if (attention == AttentionKernel::flash && !profile.supports_flash) {
    throw InputError("--attention", "flash", fmt::format("eager for the {} profile (it models materialised scores)", profile.name));
  }
  const std::int64_t vocab = padded_vocab(m.vocab, t.vocab_multiple.value_or(profile.vocab_multiple), p.tp);

  // Every field is (re)assigned: `r` may hold a previous evaluation whose storage is reused.
  r.model_name = m.name;
  r.profile = profile.name;
  r.layout = layout;
  r.training = t;
  r.attention = attention;
  r.microbatches = microbatches_per_step(t, layout);
  r.padded_vocab = vocab;
  r.peak_stage = 0;
  r.overhead = profile.overhead;
  r.assumptions.resize(profile.assumptions.size());
  for (std::size_t i = 0; i < profile.assumptions.size(); ++i) r.assumptions[i] = profile.assumptions[i];

  const auto num_ranks = static_cast<std::int64_t>(layout.rank_chunks.size());
  r.stages.resize(idx(num_ranks));
  for (std::int64_t s = 0; s < num_ranks; ++s) {
    auto& st = r.stages[idx(s)];
    std::vector<std::int64_t> chunks = std::move(st.chunks);
    std::vector<Bytes> chunk_activations = std::move(st.chunk_activations);
    st = StageReport{};
    st.chunks = std::move(chunks);
    st.chunk_activations = std::move(chunk_activations);
    st.chunk_activations.clear();
    st.stage = s;
    st.layers = layout.stages[idx(s)];
    st.chunks.assign(layout.rank_chunks[idx(s)].begin(), layout.rank_chunks[idx(s)].end());
    st.model_chunks = static_cast<std::int64_t>(st.chunks.size());
    for (const auto c : st.chunks) {
      const auto& ch = layout.chunks[idx(c)];
      st.has_embedding = st.has_embedding || ch.embedding;
      st.has_head = st.has_head || ch.loss;
      st.mtp_depths += ch.mtp_depths;
      if (ch.num_layers > 0) st.last_layer = std::max(st.last_layer, ch.first_layer + ch.num_layers - 1);
    }
  }

  // Parameters: each tensor group's share on one device, once; then per rank, the groups of the
  // chunks it holds (a chunk held by two ranks, as in DualPipe, counts on both).
  r.total_params = cm.total_params;
  {
    const bool fp8 = t.fp8 != Fp8Recipe::none;
    auto compute_shares = [&] {
      return Shares{share_of(cm.dense_layer, profile, p, vocab, fp8, 0), share_of(cm.moe_layer, profile, p, vocab, fp8, 0),
                    share_of(cm.embedding, profile, p, vocab, fp8, 0),   share_of(cm.head, profile, p, vocab, fp8, 0),
                    share_of(cm.mtp_depth, profile, p, vocab, fp8, 0),   share_of(cm.mtp_depth, profile, p, vocab, fp8, 1),
                    share_of(cm.mtp_depth, profile, p, vocab, fp8, 2)};
    };
    Shares local;
    const Shares* sh = &local;
    if (cache != nullptr) {
      const SharesKey key{p.tp, p.ep, p.etp, vocab, fp8};
      auto it = cache->shares.find(key);
      if (it == cache->shares.end()) it = cache->shares.emplace(key, compute_shares()).first;
      sh = &it->second;
    } else {
      local = compute_shares();
    }
    const Share& dense = sh->dense;
    const Share& moe = sh->moe;
    const Share& emb = sh->emb;
    const Share& head = sh->head;
    const Share& mtp = sh->mtp;
    const Share& mtp_emb = sh->mtp_emb;
    const Share& mtp_head = sh->mtp_head;
    const std::int64_t embedding_chunk = layout.chunk_with_embedding(), loss_chunk = layout.chunk_with_loss();
    for (auto& st : r.stages) {
      Share total;
      const bool holds_embedding = layout.rank_holds(st.stage, embedding_chunk);
      const bool holds_loss = layout.rank_holds(st.stage, loss_chunk);
      for (const auto c : st.chunks) {
        const auto& ch = layout.chunks[idx(c)];
        const std::int64_t n_moe = cm.moe_layers_in(ch.first_layer, ch.num_layers);
        total.add(dense, ch.num_layers - n_moe, by_module);
        total.add(moe, n_moe, by_module);
        if (ch.embedding) total.add(emb, 1, by_module);
        if (ch.loss) total.add(head, 1, by_module);
        total.add(mtp, ch.mtp_depths, by_module);
        // MTP's embedding/head copies are the main model's own tensors on a rank holding those.
        if (!holds_embedding) total.add(mtp_emb, ch.mtp_depths, by_module);
        if (!holds_loss) total.add(mtp_head, ch.mtp_depths, by_module);
      }
      st.params = total.params;
      st.params_by_module = total.by_module;
      if (profile.fsdp2) {
        Share root;
        if (st.has_embedding) root.add(emb, 1, false);
        if (st.has_head) root.add(head, 1, false);
        st.fsdp_root_params = root.params.non_expert + root.params.expert;
        st.fsdp_block_params = dense.params.non_expert;
        st.fsdp_block_fp8_params = dense.fp8.non_expert;
      }
      st.fp8_weight_params = total.fp8.non_expert + total.fp8.expert;
      // ZeRO-3 shards the working weights, and with them their FP8 copies.
      if (t.zero >= 3) st.fp8_weight_params = zero_shard(total.fp8, p.dp * p.cp, layout.edp);
    }
  }

  // Activations: the terms of one layer of each kind, once; then each chunk's layers (decoder and
  // MTP) under the recomputation mode, plus the chunk's extras (embedding, loss), always kept.
  Acts local_acts;
  Acts* acts = nullptr;
  const ActKey act_key{p.tp, p.cp, p.ep, p.etp, t.micro_batch, t.seq_len, vocab, p.sp, t.fp8_swiglu_input, attention, t.fp8,
                       t.activation_dtype, t.logits_dtype, t.recompute, t.recompute_modules, t.moe_imbalance,
                       t.moe_capacity_factor.value_or(-1.0)};
  if (cache != nullptr) {
    const auto it = cache->acts.find(act_key);
    if (it != cache->acts.end()) acts = &it->second;
  }
  std::vector<Bytes> chunk_bytes(layout.chunks.size()), chunk_transient(layout.chunks.size());
  try {
    if (acts == nullptr) {
      for (const LayerKind kind : {LayerKind::dense, LayerKind::moe}) {
        if (kind == LayerKind::moe && !m.is_moe()) continue;
        thread_local std::vector<ActivationTerm> terms;
        terms.clear();
        profile.layer_activations(ActivationContext{m, layout, t, attention, vocab}, kind, terms);
        auto& k = local_acts.kinds[static_cast<std::size_t>(kind)];
        k.all = kept_bytes(terms, Recompute::none);
        k.kept = kept_bytes(terms, t.recompute, t.recompute_modules);
        k.input = kept_bytes(terms, Recompute::full);
      }
      acts = cache != nullptr ? &cache->acts.emplace(act_key, std::move(local_acts)).first->second : &local_acts;
    }
    const std::array<KindBytes, 2>& kinds = acts->kinds;
    const ActivationContext ctx{m, layout, t, attention, vocab};
    const LayerKind mtp_kind = m.is_moe() ? LayerKind::moe : LayerKind::dense;
    for (std::size_t c = 0; c < layout.chunks.size(); ++c) {
      const auto& ch = layout.chunks[c];
      // The chunk's layers in order: its decoder layers, then its MTP depths.
      const auto n = ch.num_layers + ch.mtp_depths;
      const auto kind_at = [&](std::int64_t l) {
        return l < ch.num_layers ? m.layer_kinds[idx(ch.first_layer + l)] : mtp_kind;
      };
      const auto kb = [&](LayerKind k) -> const KindBytes& { return kinds[static_cast<std::size_t>(k)]; };
      Bytes b, transient;
      const ChunkLayerCounts counts = chunk_layer_counts(m, ch, t);
      for (const LayerKind k : {LayerKind::dense, LayerKind::moe}) {
        const auto i = static_cast<std::size_t>(k);
        auto times = [](Bytes x, std::int64_t count) { return Bytes(checked_mul(x.value(), static_cast<std::uint64_t>(count), "activations")); };
        b += times(kb(k).all, counts.whole[i]) + times(kb(k).kept, counts.mode[i]) + times(kb(k).input, counts.input[i]);
      }
      // The transient: what is recomputed at once during backward.
      if (t.recompute != Recompute::full) {
        // Output-discarding modules, one layer at a time.
        for (const LayerKind k : {LayerKind::dense, LayerKind::moe}) {
          if (counts.mode[static_cast<std::size_t>(k)] > 0) {
            transient = std::max(transient, Bytes(kb(k).all.value() - kb(k).kept.value()));
          }
        }
      } else if (t.recompute_method == RecomputeMethod::uniform) {
        // A whole group of N layers.
        for (std::int64_t g = 0; g < n; g += t.recompute_num_layers) {
          Bytes group;
          for (std::int64_t l = g; l < std::min(n, g + t.recompute_num_layers); ++l) group += kb(kind_at(l)).all;
          transient = std::max(transient, group);
        }
      } else {
        // block: one checkpointed layer at a time.
        for (std::int64_t l = 0; l < std::min(n, t.recompute_num_layers); ++l) transient = std::max(transient, kb(kind_at(l)).all);
      }
      const ChunkKey ck{ch.embedding, ch.loss, ch.mtp_depths};
      auto found = acts->extras.find(ck);
      if (found == acts->extras.end()) {
        thread_local std::vector<ActivationTerm> extra;
        extra.clear();
        profile.chunk_activations(ctx, ch, extra);
        found = acts->extras.emplace(ck, kept_bytes(extra, Recompute::none)).first;
      }
      b += found->second;
      chunk_bytes[c] = b;
      chunk_transient[c] = transient;
    }
  } catch (const OverflowError&) {
    throw InputError("--micro-batch/--seq-len", fmt::format("{} x {}", t.micro_batch, t.seq_len),
                     "a batch and sequence whose activation sizes fit in 64 bits");
  }

  // Outside the allocator: the CUDA context, the world communicator and one per further
  // process-group dimension the layout creates (tp, pp, dp, cp, ep, etp, expert dp).
  Bytes runtime = t.cuda_context.value_or(profile.overhead.cuda_context);
  if (layout.world_size > 1) runtime += profile.overhead.nccl_world;
  for (const std::int64_t g : {p.tp, p.pp, p.dp, p.cp, p.ep, p.etp, layout.edp}) {
    if (g > 1 && layout.world_size > 1) runtime += t.nccl_per_group.value_or(profile.overhead.nccl_per_group);
  }
  if (p.tp > 1) runtime += profile.overhead.tp_device_residual;
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
  const ActivationContext loss_ctx{m, layout, t, attention, vocab};
  for (auto& st : r.stages) {
    for (const auto c : st.chunks) {
      st.chunk_activations.push_back(chunk_bytes[idx(c)]);
      st.activations_per_microbatch += chunk_bytes[idx(c)];
    }
    if (profile.single_microbatch) {
      st.in_flight_microbatches = 1;
      st.bytes.activations = st.activations_per_microbatch;
    } else {
      thread_local InFlight f;
      thread_local std::vector<std::uint64_t> weights;
      weights.clear();
      for (const auto& b : st.chunk_activations) weights.push_back(b.value());
      in_flight_into(p.schedule, st.stage, p.pp, st.model_chunks, r.microbatches, f, weights);
      st.in_flight_microbatches = f.total;
      for (std::size_t i = 0; i < st.chunks.size(); ++i) {
        st.bytes.activations += times(st.chunk_activations[i], f.per_chunk[i], "activation bytes");
      }
    }
    if (profile.recompute_transient && t.recompute != Recompute::none) {
      for (const auto c : st.chunks) st.recompute_transient = std::max(st.recompute_transient, chunk_transient[idx(c)]);
    }
    // The loss's backward comes before any layer's recomputation: the larger of the two.
    if (profile.loss_peak != nullptr && st.has_head) st.loss = profile.loss_peak(loss_ctx);
    st.bytes.activations += std::max(st.recompute_transient, st.loss.allocated);
    if (profile.models_fp8_and_routing && p.cp > 1 && st.layers.num_layers > 0) {
      // Ring attention (context parallelism over p2p): the K and V block being sent and the one
      // being received for the layer in flight.
      st.cp_ring_buffers = Bytes(checked_mul(cp_kv_block.value(), 2, "cp ring buffers"));
      st.bytes.activations += st.cp_ring_buffers;
    }
    if (profile.fsdp2) {
      fsdp2_state(st, layout, t);
    } else {
      const StateBytes sb = state_bytes(st.params, dense_group, layout.edp, t.zero, t.precision);
      st.bytes.weights = sb.weights;
      if (t.fp8 != Fp8Recipe::none && !t.fp8_online_weights) {
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
    }
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
    // The profile's percentage, plus what is known to sit in the allocator's cache (FSDP's
    // side-stream buffers, a loss block too small to reuse; zero elsewhere).
    st.bytes.fragmentation =
        Bytes(ceil_div(checked_mul(st.bytes.allocated().value(), milli_pct, "fragmentation"), 100000)) +
        st.fsdp_all_gather_cache + st.fsdp_reduce_scatter_cache + st.loss.cached;
    st.bytes.runtime = runtime;
  }

  for (const auto& st : r.stages) {
    if (st.bytes.total() > r.stages[idx(r.peak_stage)].bytes.total()) r.peak_stage = st.stage;
  }
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
