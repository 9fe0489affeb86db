// Memory beyond the tensors: communication buffers, the caching allocator's reserve beyond what
// is allocated, and the CUDA context and NCCL communicators outside the allocator; also context
// parallelism's ring block.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "analyze/deepep.hpp"
#include "analyze/internal.hpp"
#include "moemem/sharding.hpp"

namespace moemem::detail {

namespace {

// NCCL's device buffers (NVIDIA/nccl src/init.cc computeBuffSizes, src/include/device.h,
// src/transport/p2p.cc p2pSendSetup/p2pRecvSetup): per channel and connected peer, the LL
// (512 KiB), LL128 (4.6875 MiB) and SIMPLE (NCCL_BUFFSIZE, 4 MiB) buffers, each side rounded to
// 2 MiB: 10 MiB received + 2 MiB sent on Hopper (nccl issue 1685 logs exactly these allocations).
constexpr std::uint64_t kNcclPerChannelPeer = 12ull << 20;
// Collective channels on an 8-GPU H100 NVLink node ("24 coll channels" in NCCL's INFO logs; H800
// and A800, with 8 NVLinks, use 16, so this errs high there); send/recv channels per NVLink peer
// (src/graph/paths.cc ncclTopoComputeP2pChannels: 32 on H100), 2 per peer once a communicator
// spans nodes.
constexpr std::uint64_t kCollChannels = 24, kP2pChannelsNvlink = 32, kP2pChannelsNet = 2;
// Send/recv over the network: shared buffers of p2p channels (32) x NCCL_SHARED_STEPS (16) x
// NCCL_P2P_NET_CHUNKSIZE (128 KiB) per direction (src/transport/net.cc sharedNetBuffersInit).
constexpr std::uint64_t kNetSharedP2p = 2ull * 32 * 16 * (128ull << 10);
constexpr std::int64_t kGpusPerNode = 8;  // HGX/DGX nodes

// A group of `size` ranks `stride` apart (Megatron's rank order tp-cp-ep-dp-pp): does it leave the node?
bool spans_nodes(std::int64_t size, std::int64_t stride) { return size * stride > kGpusPerNode; }

// Send/recv to `peers` peers of a group: NVLink buffers per local peer, or the network's shared ones.
Bytes p2p_bytes(std::int64_t peers, bool across_nodes) {
  if (across_nodes) return Bytes(kNetSharedP2p + static_cast<std::uint64_t>(peers) * kP2pChannelsNet * kNcclPerChannelPeer);
  return Bytes(static_cast<std::uint64_t>(peers) * kP2pChannelsNvlink * kNcclPerChannelPeer);
}

}  // namespace

// The CUDA context, then one NCCL communicator per process group the run communicates on.
// PyTorch creates a communicator at a group's first collective (Megatron passes no device_id to
// init_process_group) and NCCL >= 2.22 connects an algorithm's buffers at its first use
// (NCCL_RUNTIME_CONNECT), so: a ring's channels for each collective group, send/recv buffers for
// the peers a group exchanges with. Groups (megatron/core/parallel_state.py): world (the barrier
// after init), dp x cp (gradient reduce-scatter, parameter all-gather), tp, cp (its ring), pp
// (1F1B: the pp group's send/recv to both neighbours; interleaved: one 2-rank communicator per
// neighbour, as unbatched isend/irecv create), the embedding group (first and last stage, with
// tied embeddings or MTP), model-parallel tp x pp (gradient-norm all-reduce), ep (token
// all-to-all and the counts' all-gather), expert tp and expert dp. --nccl-per-group replaces each
// communicator's size; profiles without this model keep their constants.
Runtime runtime_bytes(const EvalContext& c) {
  const auto& p = c.layout.config;
  const auto& o = c.profile.overhead;
  Runtime r;
  r.add("cuda.context", c.t.cuda_context.value_or(o.cuda_context), "CUDA context and loaded modules (measured)");
  if (c.layout.world_size <= 1) return r;
  const Bytes ring(kCollChannels * kNcclPerChannelPeer);
  const auto comm = [&](const char* name, Bytes modelled, const char* rule, bool end_stages_only = false) {
    r.add(name, c.t.nccl_per_group.value_or(modelled), rule, end_stages_only);
  };
  if (!o.nccl_communicators) {
    r.add("nccl.world", o.nccl_world, "profile constant");
    for (const std::int64_t g : {p.tp, p.pp, p.dp, p.cp, p.ep, p.etp_degree(), c.layout.edp}) {
      if (g > 1) comm("nccl.group", o.nccl_per_group, "profile constant per process-group dimension");
    }
    return r;
  }
  comm("nccl.world", ring, "24 channels x 12 MiB");
  if (p.dp * p.cp > 1) comm("nccl.dp_cp", ring, "24 channels x 12 MiB");
  if (p.tp > 1) comm("nccl.tp", ring, "24 channels x 12 MiB");
  if (p.cp > 1) comm("nccl.cp", ring + p2p_bytes(2, spans_nodes(p.cp, p.tp)), "ring + send/recv to 2 neighbours");
  if (p.pp > 1) {
    const bool across = spans_nodes(2, p.tp * p.cp * p.dp);
    if (p.vpp > 1) {
      comm("nccl.pp_prev", p2p_bytes(1, across), "2-rank communicator, send/recv");
      comm("nccl.pp_next", p2p_bytes(1, across), "2-rank communicator, send/recv");
    } else {
      comm("nccl.pp", p2p_bytes(2, across), "send/recv to 2 neighbours");
    }
    // parallel_state.py builds the embedding group from the first and last pipeline ranks (and
    // MTP's); a rank outside it never communicates on it, so it creates no communicator.
    if (c.model.tie_embeddings || c.model.mtp_layers > 0) {
      comm("nccl.embedding", ring, "24 channels x 12 MiB (ranks holding the embedding, head or MTP)", true);
    }
  }
  if (p.tp * p.pp > 1) comm("nccl.mp", ring, "24 channels x 12 MiB");
  const std::int64_t etp = p.etp_degree();
  if (p.ep > 1 && c.t.allgather) {
    // The allgather dispatcher's collectives run over the etp x ep group (pg_collection.tp_ep):
    // all-gather and reduce-scatter, no all-to-all peers.
    comm("nccl.tp_ep", ring, "24 channels x 12 MiB (the allgather dispatcher's etp x ep group)");
  } else if (p.ep > 1) {
    const bool across = spans_nodes(p.ep, etp);
    const std::int64_t local = across ? std::max<std::int64_t>(1, kGpusPerNode / etp) : p.ep;
    comm("nccl.ep", ring + p2p_bytes(std::min(local, p.ep) - 1, across), "ring + all-to-all with every local peer");
  }
  if (etp > 1 && c.model.is_moe()) comm("nccl.expert_tp", ring, "24 channels x 12 MiB");
  if (c.layout.edp > 1 && c.model.is_moe()) comm("nccl.expert_dp", ring, "24 channels x 12 MiB");
  if (c.t.deepep) {
    const DeepEpBuffers d = deepep_buffers(c.model.hidden, p.ep * etp);
    r.add("deepep.nvlink", d.nvlink, "DeepEP's NVLink buffer for the ep x etp group (20 SMs) and its 32 MiB workspace");
    if (d.rdma.value() > 0) r.add("deepep.rdma", d.rdma, "DeepEP's RDMA buffer in NVSHMEM's heap (512 MiB steps)");
  }
  return r;
}

// Context parallelism's ring: one layer's local K and V block.
Bytes cp_kv_block(const EvalContext& c) {
  const auto& p = c.layout.config;
  const auto& m = c.model;
  if (p.cp <= 1) return Bytes{};
  const std::int64_t tokens = c.t.micro_batch * (c.t.seq_len / p.cp);
  const std::int64_t kv_heads = (m.attention == AttentionKind::mla ? m.num_heads : m.num_kv_heads) / p.tp;
  const std::int64_t dims = m.attention == AttentionKind::mla
                                ? m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim
                                : 2 * m.head_dim;
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  return bytes_of(Count(checked_mul(checked_mul(u(tokens), u(kv_heads), "cp ring"), u(dims), "cp ring")),
                  c.t.activation_dtype);
}

std::pair<Bytes, std::uint64_t> allowance(const EvalContext& c) {
  const auto& o = c.profile.overhead;
  std::pair<Bytes, std::uint64_t> a{};
  switch (c.t.overhead) {
    case OverheadPoint::none: break;
    case OverheadPoint::low: a = {o.buffers_low, 1000ull * o.fragmentation_pct_low}; break;
    case OverheadPoint::high: a = {o.buffers_high, 1000ull * o.fragmentation_pct_high}; break;
  }
  if (c.t.fragmentation_pct) a.second = static_cast<std::uint64_t>(std::llround(*c.t.fragmentation_pct * 1000.0));
  return a;
}

namespace {

// GEMM workspaces, allocated through PyTorch's caching allocator at the first GEMM and kept for the
// life of the process (so in allocated and reserved). Sizes for Hopper and later; older GPUs use
// less (4 MiB and 8.125 MiB), so this errs high there:
// - Transformer Engine (d0067d0d transformer_engine/pytorch/cpp_extensions/gemm.py
//   get_cublas_workspace_size_bytes: 32 MiB + 1 KiB on sm90+): one for its GEMMs; one per compute
//   stream for grouped GEMMs (get_cublas_workspace(grouped_gemm=True): common/util/
//   multi_stream.cpp get_num_compute_streams = 4), counted on MoE models, whose experts Megatron's
//   MoE recipes run as TEGroupedMLP (--moe-grouped-gemm); and _NUM_MAX_UB_STREAMS = 3 with
//   --tp-comm-overlap (get_cublas_workspace(ub=True)).
// - PyTorch's own cuBLAS handle (for the output layer's and the router's torch matmuls;
//   aten/src/ATen/cuda/CublasHandlePool.cpp getChosenWorkspaceSize: ":4096:8" = 32 MiB on sm90 and
//   sm100 when CUBLAS_WORKSPACE_CONFIG is unset) and cuBLASLt's (CUBLASLT_WORKSPACE_SIZE, 1 MiB).
constexpr std::uint64_t kTeWorkspace = (32ull << 20) + 1024;
constexpr std::uint64_t kTorchWorkspaces = (32ull << 20) + (1ull << 20);

void record_gemm_workspaces(const EvalContext& c, Ledger& ledger) {
  const auto add = [&](const char* item, std::uint64_t bytes, const char* rule) {
    ledger.add(Category::buffers, Bytes(bytes), [&] { return ledger_item("gemm", item, rule); });
  };
  add("Transformer Engine cuBLAS workspace", kTeWorkspace, "32 MiB + 1 KiB (Hopper and later)");
  if (c.model.is_moe()) {
    add("Transformer Engine grouped-GEMM workspaces", 4 * kTeWorkspace, "4 compute streams x (32 MiB + 1 KiB)");
  }
  if (c.t.tp_comm_overlap) {
    add("Transformer Engine userbuffers GEMM workspaces", 3 * kTeWorkspace, "3 streams x (32 MiB + 1 KiB)");
  }
  add("PyTorch cuBLAS and cuBLASLt workspaces", kTorchWorkspaces, "32 MiB (:4096:8 on Hopper) + 1 MiB");
}

// Megatron-Core's linear module for a weight's role: the weights of one layer with the same id are
// one module's weight, stacked along its output rows (linear_qkv holds q, k and v; linear_fc1 the
// gate and up projections; MLA's linear_kv_down_proj the latent and the shared RoPE key). 0: not
// a linear layer's weight (embeddings and the output layer, norms, the router, convolutions,
// biases, sinks, the shared-expert gate, vision towers).
int linear_module(Role r) {
  switch (r) {
    case Role::q_proj:
    case Role::k_proj:
    case Role::v_proj:
    case Role::q_gate: return 1;  // linear_qkv
    case Role::o_proj: return 2;  // linear_proj
    case Role::q_down: return 3;  // linear_q_down_proj
    case Role::kv_down:
    case Role::k_rope: return 4;  // linear_kv_down_proj
    case Role::q_up:
    case Role::q_rope: return 5;  // linear_q_up_proj (linear_q_proj without q_lora_rank)
    case Role::k_up:
    case Role::v_up: return 6;  // linear_kv_up_proj
    case Role::mlp_gate:
    case Role::mlp_up: return 7;  // linear_fc1
    case Role::mlp_down: return 8;  // linear_fc2
    case Role::shared_gate:
    case Role::shared_up: return 9;
    case Role::shared_down: return 10;
    case Role::expert_gate:
    case Role::expert_up: return 11;  // each expert's fc1 weight
    case Role::expert_down: return 12;
    case Role::mtp_eh_proj: return 13;
    case Role::gdn_in_qkvz:
    case Role::gdn_in_ba: return 14;  // Gated DeltaNet's in_proj
    case Role::gdn_out: return 15;
    case Role::indexer_wq_b: return 16;
    case Role::indexer_wk: return 17;
    case Role::indexer_weights_proj: return 18;
    case Role::mamba_in_proj: return 19;
    case Role::mamba_out: return 20;
    default: return 0;
  }
}

struct WeightShape {
  std::int64_t rows = 0, cols = 0;
  DType dtype{};
  bool operator==(const WeightShape&) const = default;
};

// The local weight shapes of one layer's (or MTP depth's) trained linear modules.
void add_linear_shapes(const EvalContext& c, const std::vector<Tensor>& tensors, DType dtype, std::vector<WeightShape>& out) {
  std::array<WeightShape, 21> modules{};
  for (const Tensor& t : tensors) {
    const int m = linear_module(t.role);
    if (m == 0 || !t.trainable || t.adapter != Adapter::none || t.is_vector()) continue;
    const ShardShape s = device_shape(t, c.profile, c.layout.config);
    if (s.copies == 0) continue;  // no expert of this tensor on the rank
    auto& w = modules[static_cast<std::size_t>(m)];
    w.rows += s.rows;
    w.cols = s.cols;
    w.dtype = dtype;
  }
  for (const WeightShape& w : modules) {
    if (w.rows > 0 && std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
  }
}

// Transformer Engine's dummy weight gradients. With gradient-accumulation fusion (Megatron's
// default; --no-gradient-accumulation-fusion turns it off) a linear layer's backward adds its
// weight gradient into main_grad itself and hands autograd a placeholder of the weight's shape,
// which TE's get_dummy_wgrad (transformer_engine/pytorch/module/base.py) allocates once per
// distinct (shape, dtype) and keeps for the life of the process: Linear and LayerNormLinear from
// TE 2.3 (ba5dc5dde, 2025-04-08), GroupedLinear, per expert weight, from TE 2.10 (d2945c6a5,
// 2025-10-27), and Megatron-Core's own ColumnParallelLinear, the output layer, from core 0.14
// (e7c55de99e, 2025-08-01; in the activations' dtype, input.dtype). So a rank holds one tensor per
// distinct local weight shape among the linear layers it trains: a few layer shapes, not one per
// layer. Counted for --megatron-version current; the 0.12 and 0.6 releases allocated the
// placeholder per backward (freed by Megatron's gradient hook, a transient left out). Not under
// DeepSeek's recipes, which describe DeepSeek's own framework, not Transformer Engine's modules.
void record_dummy_wgrads(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  if (c.t.megatron_version != MegatronVersion::current || !c.t.gradient_accumulation_fusion || c.t.recipe) return;
  // The layer classes the stage holds, and whether it runs an output layer (the head's, or an MTP
  // depth's with the same weight).
  std::int64_t classes = 0;
  bool mtp = false, head = st.has_head || st.mtp_depths > 0;
  for (const std::int64_t i : st.chunks) {
    const Chunk& chunk = c.layout.chunks[idx(i)];
    for (const std::size_t k : c.cm.classes) {
      if (c.cm.layers_in(k, chunk.first_layer, chunk.num_layers) > 0) classes |= std::int64_t{1} << k;
    }
    mtp = mtp || chunk.mtp_depths > 0;
  }
  const auto& p = c.layout.config;
  const std::array<std::int64_t, 8> key{p.tp,
                                        p.etp_degree(),
                                        p.ep,
                                        c.vocab,
                                        classes,
                                        (mtp ? 1 : 0) + (head ? 2 : 0),
                                        static_cast<std::int64_t>(c.t.precision.weights),
                                        static_cast<std::int64_t>(c.t.activation_dtype)};
  const auto cost = [&] {
    std::vector<WeightShape> shapes;
    for (const std::size_t k : c.cm.classes) {
      if ((classes >> k) & 1) add_linear_shapes(c, c.cm.layer[k], c.t.precision.weights, shapes);
    }
    if (mtp) add_linear_shapes(c, c.cm.mtp_depth, c.t.precision.weights, shapes);
    // The output layer: its own weight, or the embedding's where they are tied; trained unless
    // frozen under LoRA.
    if (head) {
      const auto find = [](const std::vector<Tensor>& ts, Role r) -> const Tensor* {
        for (const Tensor& t : ts) {
          if (t.role == r) return &t;
        }
        return nullptr;
      };
      const Tensor* weight = find(c.cm.head, Role::output_head);
      if (weight == nullptr) weight = find(c.cm.embedding, Role::embedding);
      const WeightShape w{(c.vocab + p.tp - 1) / p.tp, c.model.hidden, c.t.activation_dtype};
      if (weight != nullptr && weight->trainable && std::find(shapes.begin(), shapes.end(), w) == shapes.end()) {
        shapes.push_back(w);
      }
    }
    Count elements;
    Bytes bytes;
    for (const WeightShape& w : shapes) {
      const Count n(checked_mul(static_cast<std::uint64_t>(w.rows), static_cast<std::uint64_t>(w.cols), "dummy wgrad"));
      elements += n;
      bytes += bytes_of(n, w.dtype);
    }
    return std::tuple<Bytes, Count, std::size_t>{bytes, elements, shapes.size()};
  };
  std::tuple<Bytes, Count, std::size_t> local;
  const auto* found = &local;
  if (c.cache != nullptr) {
    EvalCache& m = *c.cache;
    for (std::size_t i = 0; i < m.recent_dummy_size && found == &local; ++i) {
      if (m.recent_dummy_wgrads[i].first == key) found = &m.recent_dummy_wgrads[i].second;
    }
    if (found == &local) {
      auto it = m.dummy_wgrads.find(key);
      if (it == m.dummy_wgrads.end()) it = m.dummy_wgrads.emplace(key, cost()).first;
      found = &it->second;
      m.recent_dummy_wgrads[m.recent_dummy_next] = {key, it->second};
      m.recent_dummy_next = (m.recent_dummy_next + 1) % m.recent_dummy_wgrads.size();
      m.recent_dummy_size = std::min(m.recent_dummy_size + 1, m.recent_dummy_wgrads.size());
    }
  } else {
    local = cost();
  }
  // Named copies, not structured bindings: clang before 16 (the web build's) cannot capture those.
  const Bytes bytes = std::get<0>(*found);
  const Count elements = std::get<1>(*found);
  const std::size_t count = std::get<2>(*found);
  if (count == 0) return;
  ledger.add(Category::buffers, bytes, [&] {
    return ledger_item("gemm", "Transformer Engine's cached dummy weight gradients",
                       fmt::format("one per distinct local weight shape of the trained linear layers ({} shapes; "
                                   "gradient-accumulation fusion)",
                                   count),
                       elements);
  });
}

// Megatron-Core's GlobalMemoryBuffer (megatron/core/utils.py get_tensor): one tensor per (name,
// dtype), grown to the largest request and never freed. Under the name "mpu" in the activations'
// dtype it serves the unfused attention's preallocated score matrix (transformer/
// dot_product_attention.py, b x heads/tp x s/cp x s, requested every layer) and the sequence-
// parallel all-gather of the input of Megatron's own linear layers (tensor_parallel/layers.py
// LinearWithGradAccumulationAndAsyncCommunication: the output layer's, s/cp x b x h, where tp > 1
// with --sp). One buffer, the larger of the two, on the ranks that request them.
std::uint64_t global_buffer_elements(const EvalContext& c, const StageReport& st) {
  const auto& p = c.layout.config;
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  const std::uint64_t tokens = u(c.t.micro_batch) * u(c.t.seq_len / p.cp);
  std::uint64_t n = 0;
  bool layers = false;
  for (const std::int64_t i : st.chunks) {
    const Chunk& chunk = c.layout.chunks[idx(i)];
    layers = layers || chunk.num_layers > 0 || chunk.mtp_depths > 0;
  }
  if (c.attention == AttentionKernel::eager && layers) {
    n = checked_mul(checked_mul(tokens, u(c.model.num_heads / p.tp), "global buffer"), u(c.t.seq_len), "global buffer");
  }
  if ((st.has_head || st.mtp_depths > 0) && p.tp > 1 && p.sp) n = std::max(n, checked_mul(tokens, u(c.model.hidden), "global buffer"));
  // The allgather dispatcher gathers the tp_ep group's tokens into it (token_dispatcher.py
  // token_dispatch, use_global_buffer=True): (tokens / tp under sp) x etp x ep rows of h, on a
  // stage with MoE layers (MTP depths are MoE layers where the model's last layer is).
  if (c.t.allgather && p.ep * p.etp_degree() > 1) {
    bool moe = false;
    for (const std::int64_t i : st.chunks) {
      const Chunk& chunk = c.layout.chunks[idx(i)];
      for (const std::size_t k : c.cm.classes) {
        moe = moe || (c.model.class_kind(k) == LayerKind::moe && c.cm.layers_in(k, chunk.first_layer, chunk.num_layers) > 0);
      }
      moe = moe || (chunk.mtp_depths > 0 && c.model.mtp_kind() == LayerKind::moe);
    }
    if (moe) {
      const std::uint64_t local = p.sp && p.tp > 1 ? tokens / u(p.tp) : tokens;
      n = std::max(n, checked_mul(checked_mul(local, u(p.ep * p.etp_degree()), "global buffer"), u(c.model.hidden), "global buffer"));
    }
  }
  return n;
}

void record_global_memory_buffer(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  if (c.t.recipe) return;  // DeepSeek's framework, not Megatron-Core's layers
  const Count n(global_buffer_elements(c, st));
  if (n.value() == 0) return;
  ledger.add(Category::buffers, bytes_of(n, c.t.activation_dtype), [&] {
    return ledger_item("megatron", "global memory buffer ('mpu')",
                       std::string(c.attention == AttentionKernel::eager
                                       ? "the larger of the unfused attention's preallocated b x heads/tp x s/cp x s and the "
                                         "output layer's sequence-parallel all-gather s/cp x b x h"
                                       : "the output layer's sequence-parallel all-gather, s/cp x b x h") +
                           (c.t.allgather ? " and the allgather dispatcher's gathered tokens (tokens x etp x ep) x h" : "") +
                           ", kept",
                       n, c.t.activation_dtype);
  });
}

Bytes allocated(const Ledger& l) {
  return l.total(Category::weights) + l.total(Category::gradients) + l.total(Category::optimizer) +
         l.total(Category::activations) + l.total(Category::buffers);
}

}  // namespace

void record_overheads(const EvalContext& c, const StageReport& st, const Runtime& runtime, Ledger& ledger) {
  const auto [buffers, milli_pct] = c.allowance;
  if (c.profile.overhead.gemm_workspaces && !st.chunks.empty()) {
    record_gemm_workspaces(c, ledger);
    record_dummy_wgrads(c, st, ledger);
    record_global_memory_buffer(c, st, ledger);
  }
  if (buffers.value() > 0) {
    ledger.add(Category::buffers, buffers, [&] {
      return ledger_item("communication", "buffers", "profile allowance");
    });
  }
  // The profile's percentage, plus what is known to sit in the allocator's cache (FSDP's
  // side-stream buffers, a loss block too small to reuse; zero elsewhere).
  const Bytes pct(ceil_div(checked_mul(allocated(ledger).value(), milli_pct, "fragmentation"), 100000));
  c.profile.states->record_cache(c, st, pct, ledger);
  const bool end_stage = st.has_embedding || st.has_head || st.mtp_depths > 0;
  if (!ledger.detail()) {  // search: the sums, not the parts
    ledger.add(Category::runtime, runtime.every_stage + (end_stage ? runtime.end_stages : Bytes{}), [] { return LedgerItem{}; });
    return;
  }
  for (std::size_t i = 0; i < runtime.count; ++i) {
    const RuntimePart& part = runtime.parts[i];
    if (part.bytes.value() == 0) continue;
    if (part.end_stages_only && !end_stage) continue;
    ledger.add(Category::runtime, part.bytes,
               [&] { return ledger_item("cuda/nccl", part.name, std::string(part.rule) + ", outside PyTorch's allocator"); });
  }
}

}  // namespace moemem::detail
