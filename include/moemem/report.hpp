// The memory report: for every pipeline stage, the parameters one device of that stage holds
// (non-expert and expert, and by module), and the bytes of weights, gradients, optimizer
// states, activations, buffers and fragmentation. analyze() builds it as a fold over the tensor
// inventory under one profile, layout and training configuration.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "moemem/activation.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"

namespace moemem {

struct StageBytes {
  Bytes weights, gradients, optimizer, activations, buffers, fragmentation;
  [[nodiscard]] Bytes allocated() const { return weights + gradients + optimizer + activations + buffers; }
  [[nodiscard]] Bytes total() const { return allocated() + fragmentation; }
};

struct StageReport {
  std::int64_t stage = 0;
  StageRange layers;
  bool has_embedding = false, has_head = false;
  std::int64_t mtp_depths = 0;
  ParamSplit params;                                  // on one device of the stage
  std::array<Count, kModuleCount> params_by_module{};  // on one device of the stage
  Bytes activations_per_microbatch;
  std::int64_t in_flight_microbatches = 1;
  std::int64_t model_chunks = 1;
  StageBytes bytes;
};

struct MemoryReport {
  std::string model_name;
  Count total_params;  // every tensor the profile accounts for, unsharded
  std::string profile;
  Layout layout;
  TrainingConfig training;
  std::vector<StageReport> stages;
  std::int64_t peak_stage = 0;
  OverheadModel overhead;
  std::vector<std::string> assumptions;
};

// Pipeline stage holding tensor `t` (embedding on the first, head and MTP on the last).
[[nodiscard]] std::int64_t stage_of(const Tensor& t, const Layout& layout, const std::vector<std::int64_t>& stage_of_layer);

// Activation terms of one decoder layer of `kind` for one micro-batch on one device.
[[nodiscard]] std::vector<ActivationTerm> layer_activation_terms(const Profile& profile, const ModelSpec& m,
                                                                 const Layout& layout, const TrainingConfig& t,
                                                                 LayerKind kind);

// Evaluates every stage. `inv` must be build_inventory(m). Throws InputError on inconsistent
// training settings; the layout must come from resolve_layout(m, ...).
[[nodiscard]] MemoryReport analyze(const ModelSpec& m, const Inventory& inv, const Profile& profile,
                                   const Layout& layout, const TrainingConfig& t);

}  // namespace moemem
