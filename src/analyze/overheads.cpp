// Memory beyond the tensors: communication buffers, the caching allocator's reserve beyond what
// is allocated, and the CUDA context and NCCL communicators outside the allocator; also context
// parallelism's ring block.
#include <cmath>

#include "analyze/internal.hpp"

namespace moemem::detail {

// The CUDA context, the world communicator and one per further process-group dimension the layout
// creates (tp, pp, dp, cp, ep, etp, expert dp).
Bytes runtime_bytes(const EvalContext& c) {
  const auto& p = c.layout.config;
  const auto& o = c.profile.overhead;
  Bytes runtime = c.t.cuda_context.value_or(o.cuda_context);
  if (c.layout.world_size > 1) runtime += o.nccl_world;
  for (const std::int64_t g : {p.tp, p.pp, p.dp, p.cp, p.ep, p.etp_degree(), c.layout.edp}) {
    if (g > 1 && c.layout.world_size > 1) runtime += c.t.nccl_per_group.value_or(o.nccl_per_group);
  }
  if (p.tp > 1) runtime += o.tp_device_residual;
  return runtime;
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
  if (c.t.deepep) a.first += o.deepep_buffer;
  return a;
}

namespace {

Bytes allocated(const Ledger& l) {
  return l.total(Category::weights) + l.total(Category::gradients) + l.total(Category::optimizer) +
         l.total(Category::activations) + l.total(Category::buffers);
}

}  // namespace

void record_overheads(const EvalContext& c, const StageReport& st, Bytes runtime, Ledger& ledger) {
  const auto [buffers, milli_pct] = c.allowance;
  if (buffers.value() > 0) {
    ledger.add(Category::buffers, buffers, [&] {
      return ledger_item("communication", "buffers", c.t.deepep ? "profile allowance + DeepEP buffer" : "profile allowance");
    });
  }
  // The profile's percentage, plus what is known to sit in the allocator's cache (FSDP's
  // side-stream buffers, a loss block too small to reuse; zero elsewhere).
  const Bytes pct(ceil_div(checked_mul(allocated(ledger).value(), milli_pct, "fragmentation"), 100000));
  c.profile.states->record_cache(c, st, pct, ledger);
  if (runtime.value() > 0) {
    ledger.add(Category::runtime, runtime,
               [] { return ledger_item("cuda/nccl", "CUDA context and NCCL communicators", "outside PyTorch's allocator"); });
  }
}

}  // namespace moemem::detail
