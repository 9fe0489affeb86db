// Nemotron-H's blocks (transformers models/nemotron_h/modeling_nemotron_h.py NemotronHBlock): each
// block is one RMSNorm (norm, hidden_size) and one mixer (mixer.*) chosen by the block's kind:
// a Mamba-2 mixer (M), GQA attention (*), a ReLU^2 MLP (-) or a MoE (E). There is no second
// sub-layer: an attention block has no MLP and an MLP block no attention.
#include <string>

#include "inventory_internal.hpp"
#include "moemem/units.hpp"

namespace moemem {

namespace {

// NemotronHMamba2Mixer.__init__: intermediate = mamba_num_heads x mamba_head_dim (not expand x
// hidden); conv_dim = intermediate + 2 n_groups ssm_state_size (x, B, C); in_proj [intermediate +
// conv_dim + num_heads, h] (z, then x B C, then dt), bias only with use_bias (refused by the
// reader); conv1d [conv_dim, 1, conv_kernel], depthwise, with a bias under use_conv_bias; dt_bias,
// A_log and D [num_heads]; norm (Zamba2RMSNormGated) [intermediate]; out_proj [h, intermediate].
void mamba2(const ModelSpec& m, const std::string& x, const AddBlockTensor& add) {
  const auto& s = m.mamba;
  const std::int64_t inner = dim_mul(s.num_heads, s.head_dim, "mamba heads x head dim");
  const std::int64_t conv = dim_sum(inner, dim_mul(2, dim_mul(s.n_groups, s.state_size, "groups x state"), "2 x groups x state"), "conv dim");
  add(x + "in_proj.weight", Role::mamba_in_proj, dim_sum(dim_sum(inner, conv, "in_proj rows"), s.num_heads, "in_proj rows"), m.hidden, 1);
  add(x + "conv1d.weight", Role::mamba_conv, conv, s.conv_kernel, 1);
  if (s.conv_bias) add(x + "conv1d.bias", Role::mamba_conv_bias, conv, 1, 1);
  add(x + "dt_bias", Role::mamba_dt_bias, s.num_heads, 1, 1);
  add(x + "A_log", Role::mamba_a_log, s.num_heads, 1, 1);
  add(x + "D", Role::mamba_d, s.num_heads, 1, 1);
  add(x + "norm.weight", Role::mamba_norm, inner, 1, 1);
  add(x + "out_proj.weight", Role::mamba_out, m.hidden, inner, 1);
}

// NemotronHAttention: q_proj [heads x head_dim, h], k_proj and v_proj [kv heads x head_dim, h],
// o_proj [h, heads x head_dim], no biases, no q/k norms (RoPE or none changes no tensor).
void attention(const ModelSpec& m, const std::string& x, const AddBlockTensor& add) {
  const std::int64_t q = dim_mul(m.num_heads, m.head_dim, "heads x head_dim"), kv = dim_mul(m.num_kv_heads, m.head_dim, "kv heads x head_dim");
  add(x + "q_proj.weight", Role::q_proj, q, m.hidden, 1);
  add(x + "k_proj.weight", Role::k_proj, kv, m.hidden, 1);
  add(x + "v_proj.weight", Role::v_proj, kv, m.hidden, 1);
  add(x + "o_proj.weight", Role::o_proj, m.hidden, q, 1);
}

// NemotronHMoE: NemotronHTopkRouter's weight [E, h] and its e_score_correction_bias buffer [E]
// (persistent: the checkpoint stores it); NemotronHExperts' up_proj [E, f, h] and down_proj
// [E, h, f], ungated (the checkpoint stores them per expert: experts.<j>.up_proj.weight); one
// shared expert, a NemotronHMLP of moe_shared_expert_intermediate_size. No latent projections
// (moe_latent_size is refused by the reader).
void moe(const ModelSpec& m, const std::string& x, const AddBlockTensor& add) {
  const std::int64_t h = m.hidden, n = m.moe.num_routed_experts, f = m.moe.expert_ffn, s = m.moe.shared_ffn;
  add(x + "gate.weight", Role::router, n, h, 1);
  add(x + "gate.e_score_correction_bias", Role::router_bias, n, 1, 1);
  add(x + "experts.*.up_proj.weight", Role::expert_up, f, h, n);
  add(x + "experts.*.down_proj.weight", Role::expert_down, h, f, n);
  add(x + "shared_experts.up_proj.weight", Role::shared_up, s, h, 1);
  add(x + "shared_experts.down_proj.weight", Role::shared_down, h, s, 1);
}

}  // namespace

void nemotron_h_block(const ModelSpec& m, const std::string& p, std::int64_t layer, LayerKind kind, const AddBlockTensor& add) {
  add(p + "norm.weight", Role::input_norm, m.hidden, 1, 1);
  const std::string x = p + "mixer.";
  switch (m.mixer_at(layer)) {
    case MixerKind::mamba2: mamba2(m, x, add); return;
    case MixerKind::attention: attention(m, x, add); return;
    case MixerKind::gated_delta_net:  // not a Nemotron-H block; the reader never sets it
    case MixerKind::sliding_attention:  // a layer class only
    case MixerKind::none: break;
  }
  if (kind == LayerKind::moe) {
    moe(m, x, add);
    return;
  }
  // NemotronHMLP: up_proj [intermediate_size, h] -> ReLU^2 -> down_proj [h, intermediate_size],
  // no gate; biases only with mlp_bias (refused by the reader).
  add(x + "up_proj.weight", Role::mlp_up, m.dense_ffn, m.hidden, 1);
  add(x + "down_proj.weight", Role::mlp_down, m.hidden, m.dense_ffn, 1);
}

}  // namespace moemem
