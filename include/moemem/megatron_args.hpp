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
#include "moemem/errors.hpp"
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
  std::string source;  // the script, as named to parse_megatron_args
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
  Setting<std::int64_t> cpu_offload_layers;    // --cpu-offloading-num-layers
  // Precision and optimizer.
  Setting<DType> params_dtype;  // --params-dtype (fp16 from --fp16)
  Setting<DType> main_grads_dtype, main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype;  // --main-grads-dtype ...
  Setting<Fp8Recipe> fp8;                 // --fp8: --fp8-format turns it on, --fp8-recipe (default delayed)
  Setting<bool> distributed_optimizer;    // --distributed-optimizer
  Setting<double> optimizer_offload;      // --optimizer-cpu-offload: --optimizer-offload-fraction (default 1.0)
  Setting<bool> shared_expert_overlap;    // --moe-shared-expert-overlap
  Setting<bool> ep_overlap;               // --overlap-moe-expert-parallel-comm
  Setting<bool> delay_wgrad;              // --delay-wgrad-compute
  Setting<bool> tp_comm_overlap;          // --tp-comm-overlap
  Setting<bool> no_rope_fusion;           // --no-rope-fusion
  Setting<bool> no_grad_accum_fusion;     // --no-gradient-accumulation-fusion
  Setting<bool> no_attention_mask;        // --no-create-attention-mask-in-dataloader
  Setting<CudaGraphImpl> cuda_graph_impl;  // --cuda-graph-impl (also from --enable/--external-cuda-graph)
  Setting<std::uint8_t> cuda_graph_scope;  // --cuda-graph-scope (also from --cuda-graph-modules)
  // Vocabulary, attention, MoE, MTP.
  Setting<std::int64_t> vocab_multiple;   // --make-vocab-size-divisible-by
  Setting<AttentionKernel> attention;     // --attention, from --attention-backend
  Setting<Dispatcher> dispatcher;         // --moe-token-dispatcher: deepep from flex + --moe-enable-deepep
  Setting<double> moe_capacity_factor;    // --moe-capacity-factor
  Setting<double> hidden_dropout, attention_dropout;  // --hidden-dropout, --attention-dropout
  Setting<std::int64_t> mtp;              // --mtp
  // --model: present when the script gives architecture flags. Its vocab is 0 when the script
  // names neither --vocab-size nor a tokenizer moemem knows: the model named by --model must then
  // give it (apply_megatron_settings refuses otherwise, naming `vocab_missing`).
  std::optional<ModelSpec> model;
  std::string vocab_missing;  // why the vocabulary is unknown, when it is

  // A flag that changes memory in a way moemem does not model: apply_megatron_settings refuses it.
  struct Unmodelled {
    std::string flag, value, what;
    Provenance from;
  };
  std::vector<Unmodelled> unmodelled;

  std::vector<std::string> ignored;       // flags Megatron's source shows change no GPU memory, as given
  std::vector<std::string> unrecognised;  // flags moemem does not know, as given (they may change memory)
  std::vector<std::string> notes;         // what was assumed or mapped, and what the shell could not evaluate
  std::map<std::string, std::int64_t> repeated;  // moemem flag -> times the script gives it, when more than once
};

// Reads every Megatron flag in `text` (a launch script or a list of arguments), running the
// script's shell as far as the script itself decides it (src/shell_internal.hpp). `source` is
// the file (for error messages, and for `source FILE` relative to it). A ModelZoo YAML recipe
// (MODEL_ARGS) is read as the flags it lists. Throws InputError for malformed values, a shell
// limit passed, and a memory-relevant flag that depends on what the script does not set.
[[nodiscard]] MegatronSettings parse_megatron_args(std::string_view text, const std::string& source);

// Puts the script's settings onto `r`, except those `given` names by the moemem flags in the
// comments of MegatronSettings ("--tp", "--sp", "--recompute", "--model", ...): settings given
// otherwise win. Throws InputError for an unmodelled flag, a script without a model (and no
// --model given), a script without any layout setting (and none given), and an unknown vocabulary
// without --model. The script's model replaces the request's unless "--model" is given. With the script's world size and no "--dp" given, dp is
// the world size over tp*pp*cp as they are after the script's settings; throws InputError when
// that does not divide.
void apply_megatron_settings(const MegatronSettings& s, Request& r, const std::set<std::string>& given);

// Parses --moe-layer-freq: an integer N (every N-th layer is MoE) or a Python list expression
// such as "([0]*3+[1]*58)". Returns one flag per layer (true: MoE).
[[nodiscard]] std::vector<bool> parse_moe_layer_freq(std::string_view text, std::int64_t num_layers,
                                                     const std::string& field);

// The first architecture field where the script's model differs from the model named by
// --model, as an error naming the Megatron flag; nullopt when they agree. A script vocab of 0
// (unknown) agrees with any.
[[nodiscard]] std::optional<InputError> model_disagreement(const ModelSpec& script, const ModelSpec& named);

// The vocabulary of a tokenizer Megatron scripts name (--tokenizer-model's last path component,
// or --tokenizer-type / --patch-tokenizer-type), as the model's Hugging Face config gives it;
// nullopt for a tokenizer not in moemem's table.
[[nodiscard]] std::optional<std::int64_t> known_tokenizer_vocab(std::string_view name);

}  // namespace moemem
