#include "moemem/report.hpp"

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "moemem/sharding.hpp"

namespace moemem {

namespace {

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

}  // namespace

std::int64_t stage_of(const Tensor& t, const Layout& layout, const std::vector<std::int64_t>& stage_of_layer) {
  const auto last = static_cast<std::int64_t>(layout.stages.size()) - 1;
  switch (t.placement) {
    case Placement::embedding: return 0;
    case Placement::decoder: return stage_of_layer[idx(t.layer)];
    case Placement::head:
    case Placement::mtp: return last;
  }
  return 0;
}

std::vector<ActivationTerm> layer_activation_terms(const Profile& profile, const ModelSpec& m, const Layout& layout,
                                                   const TrainingConfig& t, LayerKind kind) {
  std::vector<ActivationTerm> terms;
  profile.layer_activations(ActivationContext{m, layout, t}, kind, terms);
  return terms;
}

MemoryReport analyze(const ModelSpec& m, const Inventory& inv, const Profile& profile, const Layout& layout,
                     const TrainingConfig& t) {
  validate_training(t, layout);
  const auto& p = layout.config;
  const auto num_stages = static_cast<std::int64_t>(layout.stages.size());

  MemoryReport r;
  r.model_name = m.name;
  r.profile = std::string(profile.name);
  r.layout = layout;
  r.training = t;
  r.overhead = profile.overhead;
  for (const auto a : profile.assumptions) r.assumptions.emplace_back(a);

  std::vector<std::int64_t> stage_of_layer(idx(m.num_layers), 0);
  r.stages.resize(idx(num_stages));
  for (std::int64_t s = 0; s < num_stages; ++s) {
    auto& st = r.stages[idx(s)];
    st.stage = s;
    st.layers = layout.stages[idx(s)];
    for (std::int64_t l = 0; l < st.layers.num_layers; ++l) stage_of_layer[idx(st.layers.first_layer + l)] = s;
  }
  r.stages.front().has_embedding = true;
  r.stages.back().has_head = true;
  r.stages.back().mtp_depths = m.mtp_layers;

  // Parameters: one pass over the inventory.
  for (const auto& tensor : inv.tensors) {
    if (!profile.accounts(tensor)) continue;
    r.total_params += tensor.params();
    const std::int64_t s = stage_of(tensor, layout, stage_of_layer);
    // MTP's embedding/head copies are the main model's own tensors when both sit on one stage.
    if (tensor.shared_in_training) {
      const std::int64_t main_stage = tensor.role == Role::mtp_embedding ? 0 : num_stages - 1;
      if (main_stage == s) continue;
    }
    auto& st = r.stages[idx(s)];
    const Count c = device_params(tensor, profile, p);
    (profile.zero_group(tensor.role) == ZeroGroup::expert ? st.params.expert : st.params.non_expert) += c;
    st.params_by_module[static_cast<std::size_t>(tensor.module)] += c;
  }

  // Activations: the terms of one layer of each kind, once.
  Bytes dense_layer, moe_layer;
  try {
    dense_layer = kept_bytes(layer_activation_terms(profile, m, layout, t, LayerKind::dense), t.recompute);
    if (m.is_moe()) moe_layer = kept_bytes(layer_activation_terms(profile, m, layout, t, LayerKind::moe), t.recompute);
  } catch (const OverflowError&) {
    throw InputError("--micro-batch/--seq-len", fmt::format("{} x {}", t.micro_batch, t.seq_len),
                     "a batch and sequence whose activation sizes fit in 64 bits");
  }
  const Bytes mtp_layer = m.is_moe() ? moe_layer : dense_layer;

  const auto dense_group = p.dp * p.cp;
  for (auto& st : r.stages) {
    Bytes per_mb;
    for (std::int64_t l = 0; l < st.layers.num_layers; ++l) {
      per_mb += m.layer_kinds[idx(st.layers.first_layer + l)] == LayerKind::moe ? moe_layer : dense_layer;
    }
    for (std::int64_t k = 0; k < st.mtp_depths; ++k) per_mb += mtp_layer;
    st.activations_per_microbatch = per_mb;
    st.in_flight_microbatches = profile.in_flight_microbatches(st.stage, layout, t);
    st.bytes.activations = Bytes(checked_mul(per_mb.value(), static_cast<std::uint64_t>(st.in_flight_microbatches),
                                             "activation bytes"));
    const StateBytes sb = state_bytes(st.params, dense_group, layout.edp, t.zero, t.precision);
    st.bytes.weights = sb.weights;
    st.bytes.gradients = sb.gradients;
    st.bytes.optimizer = sb.optimizer;
    unsigned pct = 0;
    switch (t.overhead) {
      case OverheadPoint::none: break;
      case OverheadPoint::low:
        st.bytes.buffers = profile.overhead.buffers_low;
        pct = profile.overhead.fragmentation_pct_low;
        break;
      case OverheadPoint::high:
        st.bytes.buffers = profile.overhead.buffers_high;
        pct = profile.overhead.fragmentation_pct_high;
        break;
    }
    st.bytes.fragmentation = Bytes(ceil_div(checked_mul(st.bytes.allocated().value(), pct, "fragmentation"), 100));
  }

  for (const auto& st : r.stages) {
    if (st.bytes.total() > r.stages[idx(r.peak_stage)].bytes.total()) r.peak_stage = st.stage;
  }
  return r;
}

}  // namespace moemem
