// The inventory builder's pieces kept in their own files (src/inventory.cpp builds the rest):
// each adds a decoder block's tensors through `add`, which fills in the placement and layer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "moemem/inventory.hpp"
#include "moemem/units.hpp"

namespace moemem {

// Checked products and sums of tensor dimensions: OverflowError naming `what`, never a wrap.
inline std::int64_t dim_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw_overflow(what);
  return r;
}
inline std::int64_t dim_sum(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw_overflow(what);
  return r;
}

// Adds one tensor of the block: its checkpoint name, role, [rows, cols] and the experts it holds.
using AddBlockTensor = std::function<void(std::string name, Role role, std::int64_t rows, std::int64_t cols, std::int64_t copies)>;

// Nemotron-H's block `layer` under prefix `p` (layers.<i>.): its norm and its one mixer
// (src/inventory_nemotron_h.cpp).
void nemotron_h_block(const ModelSpec& m, const std::string& p, std::int64_t layer, LayerKind kind, const AddBlockTensor& add);

// Qwen3.5-MoE (src/inventory_qwen3_5.cpp): the Gated DeltaNet's four input projections under
// prefix `x` (layers.<i>.linear_attn.), and the multimodal checkpoint's vision tower.
void qwen3_5_gdn_inputs(const ModelSpec& m, const std::string& x, const AddBlockTensor& add);
void qwen3_5_vision_tower(const ModelSpec& m, const AddBlockTensor& add);

// Gemma-3 (src/inventory_gemma3.cpp): the multimodal checkpoint's SigLIP tower and projector.
void gemma3_vision_tower(const ModelSpec& m, const AddBlockTensor& add);

}  // namespace moemem
