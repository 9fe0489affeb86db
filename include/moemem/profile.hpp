// Accounting profiles: the named conventions that differ between analyses and frameworks —
// which matrices tensor parallelism splits, which parameters ZeRO treats as expert
// parameters, which saved tensors a layer keeps, how many micro-batches a stage holds, and
// the buffer/fragmentation allowance. A profile is a table of data plus a few small
// functions; evaluation (report.hpp) is the same code for every profile.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "moemem/activation.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"
#include "moemem/model.hpp"
#include "moemem/optimizer.hpp"
#include "moemem/parallel.hpp"
#include "moemem/sharding.hpp"

namespace moemem {

namespace detail {
struct StateModel;  // src/analyze/internal.hpp
}  // namespace detail

struct OverheadModel {
  Bytes buffers_low, buffers_high;           // communication/temporary buffers per device
  unsigned fragmentation_pct_low = 0;        // allocator fragmentation, % of what is allocated
  unsigned fragmentation_pct_high = 0;
  // Device memory outside PyTorch's allocator (counted in the device total, not in allocated).
  Bytes cuda_context{};                      // CUDA context and library handles
  Bytes nccl_world{};                        // the first (world) NCCL communicator
  Bytes nccl_per_group{};                    // each further process-group dimension
  // NCCL modelled per communicator the run uses (src/analyze/overheads.cpp) instead of the two
  // constants above.
  bool nccl_communicators = false;
  // The GEMM libraries' workspaces (Transformer Engine's and PyTorch's cuBLAS workspaces, allocated
  // through the caching allocator at the first GEMM and kept): src/analyze/overheads.cpp.
  bool gemm_workspaces = false;
};

// What the loss adds to a stage for one micro-batch at the start of backward, beyond the chunk's
// terms: tensors allocated (`allocated`), and blocks freed before it that the allocator keeps
// cached but cannot reuse for it (`cached`, reserved but not allocated).
struct LossPeak {
  Bytes allocated, cached;
  std::string_view rule;  // what the allocated bytes are (for the ledger)
};

// What the data loader hands one micro-batch on a rank that receives the batch, beyond the tensors
// the chunk's layers save: `forward` is alive while that micro-batch runs forward; `at_load` is
// alive, before its forward has allocated anything, while the batch is being split for context
// parallelism (0: nothing more than `forward`).
struct InputBatch {
  Bytes forward, at_load;
  std::string_view rule;
};

// A complete accounting strategy. Built with designated initialisers (src/profiles/*.cpp), so the
// fields are grouped by what they decide; each profile spells out every field.
struct Profile {
  // --- identity and what every report prints
  std::string_view name;                      // the --profile value
  std::string_view summary;                   // one-line description of whose conventions these are
  std::vector<std::string_view> assumptions;  // printed with every report
  // The first setting this profile does not model, as the error to report (nothing: all modelled).
  std::optional<InputError> (*check)(const ModelSpec&, const Layout&, const TrainingConfig&);
  // --- parameters: how each tensor is split, sharded and counted
  TpSplit (*tp_split)(Role);      // how tensor parallelism splits a non-routed-expert tensor
  ZeroGroup (*zero_group)(Role);  // the data-parallel group over which ZeRO shards its states
  bool (*accounts)(const Tensor&);  // whether the analysis counts the tensor at all (paper: no router bias)
  // How weights, gradients and optimizer states are kept: ZeRO / distributed optimizer, or FSDP2
  // (sharded fp32 parameters and moments, bf16 unsharded working copies, side-stream buffers).
  const detail::StateModel* states;
  // --- defaults a run may override
  PrecisionRecipe default_precision;  // dtypes of weights, gradients, master and moments
  bool include_mtp_by_default;        // MTP depths of the model's config counted without --mtp
  std::int64_t vocab_multiple;        // pad the vocabulary to a multiple of this x tp (0: no padding)
  AttentionKernel default_attention;  // kernel when --attention is not given
  double default_dropout = 0;  // hidden and attention dropout when not given (Megatron: 0.1)
  // --etp when not given: tp for a model with routed experts (true: Megatron,
  // megatron/training/arguments.py validate_args), else 1 (the reference analysis's ETP 1).
  // Defaults to false so that a profile which leaves it out keeps etp 1.
  bool etp_follows_tp = false;
  // The same only where ep is 1 (torchtitan: without expert parallelism the routed experts are
  // TP-sharded, apply_moe_ep_tp's TensorParallel at d54d05a5 and models/common/MOE_SHARDING.md
  // since; with it they are sharded over ep alone, etp 1).
  bool etp_follows_tp_without_ep = false;
  // Tensor parallelism always shards the norms' activations by sequence (torchtitan's TP plans use
  // SequenceParallel for every norm: parallelize.py apply_tp), so sp is on whenever tp > 1.
  bool sp_with_tp = false;
  // --- what the profile models
  bool supports_flash;          // the flash kernel may be chosen (paper: scores always materialised)
  bool selective_recompute;  // models selective recomputation (the report analyses none and full only)
  bool models_fp8_and_routing;  // FP8 recipes, routing imbalance, CP ring buffers apply
  // --- activations
  // Appends the terms one decoder layer of `kind` saves for one micro-batch on one device.
  void (*layer_activations)(const ActivationContext&, LayerKind kind, std::vector<ActivationTerm>& out);
  // Appends what a chunk saves besides its decoder layers: embedding, loss (logits), and per MTP
  // depth its own projections, norms and logits (the MTP's decoder layer is a layer_activations).
  void (*chunk_activations)(const ActivationContext&, const Chunk& chunk, std::vector<ActivationTerm>& out);
  // The loss's transient at the start of backward (nullptr: none); enters a stage holding the
  // head as max(this, the recomputation transient), which comes later.
  LossPeak (*loss_peak)(const ActivationContext&);
  bool single_microbatch;    // true: one micro-batch in flight whatever the schedule (the report)
  bool recompute_transient;  // full recomputation also holds one layer's activations while recomputing
  // --- what the allocator and the device add
  OverheadModel overhead;  // buffers, fragmentation, memory outside the allocator
  // LoRA as PEFT applies it to Hugging Face modules (all-linear takes every nn.Linear but the
  // head, routers included where they are one: FinetuneSettings::linear_routers).
  bool peft_modules = false;
  // --attention sdpa (PyTorch's scaled_dot_product_attention as HF's sdpa_attention_forward calls it).
  bool supports_sdpa = false;
  // The state model keeps default_precision whatever is asked (torchtitan's FSDP2): a dtype flag
  // that differs from it is refused when the request is resolved.
  bool fixed_precision = false;
  // The batch a rank receives for one micro-batch (nullptr: not modelled): `embedding` for the
  // ranks holding the embedding or MTP depths (token and position ids), `loss` for those holding
  // the loss (labels and loss mask).
  InputBatch (*input_batch)(const ActivationContext&, bool embedding, bool loss) = nullptr;
  // Full recomputation reruns a group on the very input tensor it kept (Megatron's
  // CheckpointFunction detaches the saved inputs: a view, no copy), so the rerun re-creates all the
  // group saves but that input (false: counted again, as before for the other profiles).
  bool recompute_reuses_input = false;
};

[[nodiscard]] const Profile& get_profile(std::string_view name);
// The attention kernel a run uses: the one given, else the profile's default, except where the
// model's own code has no such kernel (HF's GptOss under the hf profile: no sdpa support, and its
// flash kernel with sinks is a hub kernel, so transformers runs eager).
[[nodiscard]] AttentionKernel attention_kernel(const Profile& p, const ModelSpec& m, const TrainingConfig& t);
[[nodiscard]] std::vector<std::string_view> profile_names();

// The reference analysis's conventions (paper-method.md).
[[nodiscard]] const Profile& paper_profile();
// Megatron-Core's conventions (the default profile).
[[nodiscard]] const Profile& megatron_profile();
// torchtitan's (FSDP2, per-op selective checkpointing, torch.compile, loss variants).
[[nodiscard]] const Profile& torchtitan_profile();

// Whether an FP8 recipe runs this tensor's GEMMs in FP8 (and so keeps FP8 copies of it): the
// linear layers of the decoder and MTP; not embedding, head, router, norms or biases.
[[nodiscard]] bool fp8_gemm_weight(Role r);

// Vocabulary rows after padding to a multiple of `multiple` x tp (0: unpadded).
[[nodiscard]] std::int64_t padded_vocab(std::int64_t vocab, std::int64_t multiple, std::int64_t tp);

}  // namespace moemem
