// CUDA graphs (megatron profile): what per-layer graphs keep beyond what the eager layers keep.
// Read in Megatron-LM d98e8a64 (megatron/core/transformer/cuda_graphs.py, transformer_layer.py,
// module.py, moe/token_dispatcher.py) and TransformerEngine d0067d0d (transformer_engine/pytorch/
// graph.py _make_graphed_callables). The mechanism (docs/formulas.md "CUDA graphs"):
// - one forward and one backward graph per graphed layer and micro-batch, all captured into one
//   private memory pool in the order the pipeline schedule runs them (TECudaGraphHelper.
//   _get_cuda_graph_input_data passes the schedule's `_order`; CudaGraphManager records the first
//   step's order and create_cudagraphs captures in it). What a graph saves for backward lives in
//   the pool from its forward until its backward, as eagerly, so saved activations are not
//   duplicated: a pool block is reused only by graphs whose lifetimes do not overlap.
// - a graph's static outputs stay allocated until its backward (graph.py: make_weak_ref of the
//   static outputs only after the backward graph is captured, _reuse_graph_input_output_buffers,
//   TE >= 2.7; CudaGraphRunner._weakref_forward_buffers keeps outputs that escape to eager code).
// - transformer_engine copies each input into a static input buffer (graph.py Graphed.forward
//   copy_; TECudaGraphHelper._get_sample_arguments allocates one per (layer, micro-batch) in flight,
//   reused after that micro-batch's backward); local hands a graph's output buffer to the next
//   graph as its input (cuda_graphs.py create_fwd_graph, fwd_cudagraph_buffer).
// The terms below are the differences those rules make, per graphed layer and micro-batch in flight.
#include <fmt/format.h>

#include "analyze/internal.hpp"
#include "profiles/shared.hpp"

namespace moemem::detail {

namespace {

using profiles::elems;

// Graphed layers x micro-batches in flight on the stage, by what the graph covers.
struct Instances {
  std::int64_t chained = 0;  // whole layers whose output is the next graph's input
  std::int64_t attention = 0;  // layers whose attention is graphed
  std::int64_t router = 0;     // MoE layers whose router is graphed
};

Instances count_instances(const EvalContext& c, const StageReport& st) {
  const std::uint8_t scope = c.t.cuda_graphs.scope;
  const bool moe_model = c.model.is_moe();
  Instances n;
  for (std::size_t i = 0; i < st.chunks.size(); ++i) {
    const std::int64_t mb = st.chunk_in_flight[i];
    const auto& ch = c.layout.chunks[idx(st.chunks[i])];
    // TECudaGraphHelper._discover_layers graphs the decoder's layers and the MTP depths' layers.
    const std::int64_t moe = c.cm.moe_layers_in(ch.first_layer, ch.num_layers) + (moe_model ? ch.mtp_depths : 0);
    const std::int64_t dense = ch.num_layers + ch.mtp_depths - moe;
    const std::int64_t chained = scope == 0 ? moe + dense : ((scope & kGraphAttn) && (scope & kGraphMlp) ? dense : 0);
    n.chained += chained * mb;
    if (scope == 0 || (scope & kGraphAttn) != 0) n.attention += (moe + dense) * mb;
    if ((scope & kGraphMoeRouter) != 0) n.router += moe * mb;
  }
  return n;
}

// transformer_engine under moe_router: TransformerLayer.__init__'s
// can_recompute_pre_mlp_layernorm_for_cudagraph turns the pre-MLP norm's recomputation off (its
// output is a static graph output) unless moe_preprocess runs with the alltoall dispatcher, or
// the shared experts overlap the dispatch.
bool norm_recompute_off(const EvalContext& c) {
  const auto& t = c.t;
  if (t.cuda_graphs.impl != CudaGraphImpl::transformer_engine || (t.cuda_graphs.scope & kGraphMoeRouter) == 0) return false;
  if (t.recompute != Recompute::selective || (t.recompute_modules & kRecomputeLayernorm) == 0) return false;
  if (t.shared_expert_overlap && c.model.moe.shared_ffn > 0) return true;
  return !((t.cuda_graphs.scope & kGraphMoePreprocess) != 0 && !t.deepep && !t.allgather);
}

// What MoELayer.preprocess returns as static outputs (token_dispatcher.py cudagraph_attrs), kept
// until the layer's backward. DeepEP (_DeepepManager.setup_metadata): token_probs (fp32) and
// token_indices (int64) over tp x top_k slots per local token; the hidden states are a view of the
// norm output. alltoall (dispatch_preprocess): the permuted tokens and their probabilities.
void record_preprocess(const EvalContext& c, std::int64_t n, std::int64_t tokens, Ledger& ledger) {
  const std::int64_t k = c.model.moe.top_k;
  const auto add = [&](const char* item, Count e, DType d, const char* rule) {
    ledger.add(Category::buffers, times(bytes_of(e, d), n, "cuda graphs"), [&] {
      return ledger_item("cuda_graphs", item, fmt::format("{} ({}, {}) x {} MoE layer-micro-batches", e.value(), rule, name_of(d), n),
                         e, d, n);
    });
  };
  if (c.t.deepep) {
    const Count slots = elems({tokens, c.layout.config.tp, k});
    add("moe_preprocess token_probs (static output)", slots, DType::fp32, "tokens x tp x top_k");
    add("moe_preprocess token_indices (static output)", slots, DType::int64, "tokens x tp x top_k");
    return;
  }
  add("moe_preprocess permuted tokens (static output)", elems({tokens, k, c.model.hidden}), c.t.activation_dtype,
      "tokens x top_k x h");
  add("moe_preprocess permuted probs (static output)", elems({tokens, k}), DType::fp32, "tokens x top_k");
}

}  // namespace

void record_cuda_graphs(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  const auto& g = c.t.cuda_graphs;
  if (g.impl == CudaGraphImpl::none || st.chunks.empty()) return;
  const Instances n = count_instances(c, st);
  const auto& p = c.layout.config;
  const std::int64_t tokens = c.t.micro_batch * (c.t.seq_len / p.cp) / (p.sp ? p.tp : 1);
  const bool te = g.impl == CudaGraphImpl::transformer_engine;
  const auto add = [&](const char* item, Count e, DType d, std::int64_t count, const char* rule) {
    if (count == 0) return;
    ledger.add(Category::buffers, times(bytes_of(e, d), count, "cuda graphs"), [&] {
      return ledger_item("cuda_graphs", item, fmt::format("{} ({}, {}) x {}", e.value(), rule, name_of(d), count), e, d, count);
    });
  };
  // module.py GraphableMegatronModule.get_layer_static_inputs: hidden_states, bf16, s/cp/(tp if sp)
  // x b x h; transformer_layer.py adds a bool attention mask b x 1 x s/cp x s when attention is graphed.
  const Count hidden = elems({tokens, c.model.hidden});
  if (te) {
    add("static input copy (the previous graph's output is kept too)", hidden, DType::bf16, n.chained,
        "tokens x h, per whole-layer graph and micro-batch in flight");
    add("static attention mask", elems({c.t.micro_batch, c.t.seq_len / p.cp, c.t.seq_len}), DType::int8, n.attention,
        "b x s/cp x s bools, per attention graph and micro-batch in flight");
  }
  if (norm_recompute_off(c)) {
    add("pre-MLP norm output (recompute off: a static graph output)", hidden, c.t.activation_dtype, n.router,
        "tokens x h, per MoE layer and micro-batch in flight");
  }
  const bool preprocess = (g.scope & kGraphMoePreprocess) != 0 || (!te && (g.scope & kGraphMoeRouter) != 0);
  if (preprocess && n.router > 0) record_preprocess(c, n.router, tokens, ledger);
  // The gradients of the graphs' outputs: one set per output signature (graph.py
  // static_grad_outputs_dict; cuda_graphs.py create_bwd_graph weak-references them after capture).
  const bool router = (g.scope & kGraphMoeRouter) != 0;
  add("static output gradients", hidden, c.t.activation_dtype, router ? 2 : 1,
      router ? "tokens x h: the norm output's and the residual's, one set per stage" : "tokens x h, one set per stage");
}

}  // namespace moemem::detail
