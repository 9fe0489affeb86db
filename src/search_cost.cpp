// The search's cost model (docs/formulas.md, "Search"): pipeline bubble, recomputed FLOPs and
// inter-node traffic, as fractions of a step's compute.
#include <algorithm>

#include "moemem/search.hpp"

namespace moemem {

namespace {

// Forward FLOPs per token of one layer of each kind, by recomputable part (2 x parameters for a
// GEMM, 2 x s x heads x (d_qk + d_v) for causal attention).
struct LayerFlops {
  double total = 0, core_attn = 0, mla_up = 0, mlp = 0, moe = 0, shared = 0;
};

LayerFlops layer_flops(const ModelSpec& m, LayerKind kind, std::int64_t seq) {
  LayerFlops f;
  const double h = static_cast<double>(m.hidden), nh = static_cast<double>(m.num_heads);
  double attn_params = 0, qk = 0, v = 0;
  if (m.attention == AttentionKind::mla) {
    const auto& l = m.mla;
    const double dq = static_cast<double>(l.q_lora_rank), dc = static_cast<double>(l.kv_lora_rank);
    qk = static_cast<double>(l.qk_nope_head_dim + l.qk_rope_head_dim);
    v = static_cast<double>(l.v_head_dim);
    const double up = (dq > 0 ? dq * nh * qk : 0) + dc * nh * (static_cast<double>(l.qk_nope_head_dim) + v);
    f.mla_up = 2 * up;
    attn_params = (dq > 0 ? dq * h : h * nh * qk) + (dc + static_cast<double>(l.qk_rope_head_dim)) * h + up + h * nh * v;
  } else {
    qk = v = static_cast<double>(m.head_dim);
    attn_params = h * nh * qk + 2 * h * static_cast<double>(m.num_kv_heads) * qk + h * nh * v;
  }
  f.core_attn = 2 * static_cast<double>(seq) * nh * (qk + v);  // causal: half of 4 s (qk + v) per head
  f.total = 2 * attn_params + f.core_attn;
  if (kind == LayerKind::dense) {
    f.mlp = 2 * 3 * h * static_cast<double>(m.dense_ffn);
    f.total += f.mlp;
  } else {
    const auto& e = m.moe;
    f.shared = 2 * 3 * h * static_cast<double>(e.shared_ffn);
    f.moe = 2 * (h * static_cast<double>(e.num_routed_experts) + 3 * h * static_cast<double>(e.expert_ffn * e.top_k)) + f.shared;
    f.total += f.moe;
  }
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

CostBreakdown estimate_cost(const ModelSpec& m, const ParallelConfig& p, const TrainingConfig& t,
                            std::int64_t gpus_per_node) {
  CostBreakdown c;
  c.bubble = bubble(p, t);
  // Recomputation: recomputed forward FLOPs over a step's forward + backward (3x forward).
  double total = 0, again = 0, comm_bytes = 0, layers_flops = 0;
  // Layers of one kind cost the same: evaluate each kind once and weight it by its count.
  const auto moe_layers = static_cast<double>(m.num_moe_layers());
  for (const LayerKind kind : {LayerKind::dense, LayerKind::moe}) {
    const double count = kind == LayerKind::moe ? moe_layers : static_cast<double>(m.num_layers) - moe_layers;
    if (count == 0) continue;
    const LayerFlops one = layer_flops(m, kind, t.seq_len);
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
