// Private to the evaluator (src/analyze/): the memoized pieces and the steps of analyze_into.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "moemem/analyze.hpp"
#include "analyze/flat_table.hpp"

namespace moemem::detail {

inline std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

inline Bytes times(Bytes b, std::int64_t n, const char* what) {
  return Bytes(checked_mul(b.value(), static_cast<std::uint64_t>(n), what));
}

// The parameters one device holds of a group of tensors.
struct Share {
  ParamSplit params;
  std::array<Count, kModuleCount> by_module{};
  ParamSplit fp8;  // parameters whose GEMMs run in FP8, by ZeRO group
  TrainableSplit trainable;  // what trains (all of params but under LoRA), as the optimizers count it
  Count nf4_params;          // QLoRA: parameters stored as NF4, and their bytes
  Bytes nf4_bytes;
  void add(const Share& o, std::int64_t times, bool modules);
};

// Each tensor group's share on one device: decoder layers of each kind, embedding, head, one MTP
// depth, and the MTP depth's copies of the embedding and head (shared with the main model's).
struct Shares {
  std::array<Share, kLayerClasses> layer;  // by layer class
  Share emb, head, mtp, mtp_emb, mtp_head;
  Share tied_head;  // the word embedding as the loss stage's own output weight (tied_head_copy)
};
struct SharesKey {
  std::int64_t tp, ep, etp, vocab;
  bool fp8;
  auto operator<=>(const SharesKey&) const = default;
};

// A layer kind's activation bytes: nothing recomputed; kept under the mode; kept under full
// recomputation (its input); held unsaved while its forward runs, and while the mode's selective
// modules rerun.
struct KindBytes {
  Bytes all, kept, input, unsaved, rerun_unsaved;
};
// Everything the activation terms depend on besides the model: the degrees, the resolved
// vocabulary and kernel, and whole parts of the training settings.
struct ActKey {
  std::int64_t tp, cp, ep, etp;
  bool sp;
  std::int64_t vocab;
  AttentionKernel attention;
  Batch batch;
  RecomputePolicy recompute;
  Numerics numerics;
  MoeRouting routing;
  FsdpSettings fsdp;
  FinetuneSettings finetune;
  auto operator<=>(const ActKey&) const = default;
};
// Hashes the fields that differ between a search's layouts; equal keys agree on them, and the rest
// is told apart by ==.
struct ActKeyHash {
  std::size_t operator()(const ActKey& k) const noexcept {
    std::uint64_t h = 0;
    for (const std::int64_t v : {k.tp, k.cp, k.ep, k.etp, k.vocab, k.batch.micro_batch, k.batch.seq_len,
                                 k.batch.global_batch.value_or(-1), k.recompute.recompute_num_layers,
                                 k.recompute.cpu_offload_layers, static_cast<std::int64_t>(k.recompute.recompute_modules),
                                 static_cast<std::int64_t>(k.recompute.recompute),
                                 static_cast<std::int64_t>(k.recompute.recompute_method),
                                 static_cast<std::int64_t>(k.attention), static_cast<std::int64_t>(k.sp)}) {
      h = (h ^ static_cast<std::uint64_t>(v)) * 0x100000001b3u;
    }
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};
struct ChunkKey {
  bool embedding, loss;
  std::int64_t mtp;
  auto operator<=>(const ChunkKey&) const = default;
};
// A chunk's place in the model: with an ActKey, all its activation costs depend on.
struct ChunkShape {
  std::int64_t first_layer, num_layers, first_mtp, mtp_depths;
  bool embedding, loss;
  std::int64_t blocks_before = 0;  // torchtitan's layer SAC: blocks of the rank before the chunk
  bool operator==(const ChunkShape&) const = default;
};
struct ChunkShapeHash {
  std::size_t operator()(const ChunkShape& s) const noexcept {
    std::uint64_t h = static_cast<std::uint64_t>(s.first_layer);
    for (const std::int64_t v : {s.num_layers, s.first_mtp, s.mtp_depths, s.blocks_before}) h = h * 1000003u ^ static_cast<std::uint64_t>(v);
    return static_cast<std::size_t>((h << 2) ^ (s.embedding ? 1u : 0u) ^ (s.loss ? 2u : 0u));
  }
};
// One micro-batch's bytes in a chunk, its recomputation transient and its EP-overlap forward layer
// (ChunkActivations' three entries for one chunk).
struct ChunkCost {
  Bytes bytes;
  LayerTransient transient;
  Bytes combined_forward;
};
struct Acts {
  std::array<KindBytes, kLayerClasses> kinds{};  // by layer class
  std::map<ChunkKey, Bytes> extras;
  FlatTable<ChunkShape, ChunkCost, ChunkShapeHash> chunks;  // every chunk costed so far
};

// What one evaluation shares across its stages.
struct EvalContext {
  const CompiledModel& cm;
  const ModelSpec& model;
  const Profile& profile;
  const Layout& layout;
  const TrainingConfig& t;
  AttentionKernel attention;
  std::int64_t vocab;  // padded
  std::optional<std::int64_t> microbatches;  // per step and pipeline, if the global batch is known
  Detail detail;
  std::pair<Bytes, std::uint64_t> allowance{};  // buffers, and fragmentation in thousandths of a percent
  EvalCache* cache = nullptr;                    // the search thread's memo, if any
  [[nodiscard]] ActivationContext activation_context() const { return {model, layout, t, attention, vocab}; }
};

// params.cpp: the tensor groups' shares (memoized in `cache` when given), and each stage's sum.
const Shares& shares_for(const EvalContext& c, EvalCache* cache, Shares& local);
void assign_params(const EvalContext& c, const Shares& sh, StageReport& st);
// Weights by tensor role on the stage's device (Detail::items).
void record_weights_by_role(const EvalContext& c, const StageReport& st, Ledger& ledger);

// activations.cpp: one micro-batch's bytes in each chunk of the layout, and each chunk's
// recomputation transient; then a stage's activations under its schedule, and their items.
struct ChunkActivations {
  std::vector<Bytes> bytes;
  std::vector<LayerTransient> transient;
  // With the EP all-to-all overlap: one layer of the next micro-batch's forward, held beside the
  // backward (its kept and unsaved tensors), the largest in the chunk.
  std::vector<Bytes> combined_forward;
};
// Every chunk of the layout, or only those of `only` when given (the others left zero).
void chunk_activations(const EvalContext& c, EvalCache* cache, ChunkActivations& out, const StageReport* only = nullptr);
void stage_activations(const EvalContext& c, const ChunkActivations& chunks, Bytes cp_kv_block, StageReport& st);
void record_activations(const EvalContext& c, const StageReport& st, Ledger& ledger);

// A profile's state model: how weights, gradients and optimizer states are kept (ZeRO and the
// distributed optimizer in zero_states.cpp, FSDP2 in fsdp2_states.cpp). `prepare` (optional) reads the
// stage's tensor shares, `cost` works out what the ledger needs (FP8 weight copies; FSDP2's shards
// and whether the optimizer step, with no activations alive, is the peak), `record` itemises the
// states and `record_cache` the allocator's reserve beyond what is allocated (`pct`: the
// profile's percentage). `cost` returns true when the stage peaks at the optimizer step, when no
// activations are alive.
struct StateModel {
  void (*prepare)(const EvalContext&, const Shares&, StageReport&);
  bool (*cost)(const EvalContext&, StageReport&, Bytes activations);  // true: the peak has no activations alive
  void (*record)(const EvalContext&, const StageReport&, Ledger&);
  void (*record_cache)(const EvalContext&, const StageReport&, Bytes pct, Ledger&);
};
extern const StateModel kZeroStates, kFsdp2States;
// Whether --fsdp-float8-all-gather takes effect: torchtitan turns it on only where FSDP shards over
// data parallelism (dp_shard > 1), not over context parallelism alone (fsdp2_states.cpp).
bool fsdp_float8_all_gather_active(const EvalContext& c);

// overheads.cpp: outside the allocator, CP ring blocks, buffers and fragmentation.
// Memory outside PyTorch's allocator, itemised: the CUDA context and each NCCL communicator.
struct RuntimePart {
  const char* name = "";
  Bytes bytes;
  const char* rule = "";
  bool end_stages_only = false;  // a group of the ranks holding the embedding, head or MTP only
};
struct Runtime {
  std::array<RuntimePart, 16> parts{};
  std::size_t count = 0;
  Bytes every_stage, end_stages;  // the parts' sums: on every stage, and on the end stages only
  void add(const char* name, Bytes b, const char* rule, bool end_stages_only = false) {
    parts[count++] = {name, b, rule, end_stages_only};
    (end_stages_only ? end_stages : every_stage) += b;
  }
};
Runtime runtime_bytes(const EvalContext& c);

// The profile's buffer allowance at the chosen point, and its fragmentation percentage (in
// thousandths of a percent, so integral percentages stay exact).
std::pair<Bytes, std::uint64_t> allowance(const EvalContext& c);
Bytes cp_kv_block(const EvalContext& c);
void record_overheads(const EvalContext& c, const StageReport& st, const Runtime& runtime, Ledger& ledger);

// cuda_graphs.cpp: what per-layer CUDA graphs keep beyond the eager layers (category buffers).
void record_cuda_graphs(const EvalContext& c, const StageReport& st, Ledger& ledger);
// userbuffers.cpp: --tp-comm-overlap's userbuffers (runtime) and --delay-wgrad-compute's held tensors.
void record_userbuffers_and_wgrad(const EvalContext& c, const StageReport& st, Ledger& ledger);

// model_variants.cpp: a profile's layer and chunk terms with what model variants add to them
// (Gemma's output norms, soft-capping), and the refusal of a variant a profile does not model.
std::optional<InputError> check_model_variants(const ModelSpec& m, const Profile& profile, const Layout& layout,
                                                const TrainingConfig& t, AttentionKernel attention);
void layer_terms(const Profile& profile, const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out);
// model_llama4.cpp: Llama-4's accepted setups, and what its layers save beyond the profile's terms.
std::optional<InputError> check_llama4(const ModelSpec& m, const Profile& profile, const Layout& layout,
                                       const TrainingConfig& t, AttentionKernel attention);
void llama4_layer_terms(const Profile& profile, const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out);
void chunk_terms(const Profile& profile, const ActivationContext& c, const Chunk& chunk, std::vector<ActivationTerm>& out);

}  // namespace moemem::detail

namespace moemem {

class EvalCache {
 public:
  std::map<detail::SharesKey, detail::Shares> shares;
  detail::FlatTable<detail::ActKey, detail::Acts, detail::ActKeyHash> acts;
  // Transformer Engine's dummy weight gradients by what decides them (overheads.cpp): tp, etp,
  // ep, the padded vocabulary, the layer classes held (a bit each), MTP and head held, the weights'
  // and activations' dtypes; the bytes, elements and number of shapes.
  std::map<std::array<std::int64_t, 8>, std::tuple<Bytes, Count, std::size_t>> dummy_wgrads;
  // The last few of them looked up, scanned before the map (a layout's stages share most keys).
  std::array<std::pair<std::array<std::int64_t, 8>, std::tuple<Bytes, Count, std::size_t>>, 8> recent_dummy_wgrads{};
  std::size_t recent_dummy_next = 0, recent_dummy_size = 0;
};

}  // namespace moemem
