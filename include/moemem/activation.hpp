// Activations: the tensors one micro-batch keeps for the backward pass, per layer. Each term
// has a name, the module it belongs to, its element count on one device, its dtype and
// whether full recomputation keeps it (a checkpointed block's input, DeepSeek's routing map).
// Which terms exist is a profile's decision (profile.hpp); this header holds the shared types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moemem/dtype.hpp"
#include "moemem/inventory.hpp"
#include "moemem/optimizer.hpp"
#include "moemem/parallel.hpp"
#include "moemem/training.hpp"

namespace moemem {

struct ActivationTerm {
  std::string_view name;
  Module module{};
  Count elements;          // on one device, for one micro-batch
  DType dtype{};
  bool kept_under_full{};      // kept when the layer is fully recomputed
  std::uint16_t dropped_by{};  // RecomputeModule mask of selective modules that free it
  std::string_view rule{};     // how the size follows from the model (for explain)
  bool only_selective{};       // kept only under selective recomputation (torchtitan's per-op SAC caches
                               // matmul outputs that eager backward would not keep)
  bool transient{};            // never saved: alive only while the layer computes its forward (MoE
                               // dispatch copies); counted in the layer transient, never kept.
                               // dropped_by then names the selective modules whose recomputation
                               // re-creates it (their rerun holds it again)

  [[nodiscard]] Bytes bytes() const { return bytes_of(elements, dtype); }
};

struct ActivationContext {
  const ModelSpec& model;
  const Layout& layout;
  const TrainingConfig& training;
  AttentionKernel attention = AttentionKernel::eager;
  std::int64_t padded_vocab = 0;  // vocabulary rows after the profile's padding
  MixerKind mixer = MixerKind::attention;  // the layer's mixer, for a profile's layer terms
};

// Sum of the terms a layer keeps under `r` (`modules`: the selective set).
[[nodiscard]] Bytes kept_bytes(const std::vector<ActivationTerm>& terms, Recompute r, std::uint16_t modules = 0);
[[nodiscard]] bool is_kept(const ActivationTerm& t, Recompute r, std::uint16_t modules);
// Sum of the transient terms a layer's forward holds at once; `rerun_modules` (nonzero): only those
// a selective recomputation of these modules re-creates.
[[nodiscard]] Bytes transient_bytes(const std::vector<ActivationTerm>& terms, std::uint16_t rerun_modules = 0);


}  // namespace moemem
