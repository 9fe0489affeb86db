// What a model is, independent of how it is trained: the architecture hyper-parameters that
// decide its tensors. Plain data, filled from a Hugging Face config.json (config.hpp) and
// checked by validate_model(); the tensor inventory (inventory.hpp) is derived from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moemem {

enum class AttentionKind : std::uint8_t {
  gqa,  // multi-head / grouped-query attention: q, k, v, o projections
  mla,  // DeepSeek multi-head latent attention
};

enum class LayerKind : std::uint8_t { dense, moe };

// What mixes tokens in a decoder layer: softmax attention (the model's AttentionKind), Gated
// DeltaNet linear attention (Qwen3-Next's linear_attention layers), a Mamba-2 SSM (Nemotron-H's
// M blocks), or none (Nemotron-H's MLP and MoE blocks: the block is its layer_kinds MLP alone).
// sliding_attention: a layer class only (never a config's mixer), for attention layers sized apart
// from the model's main ones (MiMo-V2-Flash's swa_* layers, ModelSpec::swa_layers).
enum class MixerKind : std::uint8_t { attention, gated_delta_net, mamba2, none, sliding_attention };

// What the training-memory evaluator groups decoder layers by: every layer of a class has the same
// tensors and saves the same activations. A class is a layer's FFN kind (dense or MoE) with its
// mixer (MixerKind); index layer_class(kind, mixer) = kind + 2 x mixer. A Nemotron-NAS model, whose
// layers differ in key/value heads and FFN width (and none is MoE, hybrid or sliding-window), uses
// the indices for its distinct block shapes instead (ModelSpec::nas_shapes): ModelSpec's
// class_kind and class_mixer decode a class of either model.
inline constexpr std::size_t kLayerClasses = 10;
inline constexpr std::size_t kNasShapes = kLayerClasses;  // distinct Nemotron-NAS block shapes analysed
[[nodiscard]] constexpr std::size_t layer_class(LayerKind kind, MixerKind mixer) {
  return static_cast<std::size_t>(kind) + 2 * static_cast<std::size_t>(mixer);
}

// Gated DeltaNet (Qwen3-Next linear_attn): key heads of k_head_dim (queries have as many), value
// heads of v_head_dim, and the causal conv1d's kernel width.
struct GdnDims {
  std::int64_t num_k_heads = 0, num_v_heads = 0, k_head_dim = 0, v_head_dim = 0, conv_kernel = 0;
  [[nodiscard]] std::int64_t key_dim() const { return num_k_heads * k_head_dim; }
  [[nodiscard]] std::int64_t value_dim() const { return num_v_heads * v_head_dim; }
};

// Mamba-2 (transformers NemotronHMamba2Mixer): num_heads SSM heads of head_dim channels (the
// inner width), n_groups groups of B and C of state_size each, a depthwise causal conv1d of
// conv_kernel over x, B and C, with a bias when conv_bias.
struct Mamba2Dims {
  std::int64_t num_heads = 0, head_dim = 0, n_groups = 0, state_size = 0, conv_kernel = 0;
  bool conv_bias = true;
  std::int64_t chunk_size = 128;  // the chunked scan's chunk (chunk_size); changes no tensor
};

struct MlaDims {
  std::int64_t q_lora_rank = 0;  // 0: no query compression (a plain q_proj), as q_lora_rank null
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
};

// DeepSeek sparse attention's lightning indexer (DeepSeek-V3.2-Exp inference/model.py Indexer;
// transformers DeepseekV32Indexer), one per MLA layer: index_n_heads query heads of
// index_head_dim from the compressed query, one shared key from the hidden state. 0 heads: none.
struct DsaDims {
  std::int64_t index_n_heads = 0;
  std::int64_t index_head_dim = 0;
  std::int64_t index_topk = 0;  // keys each query attends to; changes no tensor
};

struct MoeDims {
  std::int64_t num_routed_experts = 0;
  std::int64_t num_shared_experts = 0;  // DeepSeek style: one fused MLP of n_shared * expert_ffn
  std::int64_t top_k = 0;
  std::int64_t expert_ffn = 0;          // per-expert intermediate size
  std::int64_t shared_ffn = 0;          // intermediate size of the (fused) shared-expert MLP, 0: none
  bool shared_expert_gate = false;      // Qwen2-MoE: a 1 x h sigmoid gate on the shared expert
  bool router_bias = false;             // DeepSeek-V3's e_score_correction_bias (N values); gpt-oss's router bias
  bool expert_bias = false;             // gpt-oss: biases on every expert's gate/up and down projections
  // Group-limited routing (DeepSeek-V2 group_limited_greedy, V3 noaux_tc): a token's experts come
  // from topk_group of n_group contiguous expert groups. 0: not limited. Changes no tensor.
  std::int64_t n_group = 0, topk_group = 0;
};

// How checkpoint tensor names are spelled (they differ between model families).
enum class NamingStyle : std::uint8_t {
  deepseek, llama, mixtral, qwen_moe, gpt_oss, ernie,
  granite,  // block_sparse_moe.{router.layer, input_linear, output_linear}, shared_mlp (config_moe_families2.cpp)
  dbrx,     // wte, blocks.<i>.{norm_attn_norm.{norm_1, attn.Wqkv, attn.out_proj, norm_2}, ffn}, norm_f
  hunyuan,  // self_attn.{query,key}_layernorm, mlp.gate.wg, mlp.shared_mlp (config_moe_families2.cpp)
  llama4,   // feed_forward.{router, experts.gate_up_proj, experts.down_proj, shared_expert} (config_llama4.cpp)
  nemotron_h,  // embeddings, layers.<i>.{norm, mixer.*}: one norm and one mixer per block, norm_f (config_nemotron_h.cpp)
  mimo_v2,  // self_attn.attention_sink_bias; MTP as mtp.layers.<k>.{enorm, ..., final_layernorm} (config_mimo_v2.cpp)
  qwen3_5,  // linear_attn.in_proj_{qkv,z,b,a}, mlp.experts.{gate_up,down}_proj (MoE) or mlp.*_proj, mtp.{fc, layers.0}, visual.*
};

// MiMo-V2-Flash's sliding-window attention layers (swa_* keys), sized apart from its
// full-attention layers: query heads, key/value heads, query/key and value head widths, and
// whether each head has a learned sink logit (attention_sink_bias).
struct SwaDims {
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0, v_head_dim = 0;
  bool sinks = false;
};

// Nemotron-NAS (DeciLM) block parts: the usual sublayer, a single h x h linear in its place
// (replace_with_linear), or nothing (no_op: neither the sublayer nor its norm).
enum class NasPart : std::uint8_t { full, linear, none };
// One Nemotron-NAS decoder layer (block_configs[i], config_nemotron_nas.cpp): its attention and
// FFN parts, the attention's key/value heads and the FFN's intermediate size when full.
struct NasBlock {
  NasPart attention = NasPart::full, ffn = NasPart::full;
  std::int64_t kv_heads = 0, ffn_size = 0;
  bool operator==(const NasBlock&) const = default;
};

// Llama-4's vision tower and projector (transformers Llama4VisionModel, Llama4MultiModalProjector;
// src/config_llama4.cpp reads them from a llama4 config's vision_config), or Qwen3.5's (dense and MoE).
struct VisionTower {
  bool present = false;  // a llama4, qwen3_5 or qwen3_5_moe (multimodal) config; their text-only types have none
  std::int64_t hidden = 0;
  std::int64_t intermediate = 0;
  std::int64_t layers = 0;
  std::int64_t heads = 0;
  std::int64_t channels = 0;
  std::int64_t image_size = 0;
  std::int64_t patch_size = 0;
  std::int64_t projector_input = 0;   // vision_adapter.mlp.fc1's outputs
  std::int64_t projector_output = 0;  // vision_adapter.mlp.fc2's inputs and outputs
  std::int64_t output_dim = 0;        // multi_modal_projector.linear_1's inputs (Qwen3.5: the merger's outputs)
  // Qwen3.5's tower (NamingStyle::qwen3_5; Qwen3-VL's, config_qwen3_5.cpp): patches of
  // temporal_patch x patch_size^2, a learned position table of `positions` rows, and a merger of
  // merge_size^2 patches; 0 for Llama-4's.
  std::int64_t temporal_patch = 0;
  std::int64_t merge_size = 0;
  std::int64_t positions = 0;
};

struct ModelSpec {
  std::string name;        // preset name or the path it was read from
  std::string model_type;  // Hugging Face model_type
  std::int64_t hidden = 0;
  std::int64_t vocab = 0;
  std::int64_t num_layers = 0;  // decoder layers, MTP excluded
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;    // GQA only
  std::int64_t dense_ffn = 0;   // intermediate size of dense MLP layers
  AttentionKind attention = AttentionKind::gqa;
  MlaDims mla;
  DsaDims dsa;  // DeepSeek-V3.2: the sparse-attention indexer of each MLA layer
  MoeDims moe;
  std::vector<LayerKind> layer_kinds;  // one per decoder layer
  // One per decoder layer for hybrid models (Qwen3-Next); empty: every layer is attention.
  std::vector<MixerKind> layer_mixers;
  GdnDims gdn;
  Mamba2Dims mamba;  // Nemotron-H's Mamba-2 blocks (MixerKind::mamba2)
  // Qwen3-Next (attn_output_gate): q_proj also yields a per-head gate, sigmoid-multiplied into
  // the attention output before o_proj.
  bool attn_output_gate = false;
  NamingStyle naming = NamingStyle::deepseek;
  bool qkv_bias = false;  // biases on the q, k, v projections (Qwen2; attention_bias in Llama, Qwen3)
  bool o_bias = false;    // bias on the output projection (attention_bias in Llama, Qwen3)
  bool mlp_bias = false;  // biases on the dense MLP projections (Llama's mlp_bias)
  bool qk_norm = false;   // per-head RMSNorm on queries and keys (Qwen3)
  bool attention_sinks = false;  // gpt-oss: one learned sink logit per attention head
  bool gated_mlp = true;  // SwiGLU (gate, up, down); false: GPT's fc1 -> GeLU -> fc2
  bool norm_bias = false;  // LayerNorm (weight and bias) rather than RMSNorm (weight only)
  std::int64_t learned_positions = 0;  // rows of a learned absolute position table, 0: none (RoPE)
  std::int64_t mtp_layers = 0;         // DeepSeek-V3 multi-token prediction depth
  bool tie_embeddings = false;
  // DeepSeek-V3's checkpoint stores each MTP layer's copy of the embedding and output head
  // (layers.<L>.embed_tokens, shared_head.head); GLM-5's does not (its MTP layer shares them).
  // Training holds them either way; this only decides what `count` reports.
  bool mtp_stores_embedding_and_head = true;
  // OLMoE (transformers OlmoeAttention): the q/k RMSNorms span the whole projection, one weight
  // per query channel (heads x head_dim) and per key channel (kv heads x head_dim), not per head.
  bool qk_norm_full_width = false;
  // ERNIE-4.5's MTP layers (mtp_block.<k>): a dense decoder layer, whatever the main layers are.
  bool mtp_dense = false;
  // Gemma-2/3 (transformers Gemma2DecoderLayer, Gemma3DecoderLayer): two RMSNorms more per layer,
  // post_attention_layernorm on the attention's output and post_feedforward_layernorm on the
  // MLP's, beside input_layernorm and pre_feedforward_layernorm (the usual pre-norms).
  bool sandwich_norms = false;
  // Gemma-2: tanh soft-capping of the attention scores and of the final logits (0: none). They add
  // no tensor but change what training saves (src/analyze/model_variants.cpp).
  double attn_logit_softcap = 0;
  double final_logit_softcap = 0;
  // Phi-3.5-MoE's lm_head_bias: a bias of vocab entries on the output head.
  bool head_bias = false;
  // Llama-4 (config_llama4.cpp): a weightless L2 norm of q and k on the RoPE layers
  // (Llama4TextL2Norm), attention in chunks of this many tokens on the RoPE layers (0: none), the
  // router's score multiplying the expert's input rather than its output, and the NoPE layers'
  // count (no_rope_layers). None adds a tensor; src/analyze/model_variants.cpp says what they save.
  bool qk_l2_norm = false;
  std::int64_t attention_chunk_size = 0;
  bool moe_probs_on_input = false;
  std::int64_t nope_layers = 0;
  // Llama-4's multimodal config: the vision tower and projector, counted; analysis refused.
  VisionTower vision;
  // MiMo-V2-Flash (config_mimo_v2.cpp): the value heads' width where it differs from head_dim
  // (0: head_dim), and one flag per decoder layer, set where the layer is sliding-window attention
  // sized by `swa` (empty: every layer has the main sizes). Its MTP layers are sliding-window too.
  std::int64_t v_head_dim = 0;
  std::vector<bool> swa_layers;
  SwaDims swa;
  // Nemotron-NAS: one block per decoder layer (empty: every layer has the model-wide sizes); the
  // distinct shapes among them and each layer's shape (config_nemotron_nas.cpp; empty when there
  // are more than kNasShapes, which analysis refuses).
  std::vector<NasBlock> nas_blocks;
  std::vector<NasBlock> nas_shapes;
  std::vector<std::uint8_t> nas_shape_of;
  // Set on the copy of a Nemotron-NAS model that sizes one block shape's activation terms
  // (CompiledModel::nas_models): that shape's attention and FFN parts.
  std::optional<NasBlock> nas_block;
  // Config keys that were present but are not understood; reported, never silently dropped.
  std::vector<std::string> unrecognised_keys;

  [[nodiscard]] bool is_moe() const { return moe.num_routed_experts > 0; }
  [[nodiscard]] bool has_indexer() const { return dsa.index_n_heads > 0; }
  [[nodiscard]] MixerKind mixer_at(std::int64_t layer) const {
    return layer_mixers.empty() ? MixerKind::attention : layer_mixers[static_cast<std::size_t>(layer)];
  }
  [[nodiscard]] bool is_hybrid() const;  // some layer's mixer is not attention
  [[nodiscard]] bool has_vision() const { return vision.present; }
  [[nodiscard]] bool has_swa_dims() const { return !swa_layers.empty(); }
  [[nodiscard]] const NasBlock* nas_at(std::int64_t layer) const {
    return nas_blocks.empty() || layer >= num_layers ? nullptr : &nas_blocks[static_cast<std::size_t>(layer)];
  }
  // Whether layer `layer` (MTP depths numbered on from num_layers) takes the `swa` sizes.
  [[nodiscard]] bool swa_at(std::int64_t layer) const {
    if (swa_layers.empty()) return false;
    return layer >= num_layers || swa_layers[static_cast<std::size_t>(layer)];
  }
  [[nodiscard]] std::int64_t num_moe_layers() const;
  // The kind of an MTP layer: like the last main layer (DeepSeek-V3, GLM-4.5), or dense (ERNIE).
  [[nodiscard]] LayerKind mtp_kind() const { return is_moe() && !mtp_dense ? LayerKind::moe : LayerKind::dense; }
  // A decoder layer's class (layer_class), and an MTP layer's (softmax attention, as Qwen3-Next's
  // and Qwen3.5's MTP layers; sliding-window as MiMo-V2-Flash's).
  [[nodiscard]] std::size_t class_at(std::int64_t layer) const {
    if (!nas_shape_of.empty()) return nas_shape_of[static_cast<std::size_t>(layer)];
    return layer_class(layer_kinds[static_cast<std::size_t>(layer)], swa_at(layer) ? MixerKind::sliding_attention : mixer_at(layer));
  }
  [[nodiscard]] bool nas_classes() const { return !nas_shape_of.empty(); }
  [[nodiscard]] LayerKind class_kind(std::size_t cls) const {
    return nas_classes() ? LayerKind::dense : static_cast<LayerKind>(cls % 2);
  }
  [[nodiscard]] MixerKind class_mixer(std::size_t cls) const {
    if (nas_classes()) return nas_shapes[cls].attention == NasPart::none ? MixerKind::none : MixerKind::attention;
    return static_cast<MixerKind>(cls / 2);
  }
  [[nodiscard]] std::size_t mtp_class() const {
    return layer_class(mtp_kind(), swa_at(num_layers) ? MixerKind::sliding_attention : MixerKind::attention);
  }
};

// Checks internal consistency (positive sizes, layer kinds sized to the layer count, top-k not
// above the expert count, ...). Throws InputError naming the field.
void validate_model(const ModelSpec& m);

}  // namespace moemem
