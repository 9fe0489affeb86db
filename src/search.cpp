// search(): the space's checks, the recomputation family, and the three steps in order
// (enumerate in src/search_enumerate.cpp, evaluate and rank in src/search_evaluate.cpp; the cost
// model in src/search_cost.cpp).
#include "moemem/search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "moemem/errors.hpp"

namespace moemem {

std::vector<RecomputeChoice> default_recompute_family(const ModelSpec& m) {
  std::vector<RecomputeChoice> out = {{"none", Recompute::none, 0},
                                      {"core_attn", Recompute::selective, kRecomputeCoreAttn}};
  if (m.attention == AttentionKind::mla) {
    out.push_back({"layernorm,mla_up_proj", Recompute::selective, kRecomputeLayernorm | kRecomputeMlaUpProj});
    if (m.is_moe()) {
      out.push_back({"layernorm,mla_up_proj,moe_act", Recompute::selective,
                     kRecomputeLayernorm | kRecomputeMlaUpProj | kRecomputeMoeAct});
    }
  } else if (m.is_moe()) {
    // NVIDIA's Qwen3 MoE recipe (Megatron-MoE-ModelZoo best_practice/qwen3: --recompute-modules
    // moe_act layernorm); the dense layers' MLP with them when there are any.
    const bool dense_layers = m.num_moe_layers() < m.num_layers;
    const std::uint16_t modules = kRecomputeLayernorm | kRecomputeMoeAct;
    if (dense_layers) out.push_back({"layernorm,mlp,moe_act", Recompute::selective, static_cast<std::uint16_t>(modules | kRecomputeMlp)});
    else out.push_back({"layernorm,moe_act", Recompute::selective, modules});
  } else {
    out.push_back({"layernorm,mlp", Recompute::selective, kRecomputeLayernorm | kRecomputeMlp});
  }
  if (m.is_moe()) out.push_back({"moe", Recompute::selective, kRecomputeMoe});
  out.push_back({"full", Recompute::full, 0});
  return out;
}

std::vector<RecomputeChoice> parse_recompute_choices(const std::string& text, const ModelSpec& m) {
  std::vector<RecomputeChoice> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    if (item == "none") out.push_back({"none", Recompute::none, 0});
    else if (item == "full") out.push_back({"full", Recompute::full, 0});
    else if (item == "selective") {
      for (const auto& c : default_recompute_family(m)) {
        if (c.mode == Recompute::selective) out.push_back(c);
      }
    } else {
      std::string modules = item;
      std::replace(modules.begin(), modules.end(), '+', ',');
      out.push_back({modules, Recompute::selective, parse_recompute_modules(modules, "--recompute")});
    }
  }
  if (out.empty()) throw InputError("--recompute", text, "a list of none, full, selective or module sets such as layernorm+mla_up_proj");
  return out;
}

void check_search_space(const SearchSpace& space, int threads) {
  if (space.gpus < 1 || space.gpus > kMaxWorld) {
    throw InputError("--gpus", std::to_string(space.gpus), fmt::format("an integer from 1 to {}", kMaxWorld));
  }
  if (!(space.max_memory_fraction > 0 && space.max_memory_fraction <= 1)) {
    throw InputError("--max-memory-fraction", fmt::format("{}", space.max_memory_fraction), "a fraction in (0, 1]");
  }
  if (!space.base.global_batch) throw InputError("--global-batch", "missing", "the sequences per optimizer step");
  for (const auto& [v, flag] : {std::pair{space.tp_max, "--tp-max"}, std::pair{space.pp_max, "--pp-max"},
                               std::pair{space.ep_max, "--ep-max"}, std::pair{space.cp_max, "--cp-max"},
                               std::pair{space.vpp_max, "--vpp-max"}, std::pair{space.micro_batch_max, "--micro-batch-max"}}) {
    if (v < 0 || v > kMaxDegree) throw InputError(flag, std::to_string(v), fmt::format("an integer from 0 (no bound) to {}", kMaxDegree));
  }
  // Fixed degrees that no layout of --gpus can have are an inconsistent request, not a search
  // that finds nothing to fit.
  std::int64_t product = 1;
  std::vector<std::string> flags, values;
  for (const auto& [flag, v] : {std::pair{"--tp", space.tp}, std::pair{"--pp", space.pp}, std::pair{"--cp", space.cp}}) {
    if (!v) continue;
    if (*v < 1) throw InputError(flag, std::to_string(*v), "a positive degree");
    flags.emplace_back(flag);
    values.push_back(std::to_string(*v));
    if (__builtin_mul_overflow(product, *v, &product) || space.gpus % product != 0) {
      throw InputError(fmt::format("{}", fmt::join(flags, "/")), fmt::format("{}", fmt::join(values, " x ")),
                       fmt::format("degrees whose product divides --gpus {} (tp x pp x cp x dp is the GPU count)", space.gpus));
    }
  }
  for (const auto& [flag, v] : {std::pair{"--ep", space.ep}, std::pair{"--etp", space.etp}}) {
    if (v && (*v < 1 || space.gpus % *v != 0)) {
      throw InputError(flag, std::to_string(*v), fmt::format("a divisor of --gpus {}", space.gpus));
    }
  }
  if (threads < 1 || threads > 256) throw InputError("--threads", std::to_string(threads), "an integer from 1 to 256");
  if (space.gpus_per_node < 1 || space.gpus_per_node > 1024) {
    throw InputError("--gpus-per-node", std::to_string(space.gpus_per_node), "an integer from 1 to 1024");
  }
}

namespace {

// Step 1 without the candidates: the usable memory, the recomputation choices and the layouts.
SearchPlan plan_layouts(const ModelSpec& m, const SearchSpace& space) {
  SearchPlan plan;
  plan.usable = Bytes(static_cast<std::uint64_t>(std::floor(static_cast<double>(space.capacity.value()) * space.max_memory_fraction)));
  plan.recomputes = space.recomputes.empty() ? default_recompute_family(m) : space.recomputes;
  plan.layouts = enumerate_layouts(m, space);
  return plan;
}

}  // namespace

SearchPlan plan_search(const ModelSpec& m, const SearchSpace& space) {
  check_search_space(space, 1);
  SearchPlan plan = plan_layouts(m, space);
  plan.candidates = enumerate_candidates(plan.layouts.layouts, space, plan.recomputes);
  return plan;
}

SearchResult search(const CompiledModel& cm, const SearchSpace& space, int threads, std::atomic<std::int64_t>* progress,
                    std::int64_t keep_infeasible, std::int64_t keep_feasible) {
  check_search_space(space, threads);
  if (keep_feasible < 0 || keep_infeasible < 0) {
    throw InputError("search keep", fmt::format("{} and {}", keep_feasible, keep_infeasible), "counts >= 0");
  }
  // The layouts only: candidates are generated per layout while evaluating (memory stays bounded).
  const SearchPlan plan = plan_layouts(*cm.model, space);
  SearchResult result;
  result.usable = plan.usable;
  result.rejected_layouts = plan.layouts.rejected;
  result.rejected_by_field = plan.layouts.rejected_by_field;
  const auto start = std::chrono::steady_clock::now();
  stream_candidates(cm, plan, space, threads, keep_feasible, keep_infeasible, progress, result);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace moemem
