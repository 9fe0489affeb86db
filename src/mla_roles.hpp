// Which inventory roles are MLA's up-projections from a latent, shared by the search's cost model
// (search_cost.cpp) and the step-time model (step_time.cpp).
#pragma once

#include "moemem/inventory.hpp"
#include "moemem/model.hpp"

namespace moemem::detail {

// Whether a tensor of an MLA layer is an up-projection from a latent (Megatron's mla_up_proj):
// kv_b_proj's parts always; q_b_proj's parts only with a query latent (q_lora_rank), since
// without one the q_up/q_rope rows are a plain q_proj reading the hidden state.
inline bool is_mla_up(const ModelSpec& m, Role role) {
  if (m.attention != AttentionKind::mla) return false;
  if (role == Role::k_up || role == Role::v_up) return true;
  return (role == Role::q_up || role == Role::q_rope) && m.mla.q_lora_rank > 0;
}

}  // namespace moemem::detail
