// Nemotron-H's Mamba-2 blocks under the megatron profile: Megatron-Core's MambaMixer (Megatron-LM
// d98e8a64, megatron/core/ssm/mamba_mixer.py, its training path _ssm_training with the default
// use_mamba_mem_eff_path) with the mamba_ssm kernels Megatron pins (state-spaces/mamba 0048fbf2,
// mamba_ssm/ops/triton/ssd_combined.py MambaSplitConv1dScanCombinedFn, layernorm_gated.py).
// in_proj is a TELayerNormColumnParallelLinear (the block's RMSNorm fused into it) yielding z, x, B,
// C and dt; the fused function runs the causal conv1d, the chunked scan and the silu(z) gate; the
// grouped RMSNorm of the gated output follows, then the row-parallel out_proj. No part is compiled:
// the saved set is the autograd Functions' save_for_backward lists.
#include "moemem/activation.hpp"
#include "moemem/profile.hpp"
#include "shared.hpp"

namespace moemem::profiles {

void megatron_mamba_mixer(const ActivationContext& c, Terms& t) {
  const auto& m = c.model;
  const auto& s = m.mamba;
  const auto& p = c.layout.config;
  const std::int64_t tokens = c.training.micro_batch * c.training.seq_len;  // cp 1 (megatron_layer_shape_check)
  const std::int64_t tokens_sp = tokens / (p.sp ? p.tp : 1);
  const std::int64_t inner = s.num_heads * s.head_dim / p.tp, heads = s.num_heads / p.tp, groups = s.n_groups / p.tp;
  // in_proj's output per rank: z and x (d_inner each), B and C (n_groups x d_state each), dt (one
  // per head), each section split over tp (mamba_mixer.py partition_sizes).
  const std::int64_t width = 2 * inner + 2 * groups * s.state_size + heads;
  // TE's fused norm + linear saves its input (the block's input and residual), the norm's rsigma and
  // its output's local sequence-parallel shard, all-gathered again in backward.
  t.add("mamba.input (layer input)", Module::attention, elems({tokens_sp, m.hidden}), t.a, 0, "b*s/(tp if sp) x h", true);
  t.linear_input("mamba.norm_output (in_proj input)", "mamba.norm_output.scales", Module::attention,
                 elems({tokens_sp, m.hidden}), 0, "b*s/(tp if sp) x h");
  t.add("mamba.norm_rsigma", Module::norms, elems({tokens_sp}), DType::fp32, 0, "b*s/(tp if sp), fp32");
  // The fused function saves in_proj's whole output (zxbcdt) and out_x = y + D x, the scan's output
  // before the gate; it recomputes the conv1d and the chunked scan in backward.
  t.add("mamba.zxbcdt (in_proj output)", Module::attention, elems({tokens, width}), t.a, 0,
        "b*s x (2 d_inner + 2 n_groups d_state + heads)/tp");
  t.add("mamba.out_x (scan output before the gate)", Module::attention, elems({tokens, inner}), t.a, 0, "b*s x d_inner/tp");
  // The grouped RMSNorm (z=None: the gate is already applied) saves its input and rstd; out_proj
  // saves the norm's output.
  t.add("mamba.gated_output (norm input)", Module::attention, elems({tokens, inner}), t.a, 0, "b*s x d_inner/tp");
  t.add("mamba.norm_rstd", Module::attention, elems({tokens, groups}), DType::fp32, 0, "b*s x n_groups/tp, fp32");
  t.linear_input("mamba.norm_output (out_proj input)", "mamba.norm_output_out.scales", Module::attention,
                 elems({tokens, inner}), 0, "b*s x d_inner/tp");
  // The fused function's backward (ssd_combined.py _mamba_chunk_scan_combined_bwd) holds the
  // recomputed chunk states and their gradients, fp32 and bf16 copies of each (b x ceil(s/chunk) x
  // heads/tp x head_dim x d_state, twice in fp32 and twice in bf16), beside the gradient of zxbcdt,
  // the recomputed conv output and its gradient (conv_dim = d_inner + 2 n_groups d_state) and the
  // incoming gradient with dout_x: the layer's largest transient (read from the code, not measured).
  const std::int64_t chunks = c.training.micro_batch * ((c.training.seq_len + s.chunk_size - 1) / s.chunk_size);
  const Count states = elems({chunks, heads, s.head_dim, s.state_size});
  const std::int64_t conv = inner + 2 * groups * s.state_size;
  t.transient("mamba.scan_backward_states (fp32)", Module::attention, states + states, DType::fp32, 0,
              "2 x b ceil(s/chunk) x heads/tp x head_dim x d_state, fp32");
  t.transient("mamba.scan_backward (bf16)", Module::attention,
              states + states + elems({tokens, width + 2 * conv + 2 * inner}), 0,
              "2 x the states above + b*s x (zxbcdt + 2 conv_dim + 2 d_inner)/tp");
}

}  // namespace moemem::profiles
