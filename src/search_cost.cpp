// The search's cost model (docs/formulas.md, "Search"): pipeline bubble, recomputed FLOPs and
// inter-node traffic, as fractions of a step's compute. The GEMM FLOPs of each layer kind come
// from the compiled model's tensors, the same inventory every memory figure folds over.
#include <algorithm>

#include "mla_roles.hpp"
#include "moemem/search.hpp"

namespace moemem {

namespace {

LayerGemms gemms_of(const ModelSpec& m, const std::vector<Tensor>& layer) {
  LayerGemms g;
  for (const auto& t : layer) {
    if (t.is_vector()) continue;  // norms and biases: elementwise, not GEMMs
    // A token passes through top_k of the routed experts, and through every other matrix once.
    const Count per_token = t.is_routed_expert
                                ? Count(checked_mul(checked_mul(static_cast<std::uint64_t>(t.rows), static_cast<std::uint64_t>(t.cols), "FLOPs"),
                                                    static_cast<std::uint64_t>(m.moe.top_k), "FLOPs"))
                                : t.params();
    switch (t.module) {
      case Module::attention:
        g.attention += per_token;
        if (detail::is_mla_up(m, t.role)) g.mla_up += per_token;
        break;
      case Module::dense_mlp: g.mlp += per_token; break;
      case Module::router:
      case Module::routed_experts: g.moe += per_token; break;
      case Module::shared_experts:
        g.moe += per_token;
        g.shared += per_token;
        break;
      default: break;  // norms are vectors; embedding, head and MTP are not in a decoder layer
    }
  }
  return g;
}

double flops(Count params) { return 2 * static_cast<double>(params.value()); }

// Forward FLOPs per token of one layer of a kind, by recomputable part: 2 x parameters for a
// GEMM, 2 x s x heads x (d_qk + d_v) for causal attention (no parameters: a formula of the
// model's dimensions). The parameter counts are exact integers, converted here, so the doubles
// are exact too (below 2^53) and do not depend on the order they are summed in.
struct LayerFlops {
  double total = 0, core_attn = 0, mla_up = 0, mlp = 0, moe = 0, shared = 0;
};

LayerFlops layer_flops(const ModelSpec& m, const LayerGemms& g, std::int64_t seq) {
  const bool mla = m.attention == AttentionKind::mla;
  const double nh = static_cast<double>(m.num_heads);
  const double qk = static_cast<double>(mla ? m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim : m.head_dim);
  const double v = static_cast<double>(mla ? m.mla.v_head_dim : m.head_dim);
  LayerFlops f;
  f.core_attn = 2 * static_cast<double>(seq) * nh * (qk + v);  // causal: half of 4 s (qk + v) per head
  f.mla_up = flops(g.mla_up);
  f.mlp = flops(g.mlp);
  f.moe = flops(g.moe);
  f.shared = flops(g.shared);
  f.total = flops(g.attention) + f.core_attn + f.mlp + f.moe;
  return f;
}

// Pipeline bubble over compute, for m micro-batches (Narayanan et al. 2021; ZB-H1 a third of
// 1F1B; DualPipe (pp-2)/(3m) and DualPipeV (pp-1)/(6m) per the DualPipe comparison).
double bubble(const ParallelConfig& p, const TrainingConfig& t) {
  const double pp = static_cast<double>(p.pp);
  const double mb = static_cast<double>(std::max<std::int64_t>(1, t.global_batch.value_or(1) / (t.micro_batch * p.dp)));
  if (p.pp <= 1) return 0;
  switch (p.schedule) {
    case Schedule::one_f_one_b:
    case Schedule::gpipe: return (pp - 1) / mb;
    case Schedule::interleaved: return (pp - 1) / (static_cast<double>(p.vpp) * mb);
    case Schedule::zb_h1: return (pp - 1) / (3 * mb);
    case Schedule::dualpipe: return std::max(0.0, pp - 2) / (3 * mb);
    case Schedule::dualpipev: return (pp - 1) / (6 * mb);
  }
  return 0;
}

// Adds to `again` the forward FLOPs of `f` (already weighted by the layer count) that the
// recomputation choice repeats.
void add_recomputed(const LayerFlops& f, const TrainingConfig& t, double& again) {
  switch (t.recompute) {
    case Recompute::none: break;
    case Recompute::full: again += f.total; break;
    case Recompute::selective:
      if (t.recompute_modules & kRecomputeCoreAttn) again += f.core_attn;
      if (t.recompute_modules & kRecomputeMlaUpProj) again += f.mla_up;
      if (t.recompute_modules & kRecomputeMlp) again += f.mlp;
      if (t.recompute_modules & kRecomputeMoe) again += f.moe;
      else if (t.recompute_modules & kRecomputeSharedExperts) again += f.shared;
      break;
  }
}

// Adds to `bytes` the inter-node traffic per token of `count` layers of a kind (forward and
// backward): TP's all-gathers and reduce-scatters when tp spans nodes; EP's dispatch and combine
// for the share of the expert group outside the node.
void add_traffic(const ModelSpec& m, LayerKind kind, double count, const ParallelConfig& p, std::int64_t gpus_per_node,
                 double& bytes) {
  const double h = static_cast<double>(m.hidden), a = 2.0;
  if (p.tp > gpus_per_node) bytes += count * 8 * h * a * static_cast<double>(p.tp - 1) / static_cast<double>(p.tp);
  if (kind == LayerKind::moe) {
    const double span = static_cast<double>(p.ep * p.tp);
    const double outside = span > static_cast<double>(gpus_per_node) ? 1.0 - static_cast<double>(gpus_per_node) / span : 0.0;
    bytes += count * 4 * static_cast<double>(m.moe.top_k) * h * a * outside;
  }
}

}  // namespace

LayerKindGemms layer_gemms(const CompiledModel& cm) {
  // Softmax-attention layers; a hybrid model's Gated DeltaNet layers are costed as those of their
  // FFN kind (this relative cost ranks layouts only when no GPU is named for the step-time model).
  // The kind's softmax-attention class where some layer has it (for a Nemotron-NAS model that index
  // is its first block shape); otherwise, as for a hybrid model without such layers, the kind's
  // most common class.
  const auto of_kind = [&](LayerKind kind) {
    const std::size_t main = layer_class(kind, MixerKind::attention);
    if (cm.present[main]) return gemms_of(*cm.model, cm.layer[main]);
    std::size_t best = main;
    std::int64_t most = 0;
    for (const std::size_t k : cm.classes) {
      const std::int64_t n = cm.present[k] && cm.model->class_kind(k) == kind ? cm.layers_in(k, 0, cm.model->num_layers) : 0;
      if (n > most) {
        best = k;
        most = n;
      }
    }
    return gemms_of(*cm.model, cm.layer[best]);
  };
  return {of_kind(LayerKind::dense), of_kind(LayerKind::moe)};
}

CostBreakdown estimate_cost(const CompiledModel& cm, const ParallelConfig& p, const TrainingConfig& t,
                            std::int64_t gpus_per_node) {
  return estimate_cost(*cm.model, layer_gemms(cm), p, t, gpus_per_node);
}

CostBreakdown estimate_cost(const ModelSpec& m, const LayerKindGemms& gemms, const ParallelConfig& p,
                            const TrainingConfig& t, std::int64_t gpus_per_node) {
  CostBreakdown c;
  c.bubble = bubble(p, t);
  // Recomputation: recomputed forward FLOPs over a step's forward + backward (3x forward).
  double total = 0, again = 0, comm_bytes = 0, layers_flops = 0;
  // Layers of one kind cost the same: evaluate each kind once and weight it by its count.
  const auto moe_layers = static_cast<double>(m.num_moe_layers());
  for (const LayerKind kind : {LayerKind::dense, LayerKind::moe}) {
    const double count = kind == LayerKind::moe ? moe_layers : static_cast<double>(m.num_layers) - moe_layers;
    if (count == 0) continue;
    const LayerFlops one = layer_flops(m, gemms[static_cast<std::size_t>(kind)], t.seq_len);
    LayerFlops f;
    f.total = one.total * count;
    f.core_attn = one.core_attn * count;
    f.mla_up = one.mla_up * count;
    f.mlp = one.mlp * count;
    f.moe = one.moe * count;
    f.shared = one.shared * count;
    total += f.total;
    add_recomputed(f, t, again);
    add_traffic(m, kind, count, p, gpus_per_node, comm_bytes);
    layers_flops += 3 * f.total;
  }
  c.recompute = total > 0 ? again / (3 * total) : 0;
  // GPU-seconds per token: bytes at 50 GB/s per GPU (400 Gb/s NICs) against forward and backward
  // FLOPs at 400 TFLOP/s per GPU (about 40% of an H100's dense BF16). Overlap is not credited.
  const double compute_s = layers_flops / 400e12;
  const double comm_s = comm_bytes / 50e9;
  c.communication = compute_s > 0 ? comm_s / compute_s : 0;
  return c;
}

}  // namespace moemem
