// Parameters: the compiled model's tensor groups, each group's share on one device, and the sum
// over the chunks a stage holds; with Detail::items, the same by tensor role.
#include <algorithm>
#include <array>
#include <stdexcept>

#include <fmt/format.h>

#include "analyze/internal.hpp"
#include "moemem/errors.hpp"
#include "moemem/sharding.hpp"

namespace moemem {

std::int64_t chunk_holding(const Tensor& t, const Layout& layout, std::int64_t num_layers) {
  switch (t.placement) {
    case Placement::embedding: return layout.chunk_with_embedding();
    case Placement::decoder: return layout.chunk_of_layer(t.layer);
    case Placement::head: return layout.chunk_with_loss();
    case Placement::mtp: return layout.chunk_of_mtp(t.layer - num_layers);
  }
  return 0;
}

CompiledModel compile_model(const ModelSpec& m, const Inventory& inv, const Profile& profile) {
  using detail::idx;
  // Hybrid models (Qwen3-Next's and Qwen3.5's Gated DeltaNet layers; Nemotron-H's single-mixer
  // blocks, Mamba-2, attention, MLP or MoE): layer classes of their own (model.hpp layer_class);
  // what they save is modelled as Megatron-Core trains them (src/profiles/megatron_gdn.cpp,
  // megatron_mamba.cpp), so the other profiles refuse them below.
  if (m.is_hybrid() && profile.name != "megatron") {
    throw InputError("--profile", std::string(profile.name),
                     fmt::format("megatron for model_type {}: its Gated DeltaNet or Mamba-2 layers' training memory is "
                                 "modelled as Megatron-Core trains them (count is exact under every profile)",
                                 m.model_type));
  }
  // MiMo-V2-Flash: full and sliding-window layers differ in key/value heads (4 and 8), and every
  // layer's value heads are narrower than its query/key heads (128 and 192). Megatron-Bridge
  // trains it (MiMoV2FlashBridge: per-layer query groups, v_head_dim, softmax_offset sinks): its
  // sliding-window layers are a class of their own, sized by the megatron profile; the other
  // profiles hold one attention shape per model and refuse it (count is exact).
  // Nemotron-NAS: layers without attention or with a linear in its place, key/value heads and
  // FFN sizes per layer (block_configs). Megatron-Core builds them as heterogeneous layers
  // (models/gpt/heterogeneous/heterogeneous_layer_specs.py): each distinct block shape is a layer
  // class, sized from nas_models; the megatron profile models them (megatron_layer_shape_check refuses
  // what it does not), the others refuse them.
  if (!m.nas_blocks.empty() && profile.name != "megatron") {
    throw InputError("--profile", std::string(profile.name),
                     fmt::format("megatron for model_type {}: Nemotron-NAS's per-layer blocks are modelled as "
                                 "Megatron-Core's heterogeneous layers build them (count is exact under every profile)",
                                 m.model_type));
  }
  if (!m.nas_blocks.empty() && m.nas_shape_of.empty()) {
    throw InputError("--model", fmt::format("{} distinct block_configs shapes", m.nas_shapes.size()),
                     fmt::format("at most {} (the evaluator's layer classes; count is exact)", kNasShapes));
  }
  if ((m.has_swa_dims() || m.v_head_dim > 0) && profile.name != "megatron") {
    throw InputError("--profile", std::string(profile.name),
                     fmt::format("megatron for model_type {}: per-layer key/value heads and a v_head_dim apart from "
                                 "head_dim are modelled as Megatron-Core trains them (count is exact under every profile)",
                                 m.model_type));
  }
  CompiledModel cm;
  cm.model = &m;
  cm.profile = &profile;
  for (const NasBlock& b : m.nas_shapes) {
    ModelSpec shape = m;
    shape.nas_blocks.clear();
    shape.nas_shapes.clear();
    shape.nas_shape_of.clear();
    shape.num_kv_heads = b.kv_heads;
    shape.dense_ffn = b.ffn_size;
    shape.nas_block = b;
    cm.nas_models.push_back(std::move(shape));
  }
  std::array<std::int64_t, kLayerClasses> first_of_class{};
  first_of_class.fill(-1);
  for (auto& b : cm.before) b.assign(idx(m.num_layers + 1), 0);
  for (std::int64_t l = 0; l < m.num_layers; ++l) {
    const std::size_t cls = m.class_at(l);
    if (first_of_class[cls] < 0) first_of_class[cls] = l;
    cm.present[cls] = true;
    for (std::size_t k = 0; k < kLayerClasses; ++k) cm.before[k][idx(l + 1)] = cm.before[k][idx(l)] + (k == cls ? 1 : 0);
  }
  for (std::size_t k = 0; k < kLayerClasses; ++k) {
    if (cm.present[k] || (m.mtp_layers > 0 && k == m.mtp_class())) cm.classes.push_back(k);
  }
  for (const auto& tensor : inv.tensors) {
    if (!profile.accounts(tensor)) continue;
    cm.total_params += tensor.params();
    if (tensor.trainable) cm.trainable_params += tensor.params();
    switch (tensor.placement) {
      case Placement::embedding: cm.embedding.push_back(tensor); break;
      case Placement::head: cm.head.push_back(tensor); break;
      case Placement::mtp:
        if (tensor.layer == m.num_layers) cm.mtp_depth.push_back(tensor);
        break;
      case Placement::decoder: {
        const std::size_t cls = m.class_at(tensor.layer);
        if (tensor.layer == first_of_class[cls]) cm.layer[cls].push_back(tensor);
        break;
      }
    }
  }
  // Every layer of a class must have the same tensors: recount the model from the classes.
  auto sum = [](const std::vector<Tensor>& ts) {
    Count c;
    for (const auto& x : ts) c += x.params();
    return c;
  };
  const auto mul = [](Count c, std::int64_t n) { return Count(checked_mul(c.value(), static_cast<std::uint64_t>(n), "parameters")); };
  Count check = sum(cm.embedding) + sum(cm.head) + mul(sum(cm.mtp_depth), m.mtp_layers);
  for (std::size_t k = 0; k < kLayerClasses; ++k) check += mul(sum(cm.layer[k]), cm.layers_in(k, 0, m.num_layers));
  if (check != cm.total_params) throw std::logic_error("compile_model: layers of one class differ in their tensors");
  return cm;
}

namespace detail {

void Share::add(const Share& o, std::int64_t n, bool modules) {
  if (n == 0) return;
  const auto k = static_cast<std::uint64_t>(n);
  auto mul = [k](Count c) { return Count(checked_mul(c.value(), k, "parameters")); };
  params.non_expert += mul(o.params.non_expert);
  params.expert += mul(o.params.expert);
  if (modules) {
    for (std::size_t i = 0; i < kModuleCount; ++i) by_module[i] += mul(o.by_module[i]);
  }
  fp8.non_expert += mul(o.fp8.non_expert);
  fp8.expert += mul(o.fp8.expert);
  trainable.non_expert += o.trainable.non_expert.times(k);
  trainable.expert += o.trainable.expert.times(k);
  nf4_params += mul(o.nf4_params);
  nf4_bytes += Bytes(checked_mul(o.nf4_bytes.value(), k, "nf4 bytes"));
}

namespace {

// Which tensors of an MTP depth a group takes: its own, or its copy of the embedding or head
// (the main model's tensors where the rank already holds those).
enum class Copies : std::uint8_t { own, embedding, head };

Copies copies_of(const Tensor& t) {
  if (!t.shared_in_training) return Copies::own;
  return t.role == Role::mtp_embedding ? Copies::embedding : Copies::head;
}

// bitsandbytes' Optimizer2State keeps fp32 states for tensors below min_8bit_size (4096 elements)
// and otherwise one absmax per 256-element block (optim/optimizer.py init_state).
constexpr std::uint64_t kMin8bitSize = 4096, kBnbBlock = 256;

// How the optimizers count one trainable tensor's shard of `c` elements shaped `sh`.
OptimizerCounts optimizer_counts(const Tensor& t, const ShardShape& sh, Count c) {
  OptimizerCounts o;
  o.params = c;
  const bool matrix = !t.is_vector();
  // Megatron's _is_muon_excluded: embedding/output parameters and those that are not 2-D use Adam.
  const bool embedding_or_output = t.role == Role::embedding || t.role == Role::output_head ||
                                   t.role == Role::position_embedding || t.role == Role::mtp_embedding ||
                                   t.role == Role::mtp_output_head;
  if (matrix && !embedding_or_output) o.matrices = c;
  const auto per_copy = static_cast<std::uint64_t>(sh.copies > 0 ? sh.copies : 1);
  const auto rows = static_cast<std::uint64_t>(sh.rows), cols = static_cast<std::uint64_t>(sh.cols);
  o.factors = matrix ? Count(checked_mul(rows + cols, per_copy, "factored states")) : c;
  // bitsandbytes sees each expert of a routed entry as its own parameter in HF's modeling code.
  const std::uint64_t each = c.value() / per_copy;
  if (each < kMin8bitSize) o.small = c;
  else o.blocks = Count(checked_mul(ceil_div(each, kBnbBlock), per_copy, "8-bit blocks"));
  return o;
}

Share share_of(const std::vector<Tensor>& ts, const Profile& profile, const ParallelConfig& p, std::int64_t vocab,
               bool fp8, Copies which, bool word_embedding_only = false) {
  Share s;
  for (const auto& t : ts) {
    if (copies_of(t) != which) continue;
    if (word_embedding_only && t.role != Role::embedding) continue;
    const Count c = device_params(t, profile, p, vocab);
    const bool expert = profile.zero_group(t.role) == ZeroGroup::expert;
    (expert ? s.params.expert : s.params.non_expert) += c;
    s.by_module[static_cast<std::size_t>(word_embedding_only ? Module::output_head : t.module)] += c;
    if (fp8 && fp8_gemm_weight(t.role) && t.adapter == Adapter::none) (expert ? s.fp8.expert : s.fp8.non_expert) += c;
    if (t.quantized()) {  // the profiles that accept QLoRA split no tensor: c is the whole entry
      s.nf4_params += c;
      s.nf4_bytes += Bytes(t.nf4_bytes);
    }
    if (t.trainable) {
      (expert ? s.trainable.expert : s.trainable.non_expert) += optimizer_counts(t, device_shape(t, profile, p, vocab), c);
    }
  }
  return s;
}

Shares compute_shares(const EvalContext& c) {
  const auto& p = c.layout.config;
  const bool fp8 = c.t.fp8 != Fp8Recipe::none;
  const auto of = [&](const std::vector<Tensor>& ts, Copies which) { return share_of(ts, c.profile, p, c.vocab, fp8, which); };
  Shares s{{},
           of(c.cm.embedding, Copies::own),
           of(c.cm.head, Copies::own),
           of(c.cm.mtp_depth, Copies::own),
           of(c.cm.mtp_depth, Copies::embedding),
           of(c.cm.mtp_depth, Copies::head),
           {}};
  for (const std::size_t k : c.cm.classes) s.layer[k] = of(c.cm.layer[k], Copies::own);
  if (c.model.tie_embeddings) s.tied_head = share_of(c.cm.embedding, c.profile, p, c.vocab, fp8, Copies::own, true);
  return s;
}

}  // namespace

const Shares& shares_for(const EvalContext& c, EvalCache* cache, Shares& local) {
  if (cache == nullptr) {
    local = compute_shares(c);
    return local;
  }
  const auto& p = c.layout.config;
  const SharesKey key{p.tp, p.ep, p.etp_degree(), c.vocab, c.t.fp8 != Fp8Recipe::none};
  auto it = cache->shares.find(key);
  if (it == cache->shares.end()) it = cache->shares.emplace(key, compute_shares(c)).first;
  return it->second;
}

// Megatron-Core with tied embeddings and the loss on a rank without the embedding: GPTModel builds
// the output layer with skip_weight_param_allocation only where pre_process holds the embedding
// (gpt_model.py: `skip_weight_param_allocation=self.pre_process and
// self.share_embeddings_and_output_weights`), so the loss stage allocates its own vocab/tp x h
// output weight, a trained parameter (zeroed, then kept equal through the embedding group's
// gradient all-reduce: language_module.py setup_embeddings_and_output_layer) with its gradient
// and optimizer states. The other profiles run no pipeline with tied weights apart.
bool tied_head_copy(const EvalContext& c, bool holds_embedding, bool holds_loss) {
  return c.model.tie_embeddings && holds_loss && !holds_embedding && c.profile.name == "megatron";
}

// Each rank's parameters: the groups of the chunks it holds (a chunk held by two ranks, as in
// DualPipe, counts on both); MTP's embedding/head copies are the main model's own tensors on a
// rank holding those.
void assign_params(const EvalContext& c, const Shares& sh, StageReport& st) {
  const auto& layout = c.layout;
  const bool modules = c.detail != Detail::totals;
  const std::int64_t embedding_chunk = layout.chunk_with_embedding(), loss_chunk = layout.chunk_with_loss();
  Share total;
  const bool holds_embedding = layout.rank_holds(st.stage, embedding_chunk);
  const bool holds_loss = layout.rank_holds(st.stage, loss_chunk);
  // The rank's layers of each class, embeddings, heads and MTP depths over its chunks, then each
  // group's share times its count.
  std::array<std::int64_t, kLayerClasses> layers{};
  std::int64_t embeddings = 0, heads = 0, mtp_depths = 0;
  for (const auto ci : st.chunks) {
    const auto& ch = layout.chunks[idx(ci)];
    for (const std::size_t k : c.cm.classes) layers[k] += c.cm.layers_in(k, ch.first_layer, ch.num_layers);
    embeddings += ch.embedding ? 1 : 0;
    heads += ch.loss ? 1 : 0;
    mtp_depths += ch.mtp_depths;
  }
  for (const std::size_t k : c.cm.classes) total.add(sh.layer[k], layers[k], modules);
  total.add(sh.emb, embeddings, modules);
  total.add(sh.head, heads, modules);
  total.add(sh.mtp, mtp_depths, modules);
  if (!holds_embedding) total.add(sh.mtp_emb, mtp_depths, modules);
  if (!holds_loss) total.add(sh.mtp_head, mtp_depths, modules);
  if (tied_head_copy(c, holds_embedding, holds_loss)) total.add(sh.tied_head, 1, modules);
  st.params = total.params;
  st.trainable = total.trainable;
  st.params_by_module = total.by_module;
  st.fp8_weight_params = total.fp8.non_expert + total.fp8.expert;
  st.nf4_params = total.nf4_params;
  st.nf4_bytes = total.nf4_bytes;
  // ZeRO-3 shards the working weights, and with them their FP8 copies.
  if (c.t.zero >= 3) st.fp8_weight_params = zero_shard(total.fp8, layout.config.dp * layout.config.cp, layout.edp);
}

namespace {

// Parameters on this device by (module, role [part]), in the order the checkpoint first names them.
class RoleCounts {
 public:
  // `c` parameters of `t` on this device, `n` copies of the entry (its NF4 bytes n times).
  void add(const Tensor& t, Count c, std::uint64_t n) {
    std::string module(name_of(t.module));
    std::string role = std::string(name_of(t.role)) + (t.part.empty() ? "" : fmt::format(" [{}]", t.part));
    auto it = std::find_if(rows_.begin(), rows_.end(), [&](const Row& r) { return r.module == module && r.role == role; });
    if (it == rows_.end()) it = rows_.insert(rows_.end(), Row{std::move(module), std::move(role), Count{}, Count{}, Bytes{}});
    it->count += c;
    if (t.quantized()) {
      it->nf4 += c;
      it->nf4_bytes += Bytes(checked_mul(t.nf4_bytes, n, "nf4 bytes"));
    }
  }
  struct Row {
    std::string module, role;
    Count count;
    Count nf4;  // of count, stored as NF4 (QLoRA), in nf4_bytes
    Bytes nf4_bytes;
  };
  [[nodiscard]] const std::vector<Row>& rows() const { return rows_; }

 private:
  std::vector<Row> rows_;
};

}  // namespace

void record_weights_by_role(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  const auto& layout = c.layout;
  const auto& p = layout.config;
  const bool holds_embedding = layout.rank_holds(st.stage, layout.chunk_with_embedding());
  const bool holds_loss = layout.rank_holds(st.stage, layout.chunk_with_loss());
  // Held decoder layers of each class, and the first of each (the checkpoint's order).
  std::array<std::int64_t, kLayerClasses> count{}, first{};
  first.fill(INT64_MAX);
  for (const auto ci : st.chunks) {
    const auto& ch = layout.chunks[idx(ci)];
    for (std::int64_t l = ch.first_layer; l < ch.first_layer + ch.num_layers; ++l) {
      const std::size_t k = c.model.class_at(l);
      ++count[k];
      first[k] = std::min(first[k], l);
    }
  }
  RoleCounts roles;
  const auto walk = [&](const std::vector<Tensor>& group, std::int64_t n) {
    for (const auto& t : group) {
      if (t.shared_in_training && (t.role == Role::mtp_embedding ? holds_embedding : holds_loss)) continue;
      const auto times = static_cast<std::uint64_t>(n);
      roles.add(t, Count(checked_mul(device_params(t, c.profile, p, c.vocab).value(), times, "parameters")), times);
    }
  };
  if (holds_embedding) walk(c.cm.embedding, 1);
  std::array<std::size_t, kLayerClasses> order{};
  for (std::size_t k = 0; k < kLayerClasses; ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return first[a] < first[b]; });
  for (const std::size_t k : order) {
    if (count[k] > 0) walk(c.cm.layer[k], count[k]);
  }
  if (holds_loss) walk(c.cm.head, 1);
  if (tied_head_copy(c, holds_embedding, holds_loss)) {
    for (const auto& t : c.cm.embedding) {
      if (t.role != Role::embedding) continue;
      Tensor copy = t;
      copy.module = Module::output_head;
      copy.role = Role::output_head;
      copy.part = "tied: this stage's own copy of the word embedding";
      roles.add(copy, device_params(t, c.profile, p, c.vocab), 1);
    }
  }
  if (st.mtp_depths > 0) walk(c.cm.mtp_depth, st.mtp_depths);
  const DType w = c.t.precision.weights;
  for (const auto& row : roles.rows()) {
    if (row.nf4.value() > 0) {
      const Count rest(row.count.value() - row.nf4.value());
      ledger.add(Category::weights, bytes_of(rest, w) + row.nf4_bytes, [&] {
        return ledger_item(row.module, row.role,
                           fmt::format("{} parameters as bitsandbytes NF4 ({}){}", row.nf4.value(),
                                       row.nf4_bytes.value() > 0
                                           ? fmt::format("{} bytes: 4-bit codes, blocks of 64 with double-quantised absmax",
                                                         row.nf4_bytes.value())
                                           : std::string("counted with the first part of their checkpoint matrix"),
                                       rest.value() > 0 ? fmt::format(" + {} x {}", rest.value(), name_of(w)) : ""),
                           row.count);
      });
      continue;
    }
    ledger.add(Category::weights, bytes_of(row.count, w), [&] {
      return ledger_item(row.module, row.role, fmt::format("{} parameters on this device x {}", row.count.value(), name_of(w)),
                         row.count, w);
    });
  }
}

}  // namespace detail
}  // namespace moemem
