// Reading a Megatron-LM launch script's arguments: parallel layout, batch, recomputation and
// precision flags become typed settings, each with the script line it came from; architecture
// flags (--num-layers, --hidden-size, --multi-latent-attention, --num-experts, ...) describe a
// model. Flags that are not understood are listed, never silently dropped; flags that change
// memory in ways moemem does not model are errors. apply_megatron_settings puts the settings
// onto a Request, under the settings given otherwise (the CLI's inline flags).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "moemem/dtype.hpp"
#include "moemem/enums.hpp"
#include "moemem/model.hpp"
#include "moemem/scenario.hpp"
#include "moemem/training.hpp"

namespace moemem {

// Where a setting came from: the script line of its flag and the flag with its values as the
// launcher passes them (after the shell's variables, e.g. "--tensor-model-parallel-size 4").
struct Provenance {
  std::int64_t line = 0;  // 1-based
  std::string text;
  // "line 12: --tensor-model-parallel-size 4"
  [[nodiscard]] std::string describe() const;
};

template <class T>
struct FromScript {
  T value{};
  Provenance from;
};

// A setting the script may give.
template <class T>
using Setting = std::optional<FromScript<T>>;

// Everything a script says. Each setting is named in comments by the moemem flag that gives
// the same setting inline: those are the names apply_megatron_settings looks for in `given`.
// A setting given several times keeps its last value (as Megatron's argparse does) and is
// counted in `repeated`.
struct MegatronSettings {
  // Parallel layout.
  Setting<std::int64_t> tp, pp, cp, ep, etp;  // --tp --pp --cp --ep --etp
  // --vpp: --num-virtual-stages-per-pipeline-rank, or the layers over
  // pp x --num-layers-per-virtual-pipeline-stage.
  Setting<std::int64_t> vpp;
  Setting<bool> sp;                                             // --sp
  Setting<std::string> pipeline_layout;                         // --pipeline-model-parallel-layout
  Setting<std::int64_t> first_stage_layers, last_stage_layers;  // --decoder-first/last-pipeline-num-layers
  Setting<bool> account_for_embedding, account_for_loss;  // --account-for-embedding/loss-in-pipeline-split
  Setting<std::int64_t> world_size;  // torchrun --nproc-per-node x --nnodes; gives --dp
  // Batch.
  Setting<std::int64_t> micro_batch, global_batch, seq_len;  // --micro-batch --global-batch --seq-len
  // Recomputation.
  Setting<Recompute> recompute;                // --recompute
  Setting<std::uint16_t> recompute_modules;    // --recompute-modules (a RecomputeModule mask)
  Setting<RecomputeMethod> recompute_method;   // --recompute-method
  Setting<std::int64_t> recompute_num_layers;  // --recompute-num-layers
  // Precision and optimizer.
  Setting<DType> params_dtype;  // --params-dtype (fp16 from --fp16)
  Setting<DType> main_grads_dtype, main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype;  // --main-grads-dtype ...
  Setting<Fp8Recipe> fp8;                 // --fp8: --fp8-format turns it on, --fp8-recipe (default delayed)
  Setting<bool> distributed_optimizer;    // --distributed-optimizer
  Setting<bool> shared_expert_overlap;    // --moe-shared-expert-overlap
  // Vocabulary, attention, MoE, MTP.
  Setting<std::int64_t> vocab_multiple;   // --make-vocab-size-divisible-by
  Setting<AttentionKernel> attention;     // --attention, from --attention-backend
  Setting<Dispatcher> dispatcher;         // --moe-token-dispatcher: deepep from flex + --moe-enable-deepep
  Setting<double> moe_capacity_factor;    // --moe-capacity-factor
  Setting<double> hidden_dropout, attention_dropout;  // --hidden-dropout, --attention-dropout
  Setting<std::int64_t> mtp;              // --mtp
  std::optional<ModelSpec> model;         // --model: present when the script gives architecture flags

  std::vector<std::string> ignored;               // flags not understood (assumed not to change memory)
  std::map<std::string, std::int64_t> repeated;  // moemem flag -> times the script gives it, when more than once
};

// Splits shell text into words: quotes, backslash-newline continuations, comments, and
// VAR=value assignments substituted into $VAR, ${VAR} and ${VAR:-default}.
[[nodiscard]] std::vector<std::string> split_shell_words(std::string_view text);

// Reads every Megatron flag in `text` (a launch script or a list of arguments). `source` names
// the file in error messages. Throws InputError for unsupported memory-changing flags and
// malformed values.
[[nodiscard]] MegatronSettings parse_megatron_args(std::string_view text, const std::string& source);

// Puts the script's settings onto `r`, except those `given` names by the moemem flags in the
// comments of MegatronSettings ("--tp", "--sp", "--recompute", "--model", ...): settings given
// otherwise win. The script's model replaces the request's unless "--model" is given. With the script's world size and no "--dp" given, dp is
// the world size over tp*pp*cp as they are after the script's settings; throws InputError when
// that does not divide.
void apply_megatron_settings(const MegatronSettings& s, Request& r, const std::set<std::string>& given);

// Parses --moe-layer-freq: an integer N (every N-th layer is MoE) or a Python list expression
// such as "([0]*3+[1]*58)". Returns one flag per layer (true: MoE).
[[nodiscard]] std::vector<bool> parse_moe_layer_freq(std::string_view text, std::int64_t num_layers,
                                                     const std::string& field);

}  // namespace moemem
