// Private to the hf profile (src/profiles/hf.cpp, hf_layers.cpp): what one decoder layer's terms
// need to know beyond the ActivationContext, namely which weights need gradients (full training:
// all; LoRA: the adapters, whose A reads the base layer's input) and the layer's LoRA adapters.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moemem/activation.hpp"
#include "moemem/inventory.hpp"
#include "profiles/shared.hpp"

namespace moemem::detail {
// ZeRO's states plus DeepSpeed's own buffers (hf_deepspeed.cpp).
extern const StateModel kDeepSpeedStates;
// The hf profile's states: DeepSpeed's, FSDP's under --fsdp1/--fsdp2 (hf_fsdp2.cpp), or plain
// DDP's under --ddp (hf_ddp.cpp, kHfDdpStates).
extern const StateModel kHfStates, kHfDdpStates;

// The parameters Hugging Face's modeling code holds in a group of inventory tensors: the parts of
// a fused checkpoint tensor (consecutive entries of one name, e.g. gpt-oss's gate_up_proj) are one
// parameter. A routed entry's copies are one parameter each where the name has a wildcard
// (Mixtral's "experts.*.w1.weight": an nn.Linear per expert under transformers 4), else one
// parameter holding them all (gpt-oss's, Llama-4's and Qwen3.5's 3-D "experts.gate_up_proj"
// [E, ...]). transformers 5 (fused_experts) holds every MoE model's routed experts as 3-D
// parameters, gate and up fused: the wildcard entries then make two parameters, gate_up_proj
// [E, 2f, h] (the gate and up entries) and down_proj [E, h, f] (the measured saved tensors show the
// fused product: docs/validation.md). Calls f(first tensor, elements of one parameter, parameters
// per layer, whether any part trains, whether any part is NF4) once per distinct parameter.
template <class F>
void each_hf_parameter(const std::vector<Tensor>& tensors, bool fused_experts, F&& f) {
  struct Fused {
    const Tensor* first = nullptr;
    std::int64_t numel = 0;
    bool trains = false, nf4 = false;
  };
  Fused gate_up, down;
  for (std::size_t i = 0; i < tensors.size();) {
    std::size_t j = i;
    std::int64_t numel = 0;
    bool trains = false, nf4 = false;
    for (; j < tensors.size() && tensors[j].name == tensors[i].name; ++j) {
      numel += static_cast<std::int64_t>(checked_mul(static_cast<std::uint64_t>(tensors[j].rows),
                                                     static_cast<std::uint64_t>(tensors[j].cols), "parameter size"));
      trains = trains || tensors[j].trainable;
      nf4 = nf4 || tensors[j].quantized();
    }
    const Tensor& first = tensors[i];
    i = j;
    const bool per_copy = first.name.find('*') != std::string::npos;
    if (!per_copy || !fused_experts || !first.is_routed_expert) {
      if (!per_copy) {
        numel = static_cast<std::int64_t>(
            checked_mul(static_cast<std::uint64_t>(numel), static_cast<std::uint64_t>(first.copies), "parameter size"));
      }
      f(first, numel, per_copy ? first.copies : std::int64_t{1}, trains, nf4);
      continue;
    }
    Fused& into = first.role == Role::expert_down ? down : gate_up;
    if (into.first == nullptr) into.first = &first;
    into.numel = static_cast<std::int64_t>(checked_add(
        static_cast<std::uint64_t>(into.numel),
        checked_mul(static_cast<std::uint64_t>(numel), static_cast<std::uint64_t>(first.copies), "parameter size"),
        "parameter size"));
    into.trains = into.trains || trains;
    into.nf4 = into.nf4 || nf4;
  }
  for (const Fused* p : {&gate_up, &down}) {
    if (p->first != nullptr) f(*p->first, p->numel, std::int64_t{1}, p->trains, p->nf4);
  }
}
}  // namespace moemem::detail

namespace moemem::profiles {

extern const Profile kHf;  // hf.cpp

struct HfLayerContext {
  const ActivationContext& c;
  std::array<bool, kRoleCount> trains_{};  // a tensor of this role in the layer needs a gradient
  std::vector<Tensor> adapters;            // the layer's LoRA A matrices
  Count adapter_params;                    // every LoRA A and B element of the layer

  [[nodiscard]] std::int64_t tokens() const { return c.training.micro_batch * c.training.seq_len; }
  [[nodiscard]] bool trains(Role r) const { return trains_[static_cast<std::size_t>(r)]; }
  // Whether the linear module holding `r` saves its input: its weight (any part of a fused
  // checkpoint matrix) needs a gradient.
  [[nodiscard]] bool saves_input(Role r) const;
};

// Names of one RMSNorm's terms (copy_rest: only for the layer's input norm).
struct HfNormNames {
  std::string_view copy, copy_rest, rsqrt, cast;
};

[[nodiscard]] HfLayerContext hf_layer_context(const ActivationContext& c, LayerKind kind);

// The dtype an RMSNorm's weight product saves its normalised input in: GptOssRMSNorm keeps its
// weight in fp32 (_keep_in_fp32_modules) and casts after the product, (weight * x).to(dtype), so
// the product saves the fp32 x; the others cast first, weight * x.to(dtype).
[[nodiscard]] inline DType norm_product_dtype(const ModelSpec& m, DType activations) {
  return m.model_type == "gpt_oss" ? DType::fp32 : activations;
}

void hf_layer_activations(const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out);

}  // namespace moemem::profiles
