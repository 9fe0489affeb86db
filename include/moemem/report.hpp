// The memory report: for every pipeline rank ("stage"), the parameters one device holds
// (non-expert and expert, and by module), the ledger of its bytes (weights, gradients, optimizer
// states, activations per micro-batch times those in flight, buffers, fragmentation, runtime) and
// the totals summed from it. analyze() (analyze.hpp) builds it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moemem/activation.hpp"
#include "moemem/inventory.hpp"
#include "moemem/ledger.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"

namespace moemem {

// What one layer holds beyond the stage's saved activations while it computes (the largest over
// the stage's layers): the saved tensors of the layer or group recomputed during backward, and
// the tensors its forward (or that recomputation) holds without saving them (MoE dispatch copies).
struct LayerTransient {
  Bytes recomputed, unsaved;
  std::size_t unsaved_class = 0;  // whose unsaved terms (a layer class, model.hpp layer_class)
  bool rerun = false;  // selective: only the unsaved terms the recomputed modules re-create
  // The largest unsaved terms of any one layer's forward in the chunk (what a forward holds beside
  // the data loader's batch), and whose they are.
  Bytes forward_unsaved;
  std::size_t forward_class = 0;
  [[nodiscard]] Bytes total() const { return recomputed + unsaved; }
};

// The data loader's batch beside the micro-batches in flight (Profile::input_batch), with what one
// layer's forward holds then.
struct BatchMoment {
  Bytes batch, unsaved;
  Bytes in_forward;  // the batch as a forward holds it (split for context parallelism)
  std::size_t unsaved_class = 0;
  std::string_view rule;
  bool whole = false;  // the whole batch while it is split for context parallelism
  [[nodiscard]] Bytes total() const { return batch + unsaved; }
};

struct StageBytes {
  Bytes weights, gradients, optimizer, activations, buffers, fragmentation;
  Bytes runtime;  // outside PyTorch's allocator: CUDA context, NCCL communicators
  Bytes host;     // CPU memory kept for this GPU (DeepSeek-V3's EMA); not part of any device total
  // Allocated by PyTorch's caching allocator.
  [[nodiscard]] Bytes allocated() const { return weights + gradients + optimizer + activations + buffers; }
  // Reserved by the allocator (allocated plus its cache and fragmentation).
  [[nodiscard]] Bytes reserved() const { return allocated() + fragmentation; }
  // What the device must hold (as nvidia-smi shows it).
  [[nodiscard]] Bytes total() const { return reserved() + runtime; }
};

// FSDP2 (torchtitan profile): what the shards and working copies come to on one device.
struct FsdpDetail {
  Count shard_params;                     // ceil(params / (dp/dp_replicate x cp))
  Count frozen_shard_params;              // hf under FSDP2: the frozen parameters' dim-0 shards
  Count root_params;                      // embedding, final norm, output held (after TP)
  Count embedding_params;                 // the embedding's part of root_params
  Count root_kept_params;                 // of root_params, what stays unsharded after forward
  Count block_params, block_fp8_params;   // one decoder block (after TP), its FP8-GEMM part
  Count root_trainable, block_trainable;  // hf under FSDP2: what of the root (tail) and a block trains
  std::int64_t blocks_kept = 0;           // blocks left unsharded after forward
  Bytes root_unsharded, blocks_unsharded; // bf16 working copies (part of the weights)
  Bytes all_gather_cache, reduce_scatter_cache;  // side-stream blocks (part of the fragmentation)
  bool optimizer_step_peak = false;       // the optimizer step, not backward, is the peak
};

struct StageReport {
  std::int64_t stage = 0;  // pipeline rank
  StageRange layers;       // first decoder layer held and the number held
  std::int64_t last_layer = -1;  // last decoder layer held (-1: none)
  bool has_embedding = false, has_head = false;
  std::int64_t mtp_depths = 0;
  std::vector<std::int64_t> chunks;                   // model chunks held, as Layout::chunks indices
  ParamSplit params;                                  // on one device of the stage
  TrainableSplit trainable;                           // what of it trains, as the optimizers count it
  std::array<Count, kModuleCount> params_by_module{};  // on one device of the stage
  std::vector<Bytes> chunk_activations;               // one micro-batch through each held chunk
  std::vector<std::int64_t> chunk_in_flight;          // micro-batches in flight in each held chunk
  Bytes activations_per_microbatch;                   // sum of chunk_activations
  LayerTransient transient;                           // one layer computing or recomputed
  Bytes cp_ring_buffers;                              // ring attention's K/V in flight, one layer
  BatchMoment input_batch;  // the data loader's batch of the micro-batch in forward (stages receiving it)
  Bytes combined_forward;  // EP all-to-all overlap: a layer of the next micro-batch's forward beside the backward
  Bytes fp8_weight_copies;                            // part of bytes.weights
  Count fp8_weight_params;                            // parameters whose GEMMs run in FP8
  Count nf4_params;                                   // QLoRA: parameters stored as NF4 (part of params)
  Bytes nf4_bytes;                                    // their bytes (part of bytes.weights)
  std::int64_t in_flight_microbatches = 1;
  std::int64_t model_chunks = 1;
  LossPeak loss;                                      // the loss's transient (stages holding the head)
  std::optional<FsdpDetail> fsdp;                     // present under the torchtitan profile
  std::vector<LedgerItem> ledger;                     // every byte, itemised (analyze with Detail::items)
  StageBytes bytes;                                   // the ledger's sums by category

  // Back to a fresh report of rank `s`, keeping the vectors' storage (a search re-evaluates into
  // the same report). Every field above is reset here.
  void reset(std::int64_t s);
};

struct MemoryReport {
  std::string model_name;
  Count total_params;  // every tensor the profile accounts for, unsharded, as in the checkpoint
  Count trainable_params;  // of those, the ones that train (all but under LoRA: the adapters)
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

// Whether every stage fits in `capacity` bytes, and by how much (negative: short by).
struct StageFit {
  std::int64_t stage = 0;
  bool fits = false;
  std::int64_t headroom_bytes = 0;
};
[[nodiscard]] std::vector<StageFit> fit(const MemoryReport& r, Bytes capacity);

}  // namespace moemem
