#include "moemem/recipes.hpp"

#include <string>

#include "moemem/errors.hpp"
#include "moemem/scenario.hpp"

namespace moemem {

Recipe parse_recipe(std::string_view text, std::string_view field) {
  if (text == "deepseek-v3") return Recipe::deepseek_v3;
  throw InputError(std::string(field), std::string(text), "deepseek-v3");
}

std::string_view name_of(Recipe) { return "deepseek-v3"; }

void apply_recipe(Recipe, TrainingRequest& r) {
  // DeepSeek-V3 technical report (arXiv 2412.19437) §3.2-3.3: FP8 GEMMs with 1x128 / 128x128
  // scaling and FP8-cached activations (SwiGLU inputs included, its output recomputed), BF16
  // AdamW moments, FP32 master weights and gradient accumulation, recomputation of all RMSNorm
  // and MLA up-projections, ZeRO-1 data parallelism; the EMA lives in CPU memory.
  if (!r.fp8) r.fp8 = Fp8Recipe::blockwise;
  if (!r.main_grads_dtype) r.main_grads_dtype = DType::fp32;
  if (!r.main_params_dtype) r.main_params_dtype = DType::fp32;
  if (!r.exp_avg_dtype) r.exp_avg_dtype = DType::bf16;
  if (!r.exp_avg_sq_dtype) r.exp_avg_sq_dtype = DType::bf16;
  if (!r.recompute && !r.recompute_modules) {
    r.recompute = Recompute::selective;
    r.recompute_modules = kRecomputeLayernorm | kRecomputeMlaUpProj | kRecomputeMoeAct;
  }
  if (!r.zero) r.distributed_optimizer = true;
  // DeepSeek-V3 trains without dropout (its config and Megatron's DeepSeek-V3 recipes: 0).
  if (!r.hidden_dropout) r.hidden_dropout = 0.0;
  if (!r.attention_dropout) r.attention_dropout = 0.0;
}

}  // namespace moemem
