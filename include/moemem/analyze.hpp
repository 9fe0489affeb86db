// Evaluation: the inventory compiled once per model and profile, then every stage of a layout
// costed under one training configuration into a MemoryReport (report.hpp) whose totals are sums
// over each stage's ledger (ledger.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "moemem/report.hpp"

namespace moemem {

// The inventory folded once per model and profile: the tensors of one decoder layer of each kind
// (every layer of a kind has the same tensors), of the embedding, the head and one MTP depth.
// analyze() then costs O(tensor kinds + stages) per layout instead of O(tensors).
struct CompiledModel {
  const ModelSpec* model = nullptr;
  const Profile* profile = nullptr;
  Count total_params;  // every accounted tensor, unsharded
  Count trainable_params;  // of those, the trainable ones (apply_finetune freezes the base under LoRA)
  // One decoder layer's tensors per layer class (model.hpp layer_class; empty where no layer has it).
  std::array<std::vector<Tensor>, kLayerClasses> layer;
  std::vector<Tensor> embedding, head, mtp_depth;
  // Layers of each class among decoder layers [0, i), for i in [0, L].
  std::array<std::vector<std::int64_t>, kLayerClasses> before;
  std::array<bool, kLayerClasses> present{};  // some decoder layer has the class
  // The classes an evaluation costs, in index order: the decoder layers' and the MTP layers'
  // (usually one or two of the kLayerClasses; the others hold no layer).
  std::vector<std::size_t> classes;
  [[nodiscard]] std::int64_t layers_in(std::size_t cls, std::int64_t first, std::int64_t count) const {
    const auto& b = before[cls];
    return b[static_cast<std::size_t>(first + count)] - b[static_cast<std::size_t>(first)];
  }
  // Nemotron-NAS: the model with each block shape's key/value heads and FFN width, one per
  // ModelSpec::nas_shapes, for the activation terms of its classes.
  std::vector<ModelSpec> nas_models;
  [[nodiscard]] const ModelSpec& shape_model(std::size_t cls) const {
    return model->nas_classes() ? nas_models[cls] : *model;
  }
  [[nodiscard]] std::int64_t moe_layers_in(std::int64_t first, std::int64_t count) const {
    std::int64_t n = 0;
    for (const std::size_t k : classes) n += model->class_kind(k) == LayerKind::moe ? layers_in(k, first, count) : 0;
    return n;
  }
};
// The layout's chunk that holds tensor `t` (embedding, decoder layer, head or MTP depth).
[[nodiscard]] std::int64_t chunk_holding(const Tensor& t, const Layout& layout, std::int64_t num_layers);
// Throws std::logic_error if the inventory's layers of one kind differ (a bug, never user input).
[[nodiscard]] CompiledModel compile_model(const ModelSpec& m, const Inventory& inv, const Profile& profile);

// How a chunk's layers (its decoder layers, then its MTP depths) keep their activations under the
// recomputation settings, counted per layer class (indexed by layer_class): `whole` keep every term,
// `mode` keep what the mode keeps (none or selective), `input` keep only their input (a
// checkpointed layer, or the first layer of a checkpointed group); the others keep nothing.
struct ChunkLayerCounts {
  std::array<std::int64_t, kLayerClasses> whole{}, mode{}, input{};
};
// `blocks_before`: under torchtitan's layer SAC (RecomputeMethod::every), the decoder layers the
// chunk's rank holds in chunks before it (its process-wide block counter's start).
[[nodiscard]] ChunkLayerCounts chunk_layer_counts(const ModelSpec& m, const Chunk& chunk, const TrainingConfig& t,
                                                  std::int64_t blocks_before = 0);
// The decoder layers held, on the rank holding `chunk`, by its chunks before it in model order
// (torchtitan builds a rank's model parts in stage order, one block counter across them).
[[nodiscard]] std::int64_t blocks_before_chunk(const Layout& layout, std::int64_t chunk);

// Activation terms of one decoder layer of `kind` for one micro-batch on one device.
[[nodiscard]] std::vector<ActivationTerm> layer_activation_terms(const Profile& profile, const ModelSpec& m,
                                                                 const Layout& layout, const TrainingConfig& t,
                                                                 LayerKind kind,
                                                                 MixerKind mixer = MixerKind::attention);

// What an evaluation records besides the totals: `totals` only (search), also the parameters
// by module, or also every ledger item (explain, paper).
enum class Detail : std::uint8_t { totals, modules, items };

// Evaluates every stage. `inv` must be build_inventory(m). Throws InputError on inconsistent
// training settings; the layout must come from resolve_layout(m, ...).
[[nodiscard]] MemoryReport analyze(const ModelSpec& m, const Inventory& inv, const Profile& profile,
                                   const Layout& layout, const TrainingConfig& t, Detail detail = Detail::modules);
// The same from a compiled model (the model and profile it was compiled from must outlive it).
[[nodiscard]] MemoryReport analyze(const CompiledModel& cm, const Layout& layout, const TrainingConfig& t,
                                   Detail detail = Detail::modules);
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

// Whether an evaluation first runs check_training and the profile's check (`run`), or its caller
// has just run both on the same layout and settings and had them pass (`passed`: search, which
// turns their errors into verdicts before costing). The checks only the evaluation makes run either way.
enum class Checks : std::uint8_t { run, passed };

// The same into `r`, reusing its storage (a search evaluates many layouts into one report), and
// the cache's memoized pieces when one is given (one cache per thread).
void analyze_into(const CompiledModel& cm, const Layout& layout, const TrainingConfig& t, MemoryReport& r,
                  EvalCache* cache = nullptr, Detail detail = Detail::modules, Checks checks = Checks::run);
// One stage's total bytes (Detail::totals), the same as analyze_into gives that stage: a lower bound
// on the layout's peak that costs one stage (search skips a layout whose bound already exceeds
// what it keeps). The same checks, so the same InputErrors.
[[nodiscard]] Bytes analyze_stage_total(const CompiledModel& cm, const Layout& layout, const TrainingConfig& t,
                                        std::int64_t stage, StageReport& st, EvalCache* cache = nullptr,
                                        Checks checks = Checks::run);

}  // namespace moemem
