// The names of tensor roles and modules, as count, explain and the JSON print them.
#include "moemem/inventory.hpp"

namespace moemem {

std::string_view name_of(Role r) {
  switch (r) {
    case Role::embedding: return "embedding";
    case Role::position_embedding: return "position_embedding";
    case Role::norm_bias: return "norm_bias";
    case Role::output_head: return "output_head";
    case Role::final_norm: return "final_norm";
    case Role::input_norm: return "input_norm";
    case Role::post_attn_norm: return "post_attn_norm";
    case Role::q_a_norm: return "q_a_norm";
    case Role::kv_a_norm: return "kv_a_norm";
    case Role::q_down: return "W_DQ";
    case Role::q_up: return "W_UQ";
    case Role::q_rope: return "W_QR";
    case Role::kv_down: return "W_DKV";
    case Role::k_rope: return "W_KR";
    case Role::k_up: return "W_UK";
    case Role::v_up: return "W_UV";
    case Role::o_proj: return "W_O";
    case Role::q_proj: return "q_proj";
    case Role::k_proj: return "k_proj";
    case Role::v_proj: return "v_proj";
    case Role::q_bias: return "q_bias";
    case Role::k_bias: return "k_bias";
    case Role::v_bias: return "v_bias";
    case Role::o_bias: return "o_bias";
    case Role::q_norm: return "q_norm";
    case Role::k_norm: return "k_norm";
    case Role::mlp_gate: return "mlp_gate";
    case Role::mlp_up: return "mlp_up";
    case Role::mlp_down: return "mlp_down";
    case Role::mlp_gate_bias: return "mlp_gate_bias";
    case Role::mlp_up_bias: return "mlp_up_bias";
    case Role::mlp_down_bias: return "mlp_down_bias";
    case Role::router: return "router";
    case Role::router_bias: return "router_bias";
    case Role::expert_gate: return "expert_gate";
    case Role::expert_up: return "expert_up";
    case Role::expert_down: return "expert_down";
    case Role::shared_gate: return "shared_gate";
    case Role::shared_up: return "shared_up";
    case Role::shared_down: return "shared_down";
    case Role::shared_expert_gate: return "shared_expert_gate";
    case Role::attn_sink: return "attn_sink";
    case Role::expert_gate_up_bias: return "expert_gate_up_bias";
    case Role::expert_down_bias: return "expert_down_bias";
    case Role::mtp_enorm: return "mtp_enorm";
    case Role::mtp_hnorm: return "mtp_hnorm";
    case Role::mtp_eh_proj: return "mtp_eh_proj";
    case Role::mtp_head_norm: return "mtp_head_norm";
    case Role::mtp_embedding: return "mtp_embedding";
    case Role::mtp_output_head: return "mtp_output_head";
    case Role::indexer_wq_b: return "indexer_wq_b";
    case Role::indexer_wk: return "indexer_wk";
    case Role::indexer_k_norm: return "indexer_k_norm";
    case Role::indexer_k_norm_bias: return "indexer_k_norm_bias";
    case Role::indexer_weights_proj: return "indexer_weights_proj";
    case Role::pre_ffn_norm: return "pre_ffn_norm";
    case Role::post_ffn_norm: return "post_ffn_norm";
    case Role::q_gate: return "q_gate";
    case Role::gdn_in_qkvz: return "gdn_in_qkvz";
    case Role::gdn_in_ba: return "gdn_in_ba";
    case Role::gdn_conv: return "gdn_conv";
    case Role::gdn_dt_bias: return "gdn_dt_bias";
    case Role::gdn_a_log: return "gdn_a_log";
    case Role::gdn_norm: return "gdn_norm";
    case Role::gdn_out: return "gdn_out";
    case Role::vision_tower: return "vision_tower";
    case Role::mm_projector: return "mm_projector";
    case Role::mamba_in_proj: return "mamba_in_proj";
    case Role::mamba_conv: return "mamba_conv";
    case Role::mamba_conv_bias: return "mamba_conv_bias";
    case Role::mamba_dt_bias: return "mamba_dt_bias";
    case Role::mamba_a_log: return "mamba_a_log";
    case Role::mamba_d: return "mamba_d";
    case Role::mamba_norm: return "mamba_norm";
    case Role::mamba_out: return "mamba_out";
  }
  return "?";
}

std::string_view name_of(Module m) {
  switch (m) {
    case Module::embedding: return "embedding";
    case Module::attention: return "attention";
    case Module::norms: return "norms";
    case Module::dense_mlp: return "dense_mlp";
    case Module::router: return "router";
    case Module::routed_experts: return "routed_experts";
    case Module::shared_experts: return "shared_experts";
    case Module::output_head: return "output_head";
    case Module::mtp: return "mtp";
    case Module::vision: return "vision";
  }
  return "?";
}

}  // namespace moemem
