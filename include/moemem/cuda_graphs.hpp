// Megatron-Core's per-layer CUDA graphs (--cuda-graph-impl local|transformer_engine with
// --cuda-graph-scope/--cuda-graph-modules): which implementation captures them and which parts of
// each transformer layer they cover. What they add to a stage is src/analyze/cuda_graphs.cpp.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <optional>
#include <string_view>

#include "moemem/errors.hpp"

namespace moemem {

struct ModelSpec;
struct TrainingConfig;

// none: eager. local: Megatron-Core's CudaGraphManager (megatron/core/transformer/cuda_graphs.py).
// transformer_engine: Transformer Engine's make_graphed_callables driven by Megatron's
// TECudaGraphHelper (the same file). Megatron's full_iteration is refused by name.
enum class CudaGraphImpl : std::uint8_t { none, local, transformer_engine };
[[nodiscard]] std::string_view name_of(CudaGraphImpl i);
// Throws InputError naming `field`; full_iteration is refused as not modelled.
[[nodiscard]] CudaGraphImpl parse_cuda_graph_impl(std::string_view text, std::string_view field);

// The parts of a layer captured (megatron/core/transformer/enums.py CudaGraphModule); no bit
// set: the whole layer (Megatron's empty list, or its deprecated "full").
enum CudaGraphScope : std::uint8_t {
  kGraphAttn = 1 << 0,           // TransformerLayer._forward_attention
  kGraphMlp = 1 << 1,            // _forward_mlp of a dense layer
  kGraphMoeRouter = 1 << 2,      // _forward_mlp up to MoELayer.router (with unoverlapped shared experts)
  kGraphMoePreprocess = 1 << 3,  // MoELayer.preprocess (needs moe_router)
};
// Parses "attn,moe_router,..." (commas or spaces); "full" is the whole layer. moe, mamba and the
// full_iteration values are refused by name. Throws InputError naming `field`.
[[nodiscard]] std::uint8_t parse_cuda_graph_scope(std::string_view text, std::string_view field);
[[nodiscard]] std::string cuda_graph_scope_text(std::uint8_t scope);

struct CudaGraphs {
  CudaGraphImpl impl = CudaGraphImpl::none;
  std::uint8_t scope = 0;  // CudaGraphScope bits; 0: the whole layer
  auto operator<=>(const CudaGraphs&) const = default;
};

// The first of Megatron-Core's rules for per-layer graphs that `t` breaks on `m`
// (transformer_config.py __post_init__), and the scopes moemem does not model; nothing if none.
[[nodiscard]] std::optional<InputError> check_cuda_graphs(const ModelSpec& m, const TrainingConfig& t);

}  // namespace moemem
