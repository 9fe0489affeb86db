// How the megatron profile shards and accounts tensors: tensor-parallel splits per role (the
// megatron/core/tensor_parallel layers each module uses), the distributed optimizer's groups.
#include "moemem/profile.hpp"
#include "shared.hpp"

namespace moemem::profiles {
// MLA down-projections (q_a, kv_a with the shared RoPE key) are duplicated on every TP rank;
// up-projections (q_b with its RoPE rows, kv_b) column-parallel; o_proj row-parallel. Dense and
// shared-expert MLPs split like any Megatron MLP (fc1 column, fc2 row); router and norms
// replicated; embedding and output head vocab-parallel. MTP's eh_proj is column-parallel.
TpSplit megatron_tp_split(Role r) {
  switch (r) {
    case Role::q_up:
    case Role::q_rope:
    case Role::k_up:
    case Role::v_up:
    case Role::q_proj:
    case Role::k_proj:
    case Role::v_proj:
    case Role::q_bias:
    case Role::k_bias:
    case Role::v_bias:
    case Role::attn_sink:  // per head: each rank holds its heads' sinks
    case Role::q_gate:
    case Role::mlp_gate:
    case Role::mlp_up:
    case Role::mlp_gate_bias:
    case Role::mlp_up_bias:
    case Role::shared_gate:
    case Role::shared_up:
    case Role::mtp_eh_proj:
    // Gated DeltaNet (gated_delta_net/common.py): in_proj's sections, the conv1d's channels and
    // A_log and dt_bias per value head split over tp; out_proj row-parallel; the norms replicated.
    case Role::gdn_in_qkvz:
    case Role::gdn_in_ba:
    case Role::gdn_conv:
    case Role::gdn_dt_bias:
    case Role::gdn_a_log: return TpSplit::column;
    case Role::o_proj:
    case Role::mlp_down:
    case Role::shared_down:
    case Role::gdn_out: return TpSplit::row;
    case Role::embedding:
    case Role::output_head:
    case Role::mtp_embedding:
    case Role::mtp_output_head: return TpSplit::vocab;
    default: return TpSplit::replicated;
  }
}

// The distributed optimizer shards routed-expert states over the expert data-parallel group and
// everything else (shared experts and router included) over dp*cp.
ZeroGroup megatron_zero_group(Role r) {
  return module_of(r) == Module::routed_experts ? ZeroGroup::expert : ZeroGroup::dense;
}

// Megatron-Core allocates every tensor of the inventory, the router's score-correction bias included.
bool megatron_accounts(const Tensor&) { return true; }

}  // namespace moemem::profiles
