// The registry of accounting profiles, and the rules every profile shares. Each profile is one
// file under src/profiles/ (paper.cpp, megatron.cpp, torchtitan.cpp, hf.cpp).
#include "moemem/profile.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "moemem/errors.hpp"
#include "profiles/hf.hpp"
#include "profiles/shared.hpp"

namespace moemem {

const Profile& paper_profile() { return profiles::kPaper; }
const Profile& megatron_profile() { return profiles::kMegatron; }
const Profile& torchtitan_profile() { return profiles::kTorchtitan; }

std::vector<std::string_view> profile_names() { return {"megatron", "paper", "torchtitan", "hf"}; }

bool fp8_gemm_weight(Role r) {
  switch (r) {
    case Role::q_down:
    case Role::q_up:
    case Role::q_rope:
    case Role::kv_down:
    case Role::k_rope:
    case Role::k_up:
    case Role::v_up:
    case Role::o_proj:
    case Role::q_proj:
    case Role::k_proj:
    case Role::v_proj:
    case Role::mlp_gate:
    case Role::mlp_up:
    case Role::mlp_down:
    case Role::expert_gate:
    case Role::expert_up:
    case Role::expert_down:
    case Role::shared_gate:
    case Role::shared_up:
    case Role::shared_down:
    case Role::mtp_eh_proj: return true;
    default: return false;
  }
}

std::int64_t padded_vocab(std::int64_t vocab, std::int64_t multiple, std::int64_t tp) {
  if (multiple <= 0) return vocab;
  const std::int64_t unit = multiple * tp;
  return (vocab + unit - 1) / unit * unit;
}

AttentionKernel attention_kernel(const Profile& p, const ModelSpec& m, const TrainingConfig& t) {
  if (t.attention) return *t.attention;
  if (p.name == "hf" && m.model_type == "gpt_oss") return AttentionKernel::eager;
  return p.default_attention;
}

const Profile& get_profile(std::string_view name) {
  if (name == "paper") return profiles::kPaper;
  if (name == "megatron") return profiles::kMegatron;
  if (name == "torchtitan") return profiles::kTorchtitan;
  if (name == "hf") return profiles::kHf;
  throw InputError("--profile", std::string(name), fmt::format("one of: {}", fmt::join(profile_names(), ", ")));
}

}  // namespace moemem
