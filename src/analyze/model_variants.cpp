// Model variants whose saved tensors are the same under every profile that trains them, added to
// the profile's own layer and chunk terms: Gemma's norms on the attention and MLP outputs, and
// Gemma-2's tanh soft-capping of attention scores and logits; Llama-4's in model_llama4.cpp. Where a profile's framework does
// not train such a model (Gemma under torchtitan, Phi-3.5-MoE but under paper), or trains it on a
// path moemem does not model, the analysis is refused by name.
#include <fmt/format.h>

#include "analyze/internal.hpp"
#include "moemem/errors.hpp"
#include "moemem/pipeline.hpp"

namespace moemem::detail {

namespace {

const ActivationTerm* find_term(const std::vector<ActivationTerm>& terms, std::string_view name) {
  for (const auto& t : terms) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// Profiles are plain tables of rules (profile.hpp); these variants are told apart by the profile's
// stable name (cli-contract.md) rather than by a new field every profile would have to set.
bool is_megatron(const Profile& profile) { return profile.name == "megatron"; }
bool is_paper(const Profile& profile) { return profile.name == "paper"; }

}  // namespace

std::optional<InputError> check_model_variants(const ModelSpec& m, const Profile& profile, const Layout& layout,
                                                const TrainingConfig& t, AttentionKernel attention) {
  if (m.naming == NamingStyle::llama4) return check_llama4(m, profile, layout, t, attention);
  // Phi-3.5-MoE: Megatron-Bridge has no Phi-MoE bridge (src/megatron/bridge/models) and torchtitan
  // no Phi model; its SparseMixer router (modeling_phimoe.py sparsemixer, PhimoeMultiplier, a
  // custom autograd function saving its own gates) is none of Megatron-Core's routers.
  if (m.model_type == "phimoe" && !is_paper(profile)) {
    return InputError("--profile", std::string(profile.name),
                      "paper for model_type phimoe: neither Megatron-Bridge nor torchtitan trains Phi-3.5-MoE, and its "
                      "SparseMixer router's saved tensors are not modelled");
  }
  if (!m.sandwich_norms) return std::nullopt;
  // torchtitan has no Gemma model (torchtitan/models: llama3, qwen3, deepseek_v3, gpt_oss, ...);
  // the hf profile refuses model types whose modelling code it does not follow in its own check,
  // and this one stands behind it (its layers are Llama's, without Gemma's norms or capping).
  if (!is_megatron(profile) && !is_paper(profile)) {
    return InputError("--profile", std::string(profile.name),
                      fmt::format("megatron or paper for model_type {}: the {} profile does not model Gemma's "
                                  "training (torchtitan has no Gemma model; the hf profile's layers are Llama's)",
                                  m.model_type, profile.name));
  }
  // Soft-capped scores are never handed to a fused kernel here: Megatron-Bridge's Gemma-2 core
  // attention (models/gemma/gemma2_provider.py) runs FlexAttention when PyTorch has it, whose
  // saved tensors moemem does not model, or the unfused Gemma2DotProductAttention, which
  // materialises the scores (--attention eager).
  if (m.attn_logit_softcap > 0 && attention == AttentionKernel::flash) {
    return InputError("--attention", "flash",
                      fmt::format("eager for a model with attn_logit_softcapping ({}): tanh soft-capping of the "
                                  "scores runs in Megatron-Bridge's unfused Gemma2DotProductAttention (its "
                                  "FlexAttention path is not modelled)",
                                  m.model_type));
  }
  // Gemma2DotProductAttention.__init__ raises unless context_parallel_size is 1.
  if (m.attn_logit_softcap > 0 && is_megatron(profile) && layout.config.cp > 1) {
    return InputError("--cp", std::to_string(layout.config.cp),
                      "1 for a model with attn_logit_softcapping under the megatron profile: Megatron-Bridge's "
                      "Gemma2DotProductAttention supports no context parallelism");
  }
  return std::nullopt;
}

void layer_terms(const Profile& profile, const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out) {
  profile.layer_activations(c, kind, out);
  llama4_layer_terms(profile, c, kind, out);
  const auto& m = c.model;
  if (m.attn_logit_softcap > 0) {
    // logit_softcapping (Megatron-Bridge gemma2_provider.py; transformers Gemma2's
    // eager_attention_forward): scores / c, tanh, * c. Only tanh saves (its output, for its
    // backward), one more tensor the size of the profile's softmax output, which the same
    // recomputation frees; the divisions and products by a number save nothing.
    if (const ActivationTerm* softmax = find_term(out, "attn.softmax")) {
      ActivationTerm tanh = *softmax;
      tanh.name = "attn.softcap_tanh_output";
      tanh.rule = "b x heads/tp x s/cp x s (tanh output, as the softmax output)";
      out.push_back(tanh);
    }
  }
  if (!m.sandwich_norms) return;
  // (Gemma's embedding scaling by sqrt(h) multiplies by a number and saves nothing.)
  // Gemma's post_attention_layernorm and post_feedforward_layernorm each save their input, the
  // residual-stream-sized output of o_proj and of down_proj: under Megatron-Bridge
  // (TERowParallelLinearLayerNorm, models/common/te_layers.py) a TENorm after the row-parallel
  // linear, on its sequence-parallel output, saving the input and its fp32 1/rms per token
  // (Transformer Engine's RMSNorm, rsigma). Megatron's layernorm recomputation covers only the
  // input and pre-MLP norms (transformer_layer.py), so no selective module frees them. The paper
  // profile counts a norm's input without its statistics, as for its other norms.
  const auto& p = c.layout.config;
  const std::int64_t tokens = c.training.micro_batch * (c.training.seq_len / p.cp) / (p.sp ? p.tp : 1);
  const Count n(checked_mul(static_cast<std::uint64_t>(tokens), static_cast<std::uint64_t>(m.hidden), "activation size"));
  const Module mlp = kind == LayerKind::moe ? Module::router : Module::dense_mlp;
  const DType a = c.training.activation_dtype;
  out.push_back({"attn.post_norm_input (o_proj output)", Module::attention, n, a, false, 0, "b*s/cp/(tp if sp) x h"});
  out.push_back({"mlp.post_norm_input (down_proj output)", mlp, n, a, false, 0, "b*s/cp/(tp if sp) x h"});
  if (is_megatron(profile)) {
    const Count rows(static_cast<std::uint64_t>(tokens));
    out.push_back({"attn.post_norm_rsigma", Module::attention, rows, DType::fp32, false, 0, "b*s/cp/(tp if sp)"});
    out.push_back({"mlp.post_norm_rsigma", mlp, rows, DType::fp32, false, 0, "b*s/cp/(tp if sp)"});
  }
}

void chunk_terms(const Profile& profile, const ActivationContext& c, const Chunk& chunk, std::vector<ActivationTerm>& out) {
  profile.chunk_activations(c, chunk, out);
  if (c.model.final_logit_softcap <= 0 || !chunk.loss) return;
  // Gemma2OutputLayer (Megatron-Bridge gemma2_provider.py): the logits / c, tanh, * c before the
  // loss; tanh keeps its output, b*s/cp x vocab/tp in the activation dtype, beside the loss's own
  // copy. The paper profile counts no head or loss activations (none added there).
  if (const ActivationTerm* logits = find_term(out, "loss.logits")) {
    out.push_back({"head.softcap_tanh_output", Module::output_head, logits->elements, c.training.activation_dtype, false, 0,
                   "b*s/cp x padded_vocab/tp (tanh output)"});
  }
}

}  // namespace moemem::detail
