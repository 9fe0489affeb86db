#include "moemem/cuda_graphs.hpp"

#include <array>
#include <utility>

#include <algorithm>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "moemem/model.hpp"
#include "moemem/training.hpp"

namespace moemem {

std::string_view name_of(CudaGraphImpl i) {
  switch (i) {
    case CudaGraphImpl::none: return "none";
    case CudaGraphImpl::local: return "local";
    case CudaGraphImpl::transformer_engine: return "transformer_engine";
  }
  return "?";
}

CudaGraphImpl parse_cuda_graph_impl(std::string_view text, std::string_view field) {
  if (text == "none") return CudaGraphImpl::none;
  if (text == "local") return CudaGraphImpl::local;
  if (text == "transformer_engine") return CudaGraphImpl::transformer_engine;
  if (text == "full_iteration") {
    // megatron/core/full_cuda_graph.py FullCudaGraphWrapper: one graph for the whole forward and
    // backward of a step, every activation of it in the graph's private pool.
    throw InputError(std::string(field), std::string(text),
                     "none, local or transformer_engine (a whole-iteration graph is not modelled)");
  }
  throw InputError(std::string(field), std::string(text), "none, local or transformer_engine");
}

namespace {

constexpr std::array<std::pair<std::string_view, std::uint8_t>, 4> kScopes = {{
    {"attn", kGraphAttn},
    {"mlp", kGraphMlp},
    {"moe_router", kGraphMoeRouter},
    {"moe_preprocess", kGraphMoePreprocess},
}};

// Megatron's other values, refused by name: what capturing them would need that moemem lacks.
std::string_view refused_scope(std::string_view item) {
  // moe: the whole MoE block, dispatch and experts, in the graph (drop-and-pad only); its
  // dispatch buffers and expert activations would live in the graph pool.
  if (item == "moe") return "the whole MoE block in a graph (its dispatch in the graph pool) is not modelled";
  if (item == "mamba") return "moemem models no Mamba layers";
  if (item == "full_iteration" || item == "full_iteration_inference") {
    return "a whole-iteration graph is not modelled (full_iteration_inference is for inference)";
  }
  return {};
}

}  // namespace

std::uint8_t parse_cuda_graph_scope(std::string_view text, std::string_view field) {
  std::uint8_t mask = 0;
  bool full = false;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find_first_of(", ", start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    if (item == "full") {  // deprecated spelling of the whole layer (Megatron's empty list)
      full = true;
      continue;
    }
    if (const auto why = refused_scope(item); !why.empty()) throw InputError(std::string(field), std::string(item), std::string(why));
    bool found = false;
    for (const auto& [name, bit] : kScopes) {
      if (item == name) {
        mask = static_cast<std::uint8_t>(mask | bit);
        found = true;
      }
    }
    if (!found) throw InputError(std::string(field), std::string(item), "a list of attn, mlp, moe_router, moe_preprocess, or full");
  }
  if (full && mask != 0) throw InputError(std::string(field), std::string(text), "full alone (the whole layer), or a list of parts");
  if (!full && mask == 0) throw InputError(std::string(field), std::string(text), "at least one of attn, mlp, moe_router, moe_preprocess, full");
  // megatron/core/transformer/cuda_graph_config.py: moe_preprocess must be used with moe_router.
  if ((mask & kGraphMoePreprocess) != 0 && (mask & kGraphMoeRouter) == 0) {
    throw InputError(std::string(field), std::string(text), "moe_preprocess together with moe_router");
  }
  return mask;
}

std::string cuda_graph_scope_text(std::uint8_t scope) {
  if (scope == 0) return "full";
  std::string out;
  for (const auto& [name, bit] : kScopes) {
    if ((scope & bit) == 0) continue;
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

std::optional<InputError> check_cuda_graphs(const ModelSpec& m, const TrainingConfig& t) {
  const CudaGraphs g = t.cuda_graphs;
  if (g.impl == CudaGraphImpl::none) return std::nullopt;
  const std::string impl(name_of(g.impl));
  const std::string scope = cuda_graph_scope_text(g.scope);
  // transformer_config.py: "full recompute is only supported with full iteration CUDA graph".
  if (t.recompute == Recompute::full) {
    return InputError("--cuda-graph-impl", impl, "none with --recompute full (Megatron-Core graphs layers only under selective recomputation)");
  }
  const bool dense = std::find(m.layer_kinds.begin(), m.layer_kinds.end(), LayerKind::dense) != m.layer_kinds.end() ||
                     (m.mtp_layers > 0 && !m.is_moe());
  if (g.scope == 0 && m.is_moe()) {
    return InputError("--cuda-graph-scope", scope,
                      fmt::format("parts of the layer for {}, a model with routed experts (e.g. attn,moe_router,moe_preprocess): "
                                  "a whole MoE layer in a graph (drop-and-pad only) is not modelled",
                                  m.name));
  }
  if ((g.scope & kGraphMoeRouter) != 0 && !m.is_moe()) {
    return InputError("--cuda-graph-scope", scope, fmt::format("attn or mlp for {}, a model without routed experts", m.name));
  }
  if ((g.scope & kGraphMlp) != 0 && !dense) {
    return InputError("--cuda-graph-scope", scope, fmt::format("no mlp for {}, a model without dense layers", m.name));
  }
  const bool router = (g.scope & kGraphMoeRouter) != 0;
  if (router && g.impl == CudaGraphImpl::transformer_engine && t.recompute == Recompute::selective &&
      (t.recompute_modules & kRecomputeMoe) != 0) {
    return InputError("--recompute-modules", recompute_modules_text(t.recompute_modules),
                      "no moe with moe_router graphs under transformer_engine (Megatron-Core refuses it)");
  }
  const bool preprocess = (g.scope & kGraphMoePreprocess) != 0 || (router && g.impl == CudaGraphImpl::local);
  if (preprocess && t.allgather) {
    return InputError("--cuda-graph-scope", scope,
                      "no moe_preprocess with the allgather dispatcher (its static outputs, the gathered routing map and "
                      "probabilities, are not modelled); alltoall or deepep with it");
  }
  if (preprocess && !t.deepep && t.moe_capacity_factor) {
    return InputError("--cuda-graph-scope", scope,
                      "no moe_preprocess with the alltoall dispatcher and a capacity factor (Megatron-Core refuses its "
                      "host synchronisation in a graph; with local, moe_router implies moe_preprocess)");
  }
  return std::nullopt;
}

}  // namespace moemem
