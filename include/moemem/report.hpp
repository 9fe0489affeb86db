// The memory report: for every pipeline rank ("stage"), the parameters one device holds
// (non-expert and expert, and by module), and the bytes of weights, gradients, optimizer
// states, activations (per micro-batch times those in flight under the schedule), buffers and
// fragmentation. analyze() builds it as a fold over the tensor inventory under one profile,
// layout and training configuration.
#pragma once

#include <array>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moemem/activation.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"

namespace moemem {

struct StageBytes {
  Bytes weights, gradients, optimizer, activations, buffers, fragmentation;
  Bytes runtime;  // outside PyTorch's allocator: CUDA context, NCCL communicators
  // Allocated by PyTorch's caching allocator.
  [[nodiscard]] Bytes allocated() const { return weights + gradients + optimizer + activations + buffers; }
  // Reserved by the allocator (allocated plus its cache and fragmentation).
  [[nodiscard]] Bytes reserved() const { return allocated() + fragmentation; }
  // What the device must hold (as nvidia-smi shows it).
  [[nodiscard]] Bytes total() const { return reserved() + runtime; }
};

struct StageReport {
  std::int64_t stage = 0;  // pipeline rank
  StageRange layers;       // first decoder layer held and the number held
  std::int64_t last_layer = -1;  // last decoder layer held (-1: none)
  bool has_embedding = false, has_head = false;
  std::int64_t mtp_depths = 0;
  std::vector<std::int64_t> chunks;                   // model chunks held, as Layout::chunks indices
  ParamSplit params;                                  // on one device of the stage
  std::array<Count, kModuleCount> params_by_module{};  // on one device of the stage
  std::vector<Bytes> chunk_activations;               // one micro-batch through each held chunk
  Bytes activations_per_microbatch;                   // sum of chunk_activations
  Bytes recompute_transient;                          // one layer recomputed during backward
  Bytes cp_ring_buffers;                              // ring attention's K/V in flight, one layer
  Bytes fp8_weight_copies;                            // part of bytes.weights
  Count fp8_weight_params;                            // parameters whose GEMMs run in FP8
  std::int64_t in_flight_microbatches = 1;
  std::int64_t model_chunks = 1;
  LossPeak loss;                                      // the loss's transient (stages holding the head)
  // FSDP2 (torchtitan profile): what the shards and working copies come to on this device.
  Count fsdp_shard_params;                            // ceil(params / (dp/dp_replicate x cp))
  Count fsdp_root_params;                             // embedding, final norm, output held (after TP)
  Count fsdp_block_params, fsdp_block_fp8_params;     // one decoder block (after TP), its FP8-GEMM part
  std::int64_t fsdp_blocks_kept = 0;                  // blocks left unsharded after forward
  Bytes fsdp_root_unsharded, fsdp_blocks_unsharded;   // bf16 working copies (part of bytes.weights)
  Bytes fsdp_all_gather_cache, fsdp_reduce_scatter_cache;  // side-stream blocks (part of bytes.fragmentation)
  bool optimizer_step_peak = false;                   // the optimizer step, not backward, is the peak
  StageBytes bytes;
};

struct MemoryReport {
  std::string model_name;
  Count total_params;  // every tensor the profile accounts for, unsharded, as in the checkpoint
  std::string profile;
  Layout layout;
  TrainingConfig training;
  AttentionKernel attention = AttentionKernel::eager;
  std::optional<std::int64_t> microbatches;  // per step and pipeline, if the global batch is known
  std::int64_t padded_vocab = 0;
  std::vector<StageReport> stages;
  std::int64_t peak_stage = 0;
  OverheadModel overhead;
  std::vector<std::string> assumptions;
};

// The inventory folded once per model and profile: the tensors of one decoder layer of each kind
// (every layer of a kind has the same tensors), of the embedding, the head and one MTP depth.
// analyze() then costs O(tensor kinds + stages) per layout instead of O(tensors).
struct CompiledModel {
  const ModelSpec* model = nullptr;
  const Profile* profile = nullptr;
  Count total_params;  // every accounted tensor, unsharded
  std::vector<Tensor> dense_layer, moe_layer, embedding, head, mtp_depth;
  std::vector<std::int64_t> moe_before;  // MoE layers among decoder layers [0, i), for i in [0, L]
  [[nodiscard]] std::int64_t moe_layers_in(std::int64_t first, std::int64_t count) const {
    return moe_before[static_cast<std::size_t>(first + count)] - moe_before[static_cast<std::size_t>(first)];
  }
};
// Throws std::logic_error if the inventory's layers of one kind differ (a bug, never user input).
[[nodiscard]] CompiledModel compile_model(const ModelSpec& m, const Inventory& inv, const Profile& profile);

// How a chunk's layers (its decoder layers, then its MTP depths) keep their activations under the
// recomputation settings, counted per layer kind (indexed by LayerKind): `whole` keep every term,
// `mode` keep what the mode keeps (none or selective), `input` keep only their input (a
// checkpointed layer, or the first layer of a checkpointed group); the others keep nothing.
struct ChunkLayerCounts {
  std::array<std::int64_t, 2> whole{}, mode{}, input{};
};
[[nodiscard]] ChunkLayerCounts chunk_layer_counts(const ModelSpec& m, const Chunk& chunk, const TrainingConfig& t);

// Activation terms of one decoder layer of `kind` for one micro-batch on one device.
[[nodiscard]] std::vector<ActivationTerm> layer_activation_terms(const Profile& profile, const ModelSpec& m,
                                                                 const Layout& layout, const TrainingConfig& t,
                                                                 LayerKind kind);

// Evaluates every stage. `inv` must be build_inventory(m). Throws InputError on inconsistent
// training settings; the layout must come from resolve_layout(m, ...).
[[nodiscard]] MemoryReport analyze(const ModelSpec& m, const Inventory& inv, const Profile& profile,
                                   const Layout& layout, const TrainingConfig& t);
// The same from a compiled model (the model and profile it was compiled from must outlive it).
[[nodiscard]] MemoryReport analyze(const CompiledModel& cm, const Layout& layout, const TrainingConfig& t);
// Memoized pieces of evaluations of one compiled model: each tensor group's per-device share
// for a (tp, ep, etp, vocabulary), and each layer kind's and chunk kind's activation bytes for a
// batch, parallel and recompute setting. They are pure functions of their keys, so a search that
// evaluates many layouts reuses them; the numbers are the same as without the cache.
class EvalCache;
struct EvalCacheDeleter {
  void operator()(EvalCache* c) const;
};
using EvalCachePtr = std::unique_ptr<EvalCache, EvalCacheDeleter>;
[[nodiscard]] EvalCachePtr make_eval_cache();

// The same into `r`, reusing its storage (a search evaluates many layouts into one report), and
// the cache's memoized pieces when one is given (one cache per thread).
// With `by_module` false, StageReport::params_by_module is left zero (search never reads it; no
// total depends on it).
void analyze_into(const CompiledModel& cm, const Layout& layout, const TrainingConfig& t, MemoryReport& r,
                  EvalCache* cache = nullptr, bool by_module = true);

// Whether every stage fits in `capacity` bytes, and by how much (negative: short by).
struct StageFit {
  std::int64_t stage = 0;
  bool fits = false;
  std::int64_t headroom_bytes = 0;
};
[[nodiscard]] std::vector<StageFit> fit(const MemoryReport& r, Bytes capacity);

}  // namespace moemem
