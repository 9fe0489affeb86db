// What LoRA's adapters save for backward in one Megatron decoder layer (megatron profile).
// Megatron-Bridge 067f987d, src/megatron/bridge/peft/utils.py ParallelLinearAdapter.forward
// (dropout_position "pre"): x = dropout(x); for a column-parallel base (q/k/v, gate/up) the
// input is all-gathered over the sequence-parallel group (gather_from_sequence_parallel_region;
// the adapter's config turns sequence parallelism off), then linear_in (A, a ColumnParallelLinear
// with gather_output) and linear_out (B); for a row-parallel base (o_proj, down) linear_in is a
// RowParallelLinear on the base's own input. Each of A and B is a Megatron linear whose weight
// trains, so each saves its input (LinearWithGradAccumulationAndAsyncCommunication): A the
// (gathered or dropped-out) input, B the r-wide intermediate, whole on every TP rank.
// The frozen base saves no input of its own: Transformer Engine d0067d0d, module/linear.py
// backward_needs_input = is_grad_enabled and weight.requires_grad (saved_inputmat only then), and
// layernorm_linear.py saves ln_out only if weight.requires_grad. That input is the adapter's A
// input when there is neither dropout nor sequence parallelism, so the profile's linear-input
// terms (which the base would keep in full training) stand for it; where they are no longer saved
// (untargeted frozen linears, or sequence parallelism or dropout replacing the tensor A keeps)
// they are left in, an over-count the report names.
#include <array>

#include "moemem/finetune.hpp"
#include "profiles/shared.hpp"

namespace moemem::profiles {

namespace {

// Elements of the four kinds of adapter term, summed per module of the layer.
enum Kind : std::size_t { kIntermediate, kGathered, kMask, kDropped, kKinds };
constexpr std::array<Module, 4> kLoraModules{Module::attention, Module::dense_mlp, Module::shared_experts, Module::routed_experts};
constexpr std::array<std::array<std::string_view, kKinds>, 4> kNames{{
    {"lora.attention.intermediate (B input)", "lora.attention.gathered_input (A input, sp)", "lora.attention.dropout_mask",
     "lora.attention.dropout_output (A input)"},
    {"lora.mlp.intermediate (B input)", "lora.mlp.gathered_input (A input, sp)", "lora.mlp.dropout_mask",
     "lora.mlp.dropout_output (A input)"},
    {"lora.shared_experts.intermediate (B input)", "lora.shared_experts.gathered_input (A input, sp)",
     "lora.shared_experts.dropout_mask", "lora.shared_experts.dropout_output (A input)"},
    {"lora.experts.intermediate (B input)", "lora.experts.gathered_input", "lora.experts.dropout_mask",
     "lora.experts.dropout_output (A input)"},
}};
constexpr std::array<std::string_view, kKinds> kRules{
    "tokens x r per adapter (B's input, whole r on every TP rank)", "b*s/cp x in per column-parallel adapter (gathered over sp)",
    "a byte per element of each adapter's input", "each adapter's input after dropout"};

std::size_t slot_of(const Tensor& t) {
  if (t.is_routed_expert) return 3;
  if (t.module == Module::dense_mlp) return 1;
  if (t.module == Module::shared_experts) return 2;
  return 0;
}

}  // namespace

void lora_layer_terms(const ActivationContext& c, LayerKind kind, Terms& terms, std::int64_t routed_tokens) {
  const auto& m = c.model;
  const auto& t = c.training;
  const auto& p = c.layout.config;
  // One layer of `kind` with its adapters (a model's layers of one kind have the same tensors).
  std::int64_t layer = -1;
  for (std::int64_t l = 0; l < m.num_layers && layer < 0; ++l) {
    if (m.layer_kinds[static_cast<std::size_t>(l)] == kind) layer = l;
  }
  if (layer < 0) layer = m.num_layers;  // an MTP depth's layer (kind as the last layer)
  const Inventory inv = apply_finetune(build_inventory(m), t.finetuning());
  const std::int64_t tokens = t.micro_batch * (t.seq_len / p.cp);
  const std::int64_t tokens_sp = tokens / (p.sp ? p.tp : 1);
  std::array<std::array<Count, kKinds>, 4> sum{};
  for (const auto& a : inv.tensors) {
    if (a.adapter != Adapter::lora_a || a.layer != layer) continue;
    const std::size_t slot = slot_of(a);
    const std::int64_t r = t.lora_rank, in = a.cols;
    Count input;  // the adapter's input on this rank, as dropout sees it
    if (a.is_routed_expert) {
      // Each expert's adapters see its routed tokens: R rows over all local experts together.
      sum[slot][kIntermediate] += elems({routed_tokens, r});
      input = elems({routed_tokens, a.role == Role::expert_down ? in / p.etp_degree() : in});
    } else {
      const TpSplit split = megatron_tp_split(a.role);
      const bool row = split == TpSplit::row, column = split == TpSplit::column;
      sum[slot][kIntermediate] += elems({column || row ? tokens : tokens_sp, r});
      input = row ? elems({tokens, in}, p.tp) : elems({tokens_sp, in});
      if (column && p.sp && p.tp > 1) sum[slot][kGathered] += elems({tokens, in});
      if (t.lora_dropout > 0 && !(column && p.sp && p.tp > 1)) sum[slot][kDropped] += input;
      if (t.lora_dropout > 0) sum[slot][kMask] += input;
      continue;
    }
    if (t.lora_dropout > 0) {
      sum[slot][kDropped] += input;
      sum[slot][kMask] += input;
    }
  }
  for (std::size_t s = 0; s < 4; ++s) {
    const std::uint16_t dropped_by = s == 0 ? std::uint16_t{0} : static_cast<std::uint16_t>(s == 1 ? kRecomputeMlp : kRecomputeMoe);
    for (std::size_t k = 0; k < kKinds; ++k) {
      if (sum[s][k].value() == 0) continue;
      terms.add(kNames[s][k], kLoraModules[s], sum[s][k], k == kMask ? DType::int8 : terms.a, dropped_by, kRules[k]);
    }
  }
}

}  // namespace moemem::profiles
