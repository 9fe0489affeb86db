// Reading a Megatron-LM launch script's arguments: parallel layout, batch, recomputation and
// precision flags translate to moemem's own flags; architecture flags (--num-layers,
// --hidden-size, --multi-latent-attention, --num-experts, ...) describe a model. Flags that are
// not understood are listed, never silently dropped; flags that change memory in ways moemem
// does not model are errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moemem/model.hpp"

namespace moemem {

struct MegatronArgs {
  // moemem flags with their value ("" for switches), in the order found.
  std::vector<std::pair<std::string, std::string>> flags;
  std::optional<ModelSpec> model;      // present when the script gives architecture flags
  std::optional<std::int64_t> world_size;  // torchrun --nnodes x --nproc-per-node, when given
  std::vector<std::string> ignored;    // flags not understood (assumed not to change memory)
};

// Splits shell text into words: quotes, backslash-newline continuations, comments, and
// VAR=value assignments substituted into $VAR, ${VAR} and ${VAR:-default}.
[[nodiscard]] std::vector<std::string> split_shell_words(std::string_view text);

// Reads every Megatron flag in `text` (a launch script or a list of arguments). `source` names
// the file in error messages. Throws InputError for unsupported memory-changing flags and
// malformed values.
[[nodiscard]] MegatronArgs parse_megatron_args(std::string_view text, const std::string& source);

// Parses --moe-layer-freq: an integer N (every N-th layer is MoE) or a Python list expression
// such as "([0]*3+[1]*58)". Returns one flag per layer (true: MoE).
[[nodiscard]] std::vector<bool> parse_moe_layer_freq(std::string_view text, std::int64_t num_layers,
                                                     const std::string& field);

}  // namespace moemem
