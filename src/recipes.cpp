#include "moemem/recipes.hpp"

#include <fmt/format.h>

#include <array>
#include <string>

#include "moemem/errors.hpp"
#include "moemem/scenario.hpp"

namespace moemem {

namespace {

constexpr std::array<std::pair<RecipeTechnique, std::string_view>, kTechniqueCount> kTechniqueNames{{
    {kTechRecomputeRmsnorm, "rmsnorm-recompute"},
    {kTechRecomputeMlaUp, "mla-up-recompute"},
    {kTechSwigluRecompute, "fp8-swiglu-input"},
    {kTechE5m6AttentionOutput, "e5m6-attention-output"},
    {kTechFp8Dispatch, "fp8-dispatch"},
    {kTechNodeLimitedDispatch, "node-limited-dispatch"},
    {kTechBf16Moments, "bf16-moments"},
    {kTechEmaOnCpu, "ema-on-cpu"},
    {kTechOnlineFp8Weights, "online-fp8-weights"},
    {kTechFp8Training, "fp8"},
}};


// DeepSeek-V3 report (arXiv 2412.19437) §3.2.2: "each token will be sent to at most 4 nodes".
constexpr std::int64_t kDeepSeekV3NodeLimit = 4;

bool on(std::uint16_t techniques, RecipeTechnique t) { return (techniques & t) != 0; }

}  // namespace

Recipe parse_recipe(std::string_view text, std::string_view field) {
  if (text == "deepseek-v3") return Recipe::deepseek_v3;
  if (text == "deepseek-v2") return Recipe::deepseek_v2;
  throw InputError(std::string(field), std::string(text), "deepseek-v3 or deepseek-v2");
}

std::string_view name_of(Recipe r) { return r == Recipe::deepseek_v2 ? "deepseek-v2" : "deepseek-v3"; }

std::string_view name_of(RecipeTechnique t) {
  for (const auto& [bit, name] : kTechniqueNames) {
    if (bit == t) return name;
  }
  return "?";
}

std::uint16_t parse_techniques(std::string_view text, std::string_view field) {
  std::uint16_t out = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string_view word = text.substr(start, end - start);
    bool known = false;
    for (const auto& [bit, name] : kTechniqueNames) {
      if (word == name) {
        out = static_cast<std::uint16_t>(out | bit);
        known = true;
      }
    }
    if (!known) {
      throw InputError(std::string(field), std::string(word), "a comma-separated list of: " + techniques_text(0xFFFF));
    }
    start = end + 1;
  }
  return out;
}

std::string techniques_text(std::uint16_t techniques) {
  std::string out;
  for (const auto& [bit, name] : kTechniqueNames) {
    if (on(techniques, bit)) out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

std::uint16_t techniques_of(Recipe r) {
  if (r == Recipe::deepseek_v2) return kTechRecomputeRmsnorm | kTechRecomputeMlaUp;
  return kTechRecomputeRmsnorm | kTechRecomputeMlaUp | kTechSwigluRecompute | kTechE5m6AttentionOutput | kTechFp8Dispatch |
         kTechNodeLimitedDispatch | kTechBf16Moments | kTechEmaOnCpu | kTechOnlineFp8Weights | kTechFp8Training;
}

void apply_recipe(Recipe recipe, TrainingRequest& r) {
  const auto tech = static_cast<std::uint16_t>(techniques_of(recipe) & ~r.recipe_off);
  // DeepSeek-V3 §3.3: FP8 GEMMs with 1x128 / 128x128 scaling; §3.3.1/§3.3.3: FP32 master weights
  // and gradient accumulation, BF16 AdamW moments. DeepSeek-V2 (arXiv 2405.04434) names no
  // precision beyond BF16 training: Megatron-style FP32 master weights, gradients and moments.
  if (!r.fp8 && on(tech, kTechFp8Training)) r.fp8 = Fp8Recipe::blockwise;
  if (!r.main_grads_dtype) r.main_grads_dtype = DType::fp32;
  if (!r.main_params_dtype) r.main_params_dtype = DType::fp32;
  const DType moments = on(tech, kTechBf16Moments) ? DType::bf16 : DType::fp32;
  if (!r.exp_avg_dtype) r.exp_avg_dtype = moments;
  if (!r.exp_avg_sq_dtype) r.exp_avg_sq_dtype = moments;
  // V3 §3.2.3: all RMSNorm operations and MLA up-projections recomputed in back-propagation;
  // §3.3.3: the MoE SwiGLU output recomputed from its FP8-cached input. V2 §3.1.3: "a portion of
  // the operators are recomputed", which ones unstated: taken as V3's RMSNorm and up-projections.
  if (!r.recompute && !r.recompute_modules) {
    std::uint16_t modules = 0;
    if (on(tech, kTechRecomputeRmsnorm)) modules |= kRecomputeLayernorm;
    if (on(tech, kTechRecomputeMlaUp)) modules |= kRecomputeMlaUpProj;
    if (on(tech, kTechSwigluRecompute)) modules |= kRecomputeMoeAct;
    if (modules != 0) {
      r.recompute = Recompute::selective;
      r.recompute_modules = modules;
    }
  }
  // V3 §3.2: ZeRO-1 data parallelism (as V2 §3.1.3: "ZeRO-1 data parallelism").
  if (!r.zero) r.distributed_optimizer = true;
  // Both models train without dropout (their config.json: attention_dropout 0.0).
  if (!r.hidden_dropout) r.hidden_dropout = 0.0;
  if (!r.attention_dropout) r.attention_dropout = 0.0;
}

void apply_recipe_numerics(Recipe recipe, std::uint16_t off, TrainingConfig& t) {
  const auto tech = static_cast<std::uint16_t>(techniques_of(recipe) & ~off);
  const bool fp8 = t.fp8 != Fp8Recipe::none;
  t.recipe = recipe;
  t.recipe_techniques = tech;
  // V3 §3.3.3: the SwiGLU inputs of the MoE cached in FP8 (with FP8 training).
  t.fp8_swiglu_input = fp8 && on(tech, kTechSwigluRecompute);
  // V3 §3.3.2: scales computed online for each 1x128 activation tile and 128x128 weight block, so
  // no FP8 weight copy stays resident (Transformer Engine's recipes keep one).
  t.fp8_online_weights = t.fp8 == Fp8Recipe::blockwise && on(tech, kTechOnlineFp8Weights);
  // V3 §3.3.3: the activation before the MoE up-projections quantized to FP8, then dispatched.
  t.fp8_dispatch = fp8 && on(tech, kTechFp8Dispatch);
  // V3 §3.2.3: recomputing the MLA up-projections keeps none of q, k, v (DeepSeek's own attention
  // keeps no copy of its own).
  t.mla_up_frees_v = on(tech, kTechRecomputeMlaUp);
  t.attn_out_e5m6 = on(tech, kTechE5m6AttentionOutput);
  t.dispatch_node_limit = on(tech, kTechNodeLimitedDispatch) ? kDeepSeekV3NodeLimit : 0;
  t.ema_on_host = on(tech, kTechEmaOnCpu);
  // Left out (--recipe-off ema-on-cpu), the EMA the recipe keeps stays on the GPU: what the
  // technique saves shows as device memory.
  t.ema_on_device = on(techniques_of(recipe), kTechEmaOnCpu) && !t.ema_on_host;
}

std::vector<std::string> recipe_assumptions(Recipe recipe, const TrainingConfig& t) {
  std::vector<std::string> out;
  const std::uint16_t tech = t.recipe_techniques;
  const auto add = [&](RecipeTechnique bit, const std::string& text) {
    if (on(tech, bit)) out.push_back(fmt::format("recipe {} [{}]: {}", name_of(recipe), name_of(bit), text));
  };
  if (recipe == Recipe::deepseek_v2) {
    out.push_back("recipe deepseek-v2 (arXiv 2405.04434 §3.1.3): HAI-LLM with 16-way zero-bubble pipeline, 8-way expert and "
                  "ZeRO-1 data parallelism, no tensor parallelism, 4K sequences; BF16 training with FP32 master weights, "
                  "gradients and moments (the report names no other precision)");
    add(kTechRecomputeRmsnorm, "a portion of the operators is recomputed (§3.1.3, which ones unstated): taken as the RMSNorms");
    add(kTechRecomputeMlaUp, "and the MLA up-projections (as DeepSeek-V3 §3.2.3 names them), keeping none of q, k, v");
    return out;
  }
  add(kTechRecomputeRmsnorm, "all RMSNorm operations recomputed in back-propagation, their outputs not kept (§3.2.3)");
  add(kTechRecomputeMlaUp, "MLA up-projections recomputed in back-propagation, keeping none of q, k, v (§3.2.3)");
  add(kTechFp8Training, "FP8 GEMMs with 1x128 activation tiles and 128x128 weight blocks; linear inputs cached in FP8 (§3.3.2)");
  add(kTechOnlineFp8Weights, "scales computed online, so no FP8 weight copy stays resident (§3.3.2)");
  add(kTechSwigluRecompute, "the SwiGLU inputs of the MoE (routed and shared experts) cached in FP8, the SwiGLU output "
                            "recomputed in backward (§3.3.3)");
  add(kTechE5m6AttentionOutput, "the input of the Linear after attention cached once in E5M6 with power-of-two 1x128 "
                                "scales, shared with attention's backward; a 16-bit container assumed (§3.3.3)");
  add(kTechFp8Dispatch, "tokens quantized to FP8 before the MoE dispatch, the combine in BF16 (§3.3.3)");
  add(kTechNodeLimitedDispatch, "node-limited routing: each token sent to at most 4 nodes, once per node over "
                                "InfiniBand and forwarded over NVLink, so the dispatch holds one copy per destination "
                                "node, not per expert (§3.2.2)");
  add(kTechBf16Moments, "AdamW moments in BF16; master weights and gradient accumulation in FP32 (§3.3.3, §3.3.1)");
  add(kTechEmaOnCpu, "the EMA of the parameters in CPU memory, updated asynchronously (§3.2.3): the host column, an fp32 "
                     "copy of every parameter on the rank (whether it is sharded is unstated; unsharded errs high)");
  return out;
}

}  // namespace moemem
