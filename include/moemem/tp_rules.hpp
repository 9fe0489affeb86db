// Megatron-Core's tensor-parallel divisibility rules for the MLP sizes: ColumnParallelLinear
// splits its output and RowParallelLinear its input over the tp group with divide(), which asserts
// that the size divides (megatron/core/tensor_parallel/layers.py). So the dense MLP's
// intermediate size (fc1's output, fc2's input) and the shared experts' (SharedExpertMLP, an MLP
// over the same group) must divide by tp; Megatron refuses the run otherwise, and so does moemem
// under the megatron profile. (Heads and key/value groups over tp, and the routed experts'
// size over etp, are check_layout's rules.)
#pragma once

#include <optional>

#include "moemem/errors.hpp"
#include "moemem/model.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"

namespace moemem {

// The first rule `p` breaks for `m` under `profile` (only the megatron profile has these rules).
[[nodiscard]] std::optional<InputError> check_tp_divisibility(const ModelSpec& m, const ParallelConfig& p,
                                                              const Profile& profile);

}  // namespace moemem
