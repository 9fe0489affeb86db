// Megatron's --tp-comm-overlap (Transformer Engine's userbuffers) and --delay-wgrad-compute
// (megatron profile). Read in Megatron-LM d98e8a64 and TransformerEngine d0067d0d.
//
// Userbuffers (docs/formulas.md "TP communication overlap"):
// - megatron/training/initialize.py _initialize_tp_communicators calls TE's initialize_ub once per
//   process with shape [seq_length * micro_batch_size // context_parallel_size, hidden_size],
//   tp_size = tp, dtype left at its bfloat16 default, quantization mode FP8 when --fp8 is given,
//   and ub_cfgs = {} without --tp-comm-overlap-cfg (refused by name in src/megatron_flags.cpp).
// - transformer_engine/pytorch/module/base.py initialize_ub registers one communicator per GEMM
//   name, twelve by default: ring_exchange qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad (all-gather);
//   pipeline proj_fprop, fc2_fprop (reduce-scatter); bulk qkv_dgrad, qkv_wgrad, fc1_dgrad,
//   fc1_wgrad; external proj_wgrad, fc2_wgrad. Every layer's modules share them (get_ub by name).
// - add_ub: the buffer is uint8 when FP8 and fp8_buf (the default for the eight names in
//   layers_all_gather_overlap), else bf16.
// - common/comm_gemm_overlap/comm_gemm_overlap.cpp: CommOverlapBase::initialize allocates
//   shape[0] x shape[1] elements; CommOverlapP2PBase::initialize the same for all-gather and
//   (2 tp - 1) / tp of it for reduce-scatter (no default ring_exchange GEMM reduce-scatters).
// - userbuffers-host.cpp register_user_buffer_collective allocates with cuMemCreate (multicast)
//   or cudaMalloc: outside PyTorch's caching allocator, so runtime, not buffers. Multicast rounds
//   each buffer up to the driver's granularity (a few MiB at most; not modelled). The one
//   communicator (CommOverlapCore's static _ub_comm) also registers its control region, LOCALSIZE
//   = 4 x (NVTE_REG0_OFFSET + NVTE_REG0_FLAGS) bytes, about 3.2 MB (kControlRegion below).
//
// Delayed weight gradients: src/profiles/megatron.cpp userbuffers_check holds Megatron's rules;
// the bytes are record_delayed_wgrad's below.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "analyze/internal.hpp"
#include "profiles/shared.hpp"

namespace moemem::detail {

namespace {

using profiles::elems;

// userbuffers.h: NVTE_REG0_OFFSET = 2 x 32 x 32 + (2 x 32 x 32 + 32) x 2 + 8192 = 14,400;
// NVTE_REG0_FLAGS = 1024 x userbuffers_op_types + 8192 x 32 x 3 = 786,432 + 1024 x op types (at
// most 16 counted here: erring high). LOCALSIZE = 4 x (14,400 + 786,432 + 16,384) = 3,268,864 bytes.
constexpr std::uint64_t kControlRegion = 3'268'864;

void record_userbuffers(const EvalContext& c, Ledger& ledger) {
  const auto& p = c.layout.config;
  // _initialize_tp_communicators: seq_length * micro_batch_size // cp rows of hidden_size.
  const Count shape = elems({c.t.seq_len * c.t.micro_batch / p.cp, c.model.hidden});
  const bool fp8 = c.t.fp8 != Fp8Recipe::none;
  const auto add = [&](const char* item, std::int64_t n, DType d, const char* rule) {
    ledger.add(Category::runtime, times(bytes_of(shape, d), n, "userbuffers"), [&] {
      return ledger_item("userbuffers", item, fmt::format("{} (s*b/cp x h, {}) x {} ({})", shape.value(), name_of(d), n, rule), shape,
                         d, n);
    });
  };
  // The eight all-gather-side names (fp8_buf by default) and the four reduce-scatter ones
  // (proj_fprop, fc2_fprop, qkv_wgrad, fc1_wgrad), each one full-shape buffer.
  add("all-gather side buffers (TE userbuffers)", 8, fp8 ? DType::fp8 : DType::bf16,
      "qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad, qkv_dgrad, fc1_dgrad, proj_wgrad, fc2_wgrad");
  add("reduce-scatter side buffers (TE userbuffers)", 4, DType::bf16, "proj_fprop, fc2_fprop, qkv_wgrad, fc1_wgrad");
  ledger.add(Category::runtime, Bytes(kControlRegion), [&] {
    return ledger_item("userbuffers", "communicator control region (LOCALSIZE)", "4 x (NVTE_REG0_OFFSET + NVTE_REG0_FLAGS) bytes");
  });
}

// TE's delay_wgrad_compute (module/grouped_linear.py, linear.py: backward puts the GEMM inputs and
// the output gradient in ctx.wgrad_store; backward_dw pops them and runs the wgrad GEMMs). Under
// the combined 1F1B step (models/common/model_chunk_schedule_plan.py TransformerLayerSchedulePlan.
// run) b_layer.mlp.backward_dw() runs after f_layer.moe_dispatch.forward is launched: one MoE
// layer's routed-expert fc1 and fc2 inputs and output gradients are held beside the next
// micro-batch's forward layer. Erring high: the two inputs are counted again here although the
// layer's kept activations already hold them until its backward (moemem frees a layer's
// activations only when its backward is done; TE keeps them to the wgrad), and the activation
// dtype is used even where FP8 would keep them quantized. The attention and shared-expert wgrads
// (pre_dispatch_computation.backward_dw, at the step's end) hold tokens x h-sized tensors, fewer
// rows than the routed tokens; not counted separately.
void record_delayed_wgrad(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  bool moe = false;
  for (const auto ci : st.chunks) {
    const auto& ch = c.layout.chunks[idx(ci)];
    moe = moe || c.cm.moe_layers_in(ch.first_layer, ch.num_layers) > 0 || (c.model.is_moe() && ch.mtp_depths > 0);
  }
  if (!moe) return;
  const auto& p = c.layout.config;
  // The hottest expert rank's rows, as megatron.cpp megatron_routed_tokens: tokens (b*s/cp, /tp with
  // sp) x top_k x etp x min(imbalance, capacity factor).
  double factor = c.t.moe_imbalance;
  if (c.t.moe_capacity_factor) factor = std::min(factor, *c.t.moe_capacity_factor);
  const std::int64_t tokens_sp = c.t.micro_batch * (c.t.seq_len / p.cp) / (p.sp ? p.tp : 1);
  const auto base = static_cast<double>(elems({tokens_sp, c.model.moe.top_k, p.etp_degree()}).value());
  const auto routed = static_cast<std::int64_t>(std::ceil(base * factor));
  const std::int64_t ffn = c.model.moe.expert_ffn / p.etp_degree();
  const DType d = c.t.activation_dtype;
  const auto add = [&](const char* item, Count e, const char* rule) {
    ledger.add(Category::activations, bytes_of(e, d), [&] {
      return ledger_item("delayed_wgrad", item, fmt::format("{} ({}, {})", e.value(), rule, name_of(d)), e, d);
    });
  };
  add("experts.fc1 input (held for the delayed wgrad)", elems({routed, c.model.hidden}), "R x h");
  add("experts.fc1 output gradient (held for the delayed wgrad)", elems({routed, 2 * ffn}), "R x 2 ffn/etp");
  add("experts.fc2 input (held for the delayed wgrad)", elems({routed, ffn}), "R x ffn/etp");
  add("experts.fc2 output gradient (held for the delayed wgrad)", elems({routed, c.model.hidden}), "R x h");
}

}  // namespace

void record_userbuffers_and_wgrad(const EvalContext& c, const StageReport& st, Ledger& ledger) {
  if (st.chunks.empty()) return;
  if (c.t.tp_comm_overlap) record_userbuffers(c, ledger);
  if (c.t.delay_wgrad) record_delayed_wgrad(c, st, ledger);
}

}  // namespace moemem::detail
