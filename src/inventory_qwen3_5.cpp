// Qwen3.5-MoE's tensors that differ from Qwen3-Next's (src/inventory.cpp builds the rest): the
// Gated DeltaNet's split input projections and Qwen3-VL's vision tower. Sources: transformers
// models/qwen3_5/modular_qwen3_5.py (Qwen3_5GatedDeltaNet, Qwen3_5VisionModel) and
// models/qwen3_vl/modeling_qwen3_vl.py (Qwen3VLVisionPatchEmbed, Qwen3VLVisionBlock,
// Qwen3VLVisionAttention, Qwen3VLVisionMLP, Qwen3VLVisionPatchMerger).
#include <string>

#include <fmt/format.h>

#include "inventory_internal.hpp"
#include "moemem/units.hpp"

namespace moemem {

// Qwen3_5GatedDeltaNet.__init__ replaces Qwen3-Next's in_proj_qkvz and in_proj_ba with
// in_proj_qkv [2 key_dim + value_dim, h], in_proj_z [value_dim, h], in_proj_b and in_proj_a
// [v_heads, h], all bias-free: the same parameters, in four tensors.
void qwen3_5_gdn_inputs(const ModelSpec& m, const std::string& x, const AddBlockTensor& add) {
  const auto& g = m.gdn;
  const std::int64_t key = dim_mul(g.num_k_heads, g.k_head_dim, "linear key heads x head dim");
  const std::int64_t value = dim_mul(g.num_v_heads, g.v_head_dim, "linear value heads x head dim");
  add(x + "in_proj_qkv.weight", Role::gdn_in_qkvz, dim_sum(dim_mul(2, key, "2 x key dim"), value, "in_proj_qkv rows"), m.hidden, 1);
  add(x + "in_proj_z.weight", Role::gdn_in_qkvz, value, m.hidden, 1);
  add(x + "in_proj_b.weight", Role::gdn_in_ba, g.num_v_heads, m.hidden, 1);
  add(x + "in_proj_a.weight", Role::gdn_in_ba, g.num_v_heads, m.hidden, 1);
}

// Qwen3_5VisionModel (checkpoint model.visual.*): patch_embed.proj, a Conv3d [hidden, channels,
// temporal_patch, patch, patch] with a bias; pos_embed, an nn.Embedding [positions, hidden]; per
// block norm1 and norm2 (LayerNorm, weight and bias), attn.qkv [3 hidden, hidden] and attn.proj
// [hidden, hidden] with biases, mlp.linear_fc1 [intermediate, hidden] and linear_fc2 [hidden,
// intermediate] with biases; the merger (use_postshuffle_norm false): norm, a LayerNorm over
// hidden, then linear_fc1 [M, M] and linear_fc2 [out_hidden_size, M] with biases, M = hidden x
// merge_size^2. The rotary embedding holds no parameter; there are no deepstack mergers.
void qwen3_5_vision_tower(const ModelSpec& m, const AddBlockTensor& add) {
  const auto& v = m.vision;
  const auto w = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
    add("visual." + name, Role::vision_tower, rows, cols, 1);
  };
  const auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in) {
    w(name + ".weight", out, in);
    w(name + ".bias", out, 1);
  };
  const std::int64_t patch = dim_mul(v.channels, dim_mul(v.temporal_patch, dim_mul(v.patch_size, v.patch_size, "patch_size^2"), "patch volume"),
                                 "channels x patch volume");
  linear("patch_embed.proj", v.hidden, patch);
  w("pos_embed.weight", v.positions, v.hidden);
  for (std::int64_t i = 0; i < v.layers; ++i) {
    const std::string b = fmt::format("blocks.{}.", i);
    linear(b + "norm1", v.hidden, 1);
    linear(b + "norm2", v.hidden, 1);
    linear(b + "attn.qkv", dim_mul(3, v.hidden, "3 x vision hidden"), v.hidden);
    linear(b + "attn.proj", v.hidden, v.hidden);
    linear(b + "mlp.linear_fc1", v.intermediate, v.hidden);
    linear(b + "mlp.linear_fc2", v.hidden, v.intermediate);
  }
  const std::int64_t merged = dim_mul(v.hidden, dim_mul(v.merge_size, v.merge_size, "merge_size^2"), "merged patch width");
  linear("merger.norm", v.hidden, 1);
  linear("merger.linear_fc1", merged, merged);
  linear("merger.linear_fc2", v.output_dim, merged);
}

}  // namespace moemem
