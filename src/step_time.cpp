// The step-time model (docs/formulas.md, "Step time"): per pipeline rank and micro-batch, the
// forward and backward time of its chunks (GEMMs, attention, memory-bound kernels, exposed
// communication), then the step: micro-batches x the slowest rank, the schedule's bubble, the
// data-parallel collectives the backward does not hide, and the optimizer step.
#include "moemem/step_time.hpp"

#include <algorithm>
#include <cmath>

#include "mla_roles.hpp"
#include "moemem/analyze.hpp"
#include "moemem/errors.hpp"

namespace moemem {

namespace {

double d(std::int64_t v) { return static_cast<double>(v); }

// Forward FLOPs per token (2 x parameters for every GEMM a token passes: routed experts top_k of
// them), parameters, and memory-bound bytes of one layer's tensors.
StepTimeModel::Kind kind_of(const ModelSpec& m, const std::vector<Tensor>& tensors, bool moe) {
  StepTimeModel::Kind k;
  for (const auto& t : tensors) {
    if (t.shared_in_training || t.is_vector()) continue;  // MTP's shared embedding/head; norms and biases
    const double params = static_cast<double>(t.params().value());
    const double per_token = t.is_routed_expert ? 2 * d(t.rows) * d(t.cols) * d(m.moe.top_k) : 2 * params;
    if (t.is_routed_expert) {
      k.expert += per_token;
      k.expert_params += params;
    } else {
      k.gemm += per_token;
      k.params += params;
    }
    if (detail::is_mla_up(m, t.role)) k.mla_up += per_token;
    if (t.module == Module::dense_mlp) k.mlp += per_token;
    if (t.module == Module::router || t.module == Module::routed_experts || t.module == Module::shared_experts) k.moe += per_token;
    if (t.module == Module::shared_experts) k.shared += per_token;
  }
  // Causal attention, forward: QK^T and PV over half the s x s scores, 2 s (d_qk + d_v) per head
  // per token (FlashAttention-2 paper, section 4.1 FLOP count, halved for the causal mask).
  const bool mla = m.attention == AttentionKind::mla;
  const double qk = d(mla ? m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim : m.head_dim);
  const double v = d(mla ? m.mla.v_head_dim : m.head_dim);
  k.attn_per_seq = 2 * d(m.num_heads) * (qk + v);
  k.core_attn_per_seq = k.attn_per_seq;
  if (m.has_indexer()) {
    // DeepSeek sparse attention runs MLA in MQA mode (DeepSeek-V3.2 report §2.1, "we implement DSA
    // based on MQA mode of MLA"; Megatron-Core's absorbed MLA): every head scores the shared latent
    // key (kv_lora_rank + rope dims) and sums latent values (kv_lora_rank) over at most index_topk
    // keys; the lightning indexer scores every earlier key with index_n_heads heads of
    // index_head_dim (one product each). Counted as the dense term is, per key position.
    k.sparse_per_key = 2 * d(m.num_heads) * d(2 * m.mla.kv_lora_rank + m.mla.qk_rope_head_dim);
    k.indexer_per_seq = 2 * d(m.dsa.index_n_heads) * d(m.dsa.index_head_dim);
    k.topk = d(m.dsa.index_topk);
  }
  // Memory-bound kernels, BF16 bytes read + written per token: two norms (2h each), two residual
  // adds (3h each); the SwiGLU (read 2f, write f) of the dense MLP or of top_k experts and the
  // shared expert; permute and unpermute (top_k copies of h, in and out, twice).
  const double h = d(m.hidden);
  double elems = 10 * h;
  if (moe) elems += d(m.moe.top_k) * (4 * h + 3 * d(m.moe.expert_ffn)) + 3 * d(m.moe.shared_ffn);
  else elems += 3 * d(m.dense_ffn);
  k.elementwise_bytes = 2 * elems;
  k.norm_bytes = 2 * 4 * h;
  k.moe_act_bytes = moe ? 2 * 3 * d(m.moe.top_k) * d(m.moe.expert_ffn) : 0;
  return k;
}

// Core attention FLOPs per token at sequence length `seq`: dense, or DSA's sparse kernel over
// min(position, top-k) keys, as many key positions as the dense count takes for s <= k and
// 2k - k^2/s beyond (the dense count's s scaled by the mean attended keys over s/2), plus the
// indexer over every position.
double attention_flops(const StepTimeModel::Kind& k, double seq) {
  if (k.topk <= 0) return k.attn_per_seq * seq;
  const double span = seq <= k.topk ? seq : 2 * k.topk - k.topk * k.topk / seq;
  return k.sparse_per_key * span + k.indexer_per_seq * seq;
}

double sum_params(const std::vector<Tensor>& tensors) {
  double s = 0;
  for (const auto& t : tensors) {
    if (!t.shared_in_training) s += static_cast<double>(t.params().value());
  }
  return s;
}

// A ring collective's time for one GPU sending `bytes` in `steps` latency-bound steps (alpha-beta).
double collective(double bytes, double bandwidth, double steps, const Efficiency& eff) {
  return bytes > 0 ? steps * eff.latency_s + bytes / (bandwidth * eff.link) : 0;
}

// What one micro-batch costs on one pipeline rank, by cause (seconds).
struct MicroBatch {
  double compute = 0, recompute = 0, tp = 0, ep = 0, cp = 0, pp = 0;
  double params = 0, expert_params = 0;  // held by the rank (for DP and the optimizer)
  [[nodiscard]] double total() const { return compute + recompute + tp + ep + cp + pp; }
};

struct Rates {
  double gemm, expert, head, attention, hbm, nvlink, network;
};

// The layout's shape as the time model uses it.
struct Shape {
  const ModelSpec& m;
  const Layout& layout;
  const TrainingConfig& t;
  const GpuPerf& gpu;
  const Efficiency& eff;
  Rates r;
  double tokens = 0;    // the micro-batch's tokens each GPU of the tp x cp group works on
  double seq = 0;       // attention span of a query (the sequence)
  double ep_hidden = 0;  // share of the EP exchange another micro-batch's compute hides
  bool overlap_tp = false, dualpipe = false;
  double elementwise = 1;  // memory-bound traffic factor: unfused (eager) kernels move more
};

// The routed experts' GEMM rates, forward (and input gradient, the same shape) and weight
// gradient: the grouped GEMM's rate, or less where one expert's GEMM is memory-bound (roofline:
// M x N x K FLOP pairs over the elements moved, 2 bytes each). A local expert receives
// M = tokens x top_k x ep x etp / experts rows (work conservation over the expert group), with
// N = expert_ffn / etp columns and K = hidden. Forward: M K + K N + M N elements. The weight
// gradient reads the M K input and the M N output gradient and accumulates into the gradient
// buffer, read and written in the gradients' dtype: Megatron-Core's TEGroupedLinear passes
// fuse_wgrad_accumulation = gradient_accumulation_fusion (on unless
// --no-gradient-accumulation-fusion; extensions/transformer_engine.py), so the GEMM adds into
// the fp32 main_grad each micro-batch. With few rows per expert that read-modify-write, not the
// FLOPs, sets the weight gradient's time.
struct ExpertRates {
  double forward, wgrad;
};
ExpertRates expert_rates(const Shape& s) {
  const ParallelConfig& p = s.layout.config;
  const double rows = s.tokens * d(s.m.moe.top_k) * d(p.ep * p.etp_degree()) / d(std::max<std::int64_t>(1, s.m.moe.num_routed_experts));
  const double n = d(s.m.moe.expert_ffn) / d(p.etp_degree()), k = d(s.m.hidden);
  const double pairs = rows * n * k;
  const double grad_units = d(bits_of(s.t.precision.gradients)) / 16;  // read + write, in 2-byte units
  const double forward = pairs / (rows * k + k * n + rows * n);
  const double wgrad = pairs / (rows * k + rows * n + 2 * grad_units * k * n);
  return {std::min(s.r.expert, forward * s.r.hbm), std::min(s.r.expert, wgrad * s.r.hbm)};
}

// Adds `count` layers of kind `k` (and their share of the recomputation) to `mb`.
void add_layers(const Shape& s, const StepTimeModel::Kind& k, bool moe, double count, double recomputed, MicroBatch& mb) {
  if (count <= 0) return;
  const ParallelConfig& p = s.layout.config;
  const double imbalance = moe ? s.t.moe_imbalance : 1.0;
  const double gemm = k.gemm * s.tokens / s.r.gemm;
  const ExpertRates rates = moe && k.expert > 0 ? expert_rates(s) : ExpertRates{1, 1};
  const double expert_work = moe ? k.expert * s.tokens * imbalance : 0;
  const double expert = expert_work / rates.forward;
  const double attn = attention_flops(k, s.seq) * s.tokens / s.r.attention;
  const double mem = s.elementwise * k.elementwise_bytes * s.tokens / s.r.hbm;
  // Backward: two GEMMs per forward GEMM (input and weight gradients); FlashAttention's backward
  // 2.5 times its forward (5 matrix products against 2).
  const double compute = 3 * (gemm + mem) + 2 * expert + expert_work / rates.wgrad + 3.5 * attn;
  double again = 0;
  switch (s.t.recompute) {
    case Recompute::none: break;
    case Recompute::full: again = gemm + expert + attn + mem; break;
    case Recompute::selective: {
      const auto mods = s.t.recompute_modules;
      if (mods & kRecomputeCoreAttn) again += attn;
      if (mods & kRecomputeMlaUpProj) again += k.mla_up * s.tokens / s.r.gemm;
      if (mods & kRecomputeMlp) again += k.mlp * s.tokens / s.r.gemm;
      if (mods & kRecomputeMoe) again += (k.moe - k.expert) * s.tokens / s.r.gemm + expert;
      else if (mods & kRecomputeSharedExperts) again += k.shared * s.tokens / s.r.gemm;
      // The norms, the routed experts' activation: their share of the memory-bound traffic.
      const double share = ((mods & kRecomputeLayernorm) ? k.norm_bytes : 0) + ((mods & kRecomputeMoeAct) ? k.moe_act_bytes * imbalance : 0);
      again += mem * share / k.elementwise_bytes;
      break;
    }
  }
  again *= recomputed;
  // Communication, forward and backward. TP with or without SP: an all-gather and a
  // reduce-scatter (or one all-reduce) around attention and around the MLP, mirrored in backward;
  // a MoE layer's shared experts are the attention's TP group's too (shared_experts.py gathers
  // and reduce-scatters over pg_collection.tp).
  const double G = d(s.gpu.gpus_per_node), act = 2, k_top = d(s.m.moe.top_k), h = d(s.m.hidden);
  const double seq_bytes = s.tokens * d(p.tp) * h * act;  // the micro-batch's sequence share (tp x cp group)
  auto group = [&](std::int64_t n, double bytes) {
    if (n <= 1) return 0.0;
    const double bw = d(n) <= G ? s.r.nvlink : s.r.network;
    return 4 * collective(bytes * (d(n) - 1) / d(n), bw, d(n) - 1, s.eff);
  };
  double tp = group(p.tp, seq_bytes);
  if (!moe || s.m.moe.shared_ffn > 0) tp += group(p.tp, seq_bytes);
  // Routed experts under ETP, Megatron's alltoall dispatcher: after the exchange over the EP
  // group each rank all-gathers the token copies its ETP peers received (token_dispatcher.py,
  // gather_from_sequence_parallel_region over the expert TP group; the combine reduce-scatters),
  // etp x T x k copies gathered. The flex dispatcher (DeepEP) sends each copy to the etp ranks of
  // its expert in the exchange itself (router_topk = tp x k over the tp x ep group).
  if (moe && !s.t.deepep && !s.t.allgather) tp += group(p.etp_degree(), d(p.etp_degree()) * s.tokens * k_top * h * act);
  // EP: dispatch and combine, forward and backward. The expert group (etp innermost, then ep)
  // spans ep x etp consecutive ranks; peers in another node are reached over the network. With
  // DeepSeek-V3's node-limited routing each token crosses the network once per node it reaches.
  double ep = 0;
  if (moe && s.t.allgather && p.ep * p.etp_degree() > 1) {
    // Megatron's allgather dispatcher: over the etp x ep group an all-gather of the tokens (bf16)
    // and a reduce-scatter of the combined output in fp32, each with its mirror in backward; every
    // rank receives (g - 1)/g of the group's N = tokens x g rows.
    const std::int64_t g = p.ep * p.etp_degree();
    const double rows = s.tokens * d(g);
    const double bw = d(g) <= G ? s.r.nvlink : s.r.network;
    ep = 2 * (collective(rows * h * act * (d(g) - 1) / d(g), bw, d(g) - 1, s.eff) +
              collective(rows * h * 4 * (d(g) - 1) / d(g), bw, d(g) - 1, s.eff));
  } else if (moe && (p.ep > 1 || (s.t.deepep && p.etp_degree() > 1))) {
    const double span = d(p.ep * p.etp_degree());
    const double nodes = std::max(1.0, std::ceil(span / G));
    const double local = std::min(1.0, G / span);  // share of the EP peers in this node
    // DeepEP and DeepSeek's node-limited routing send a token once to each node it reaches (then
    // forward it over NVLink): of k experts spread over N nodes, (N - 1)(1 - (1 - 1/N)^k) remote
    // nodes are expected, at most the node limit. Otherwise one copy per remote expert.
    const double dedup = (nodes - 1) * (1 - std::pow(1 - 1 / nodes, k_top));
    // Group-limited routing bounds the nodes too: the experts of one group sit on consecutive
    // ranks (span / n_group of them), so a token reaches at most topk_group times the nodes one
    // group spans (DeepSeek-V3 §2.1.2: its 8 groups on 8 nodes, "at most 4 nodes").
    double limit = d(s.t.dispatch_node_limit);
    if (s.m.moe.n_group > 1 && s.m.moe.topk_group < s.m.moe.n_group) {
      const double by_groups = d(s.m.moe.topk_group) * std::max(1.0, std::ceil(span / d(s.m.moe.n_group) / G));
      limit = limit > 0 ? std::min(limit, by_groups) : by_groups;
    }
    const double capped = limit > 0 ? std::min(limit * (nodes - 1) / nodes, dedup) : dedup;
    const double remote = s.t.dispatch_node_limit > 0 || s.t.deepep ? capped : k_top * (1 - local);
    // Copies per token inside the node: one per local expert, DeepEP's to each of its etp ranks.
    const double local_copies = k_top * local * (s.t.deepep ? d(p.etp_degree()) : 1.0);
    const double disp_bytes = s.t.fp8_dispatch ? 1.0 : act;
    const double per_copy = s.tokens * h * (disp_bytes + act);
    const double inter = collective(remote * per_copy, s.r.network, 1, s.eff);
    const double intra = collective(local_copies * per_copy, s.r.nvlink, 1, s.eff);
    ep = 2 * std::max(inter, intra);
  }
  // CP: ring attention passes K and V (cp - 1) times forward, K, V and their gradients backward.
  double cp = 0;
  if (p.cp > 1) {
    // K and V per token on one GPU: MLA's materialised keys and values of the rank's heads
    // (n_heads x (d_qk + d_v) / tp), GQA's key-value heads (at least one per rank).
    const double kv = s.m.attention == AttentionKind::mla ? k.attn_per_seq / 2 / d(p.tp)
                                                          : 2 * std::max(1.0, d(s.m.num_kv_heads) / d(p.tp)) * d(s.m.head_dim);
    const double kv_bytes = s.tokens * d(p.tp) * kv * act;
    const double bw = d(p.tp * p.cp) <= G ? s.r.nvlink : s.r.network;
    cp = 3 * collective(kv_bytes * (d(p.cp) - 1), bw, d(p.cp) - 1, s.eff);
  }
  // Overlap: ring attention's exchange with the attention kernels (Transformer Engine); TP with
  // the GEMMs under --tp-comm-overlap; EP with another micro-batch's compute under DualPipe and
  // --overlap-moe-expert-parallel-comm. Otherwise communication waits.
  cp = std::max(0.0, cp - 3.5 * attn);
  if (s.overlap_tp) tp = std::max(0.0, tp - 3 * gemm);
  ep -= s.ep_hidden * std::min(ep, compute);
  mb.compute += count * compute;
  mb.recompute += count * again;
  mb.tp += count * tp;
  mb.ep += count * ep;
  mb.cp += count * cp;
  mb.params += count * k.params / d(p.tp);
  mb.expert_params += count * k.expert_params / d(p.ep * p.etp_degree());
}

// One layer of each kind (dense, MoE, an MTP depth) for one micro-batch: layers of a kind cost
// the same, so a chunk is a weighted sum of these.
using LayerUnits = std::array<MicroBatch, 3>;
LayerUnits layer_units(const Shape& s, const StepTimeModel& sm) {
  LayerUnits u{};
  add_layers(s, sm.kinds[0], false, 1.0, 1.0, u[0]);
  add_layers(s, sm.kinds[1], true, 1.0, 1.0, u[1]);
  add_layers(s, sm.mtp, s.m.is_moe(), 1.0, 1.0, u[2]);
  return u;
}

void add_scaled(const MicroBatch& unit, double count, double recomputed, MicroBatch& mb) {
  mb.compute += count * unit.compute;
  mb.recompute += count * recomputed * unit.recompute;
  mb.tp += count * unit.tp;
  mb.ep += count * unit.ep;
  mb.cp += count * unit.cp;
  mb.params += count * unit.params;
  mb.expert_params += count * unit.expert_params;
}

// One micro-batch through chunk `c`.
void add_chunk(const Shape& s, const StepTimeModel& sm, const LayerUnits& units, const Chunk& c, MicroBatch& mb) {
  const ParallelConfig& p = s.layout.config;
  const CompiledModel& cm = *sm.compiled;
  const auto moe = d(cm.moe_layers_in(c.first_layer, c.num_layers));
  const auto dense = d(c.num_layers) - moe;
  // Full recomputation by block recomputes only the first N layers of the chunk; torchtitan's
  // layer SAC every N-th block of the rank (chunk_layer_counts).
  double share = 1.0;
  if (s.t.recompute == Recompute::full && c.num_layers > 0) {
    if (s.t.recompute_method == RecomputeMethod::block) {
      share = std::min(1.0, d(s.t.recompute_num_layers) / d(c.num_layers));
    } else if (s.t.recompute_method == RecomputeMethod::every) {
      const std::int64_t n = s.t.recompute_num_layers;
      const std::int64_t before = blocks_before_chunk(s.layout, static_cast<std::int64_t>(&c - s.layout.chunks.data()));
      share = d((before + c.num_layers) / n - before / n) / d(c.num_layers);
    }
  }
  add_scaled(units[0], dense, share, mb);
  add_scaled(units[1], moe, share, mb);
  add_scaled(units[2], d(c.mtp_depths), 1.0, mb);
  // The output head (for the loss and each MTP depth), BF16, and the loss over the logits.
  const double heads = (c.loss ? 1.0 : 0.0) + d(c.mtp_depths);
  if (heads > 0) {
    const double logits = s.tokens * d(s.m.vocab) / d(p.tp);
    mb.compute += heads * (3 * sm.head_flops * s.tokens / d(p.tp) / s.r.head + 3 * logits * 4 * 3 / s.r.hbm);
  }
  if (c.embedding) mb.params += sm.embedding_params / d(p.tp);
  if (c.loss) mb.params += sm.head_params / d(p.tp);
  // PP: the chunk's output activation forward, its gradient backward (scatter-gather under SP).
  if (p.pp > 1) {
    const double bytes = s.tokens * d(p.tp) / (p.sp ? d(p.tp) : 1.0) * d(s.m.hidden) * 2;
    const double bw = d(p.tp * p.cp * p.dp) < d(s.gpu.gpus_per_node) ? s.r.nvlink : s.r.network;
    mb.pp += s.dualpipe ? 0 : 2 * collective(bytes, bw, 1, s.eff);
  }
}

}  // namespace

StepTimeModel make_step_time_model(const CompiledModel& cm) {
  const ModelSpec& m = *cm.model;
  StepTimeModel sm;
  sm.model = &m;
  sm.compiled = &cm;
  sm.kinds[0] = kind_of(m, cm.layer[layer_class(LayerKind::dense, MixerKind::attention)], false);
  sm.kinds[1] = kind_of(m, cm.layer[layer_class(LayerKind::moe, MixerKind::attention)], true);
  for (std::size_t k = 0; k < kLayerClasses; ++k) {
    sm.untimed_layers = sm.untimed_layers || (cm.present[k] && (m.nas_classes() || m.class_mixer(k) != MixerKind::attention));
  }
  sm.mtp = kind_of(m, cm.mtp_depth, m.is_moe());
  sm.head_flops = 2 * d(m.hidden) * d(m.vocab);
  sm.embedding_params = sum_params(cm.embedding);
  sm.head_params = sum_params(cm.head);
  // torchtitan without torch.compile runs PyTorch's eager elementwise kernels, unfused;
  // Megatron-Core fuses them (bias-SwiGLU, RMSNorm, permute fusions).
  sm.eager = cm.profile != nullptr && cm.profile->name == "torchtitan";
  return sm;
}

double bubble_fraction(const ParallelConfig& p, double mb) {
  const double pp = d(p.pp);
  if (p.pp <= 1 || mb <= 0) return 0;
  switch (p.schedule) {
    case Schedule::one_f_one_b:
    case Schedule::gpipe: return (pp - 1) / mb;
    case Schedule::interleaved: return (pp - 1) / (d(p.vpp) * mb);
    case Schedule::zb_h1: return (pp - 1) / (3 * mb);
    case Schedule::dualpipe: return std::max(0.0, pp - 2) / (3 * mb);
    case Schedule::dualpipev: return (pp - 1) / (6 * mb);
  }
  return 0;
}

namespace {

// The data-parallel collectives of one rank's parameters and how much of them the backward (or,
// under ZeRO-3, each micro-batch) leaves exposed; Megatron's --overlap-grad-reduce and
// --overlap-param-gather are assumed on (every published layout runs with them). The hf profile's
// FSDP2 (--fsdp2) gathers and reduce-scatters each micro-batch as ZeRO-3 does, in bf16 (its
// reduce dtype).
double dp_exposed(const Shape& s, const MicroBatch& mb, double microbatches) {
  const ParallelConfig& p = s.layout.config;
  const double span = d(p.tp * p.cp * p.dp);
  const double bw = span <= d(s.gpu.gpus_per_node) ? s.r.nvlink : s.r.network;
  const double wbytes = d(bits_of(s.t.precision.weights)) / 8;
  const double gbytes = s.t.accelerate_fsdp() || s.t.hf_ddp ? wbytes : d(bits_of(s.t.precision.gradients)) / 8;
  const bool per_microbatch = s.t.zero >= 3 || s.t.accelerate_fsdp();
  double reduce = 0, gather = 0;
  for (const auto& [n, params] : {std::pair{d(p.dp * p.cp), mb.params}, std::pair{d(s.layout.edp), mb.expert_params}}) {
    if (n <= 1) continue;
    const double share = (n - 1) / n;
    if (s.t.zero == 0 && !s.t.accelerate_fsdp()) reduce += collective(2 * share * params * gbytes, bw, 2 * (n - 1), s.eff);
    else {
      reduce += collective(share * params * gbytes, bw, n - 1, s.eff);
      gather += collective(share * params * wbytes, bw, n - 1, s.eff);
    }
  }
  const double per_mb = mb.total();
  if (per_microbatch) return microbatches * std::max(0.0, reduce + 2 * gather - per_mb);
  return std::max(0.0, reduce - per_mb * 2 / 3) + std::max(0.0, gather - per_mb / 3);
}

}  // namespace

StepTime estimate_step_time(const StepTimeModel& sm, const Layout& layout, const TrainingConfig& t, const GpuPerf& gpu,
                            const Efficiency& eff) {
  if (!t.global_batch) throw InputError("--global-batch", "missing", "the sequences per optimizer step (the step-time model needs it)");
  const ModelSpec& m = *sm.model;
  if (sm.untimed_layers) {
    throw InputError("--model", m.model_type,
                     "a model without Gated DeltaNet, Mamba-2, sliding-window or Nemotron-NAS layers of their own shape for a step-time "
                     "estimate (their time is not modelled; memory is, and search ranks by memory with --gpu-memory instead of --gpu)");
  }
  const ParallelConfig& p = layout.config;
  const bool fp8 = t.fp8 != Fp8Recipe::none;
  const double gemm_rate = (fp8 ? gpu.fp8_flops * eff.fp8_gemm : gpu.bf16_flops * eff.gemm);
  Shape s{m, layout, t, gpu, eff,
          Rates{gemm_rate, gemm_rate * eff.expert_gemm / eff.gemm, gpu.bf16_flops * eff.gemm, gpu.bf16_flops * eff.attention,
                gpu.hbm_bytes_per_s * eff.hbm, gpu.nvlink_bytes_per_s, gpu.network_bytes_per_s}};
  s.tokens = d(t.micro_batch) * d(t.seq_len) / d(p.tp * p.cp);
  s.seq = d(t.seq_len);
  s.dualpipe = p.schedule == Schedule::dualpipe || p.schedule == Schedule::dualpipev;
  // DualPipe overlaps each chunk's all-to-all with another chunk's compute by construction
  // (DeepSeek-V3 report, section 3.2.1: "fully overlapped"); Megatron's 1F1B A2A overlap hides the
  // share eff.ep_overlap (set from the ModelZoo's Qwen3-235B rows with and without it).
  s.ep_hidden = s.dualpipe ? 1.0 : t.ep_overlap ? eff.ep_overlap : 0.0;
  s.elementwise = sm.eager && !t.compile ? eff.eager_elementwise : 1.0;
  s.overlap_tp = t.tp_comm_overlap;
  const double microbatches = std::max(1.0, std::floor(d(*t.global_batch) / d(t.micro_batch * p.dp)));
  const LayerUnits units = layer_units(s, sm);
  StepTime out;
  double slowest = -1, slowest_total = 0;
  MicroBatch worst;
  for (std::size_t r = 0; r < layout.rank_chunks.size(); ++r) {
    MicroBatch mb;
    for (const auto c : layout.rank_chunks[r]) add_chunk(s, sm, units, layout.chunks[static_cast<std::size_t>(c)], mb);
    // DualPipe: a micro-batch passes one of the rank's two stages (half go each way).
    const double share = p.schedule == Schedule::dualpipe ? 0.5 : 1.0;
    MicroBatch per = mb;
    for (double* v : {&per.compute, &per.recompute, &per.tp, &per.ep, &per.cp, &per.pp}) *v *= share;
    const double dp = dp_exposed(s, per, microbatches);
    // Optimizer step: each parameter's master weight, gradient, two moments and working copy
    // read and written once (about 24 bytes), over the rank's ZeRO shard.
    const bool sharded = t.zero >= 1 || t.accelerate_fsdp();
    const double shard = sharded ? 1.0 / d(p.dp * p.cp) : 1.0;
    const double shard_e = sharded ? 1.0 / d(layout.edp) : 1.0;
    const double opt = (mb.params * shard + mb.expert_params * shard_e) * 24 / s.r.hbm;
    const double total = microbatches * per.total() + dp + opt;
    if (total > slowest_total || slowest < 0) {
      slowest = static_cast<double>(r);
      slowest_total = total;
      worst = per;
      out.breakdown.dp_comm = dp;
      out.breakdown.optimizer = opt;
    }
  }
  out.slowest_rank = static_cast<std::int64_t>(slowest);
  out.bubble_fraction = bubble_fraction(p, microbatches);
  auto& b = out.breakdown;
  b.compute = microbatches * worst.compute;
  b.recompute = microbatches * worst.recompute;
  b.tp_comm = microbatches * worst.tp;
  b.ep_comm = microbatches * worst.ep;
  b.cp_comm = microbatches * worst.cp;
  b.pp_comm = microbatches * worst.pp;
  b.bubble = out.bubble_fraction * microbatches * worst.total();
  out.step_seconds = slowest_total + b.bubble;
  const double tokens = d(*t.global_batch) * d(t.seq_len);
  out.tokens_per_second_per_gpu = tokens / (out.step_seconds * d(layout.world_size));
  // Model FLOPs per token: forward + backward (3x forward) of every layer, the head and MTP.
  const auto moe_layers = d(m.num_moe_layers());
  double fwd = 0;
  for (const auto& [k, n] : {std::pair{&sm.kinds[0], d(m.num_layers) - moe_layers}, std::pair{&sm.kinds[1], moe_layers},
                             std::pair{&sm.mtp, d(m.mtp_layers)}}) {
    fwd += n * (k->gemm + k->expert + attention_flops(*k, s.seq));
  }
  fwd += (1 + d(m.mtp_layers)) * sm.head_flops;
  out.model_flops_per_token = 3 * fwd;
  out.mfu = out.model_flops_per_token * out.tokens_per_second_per_gpu / gpu.bf16_flops;
  return out;
}

}  // namespace moemem
