// The tensor inventory: every parameter tensor of the model, with its Hugging Face-style name,
// shape, role and placement. It is the one source of truth: every total, shard, gradient and
// optimizer figure in moemem is a fold over it. Fused checkpoint matrices whose parts are
// sharded differently (q_b_proj = [W_UQ; W_QR], kv_a_proj_with_mqa = [W_DKV; W_KR],
// kv_b_proj = [W_UK; W_UV]) appear as one entry per part, sharing the checkpoint name.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moemem/model.hpp"
#include "moemem/units.hpp"

namespace moemem {

// What a tensor is for. MLA roles carry the reference analysis's matrix names.
enum class Role : std::uint8_t {
  embedding, output_head, final_norm,
  position_embedding,               // learned absolute positions (GPT)
  norm_bias,                        // the bias of a LayerNorm
  input_norm, post_attn_norm, q_a_norm, kv_a_norm,
  q_down,        // W_DQ  (q_a_proj)
  q_up,          // W_UQ  (q_b_proj, non-RoPE rows) or the non-RoPE rows of a plain q_proj
  q_rope,        // W_QR  (q_b_proj, RoPE rows) or the RoPE rows of a plain q_proj
  kv_down,       // W_DKV (kv_a_proj_with_mqa, latent rows)
  k_rope,        // W_KR  (kv_a_proj_with_mqa, shared RoPE key rows)
  k_up,          // W_UK  (kv_b_proj, key rows)
  v_up,          // W_UV  (kv_b_proj, value rows)
  o_proj,        // W_O
  q_proj, k_proj, v_proj,           // plain multi-head / grouped-query attention
  q_bias, k_bias, v_bias, o_bias,   // their biases (Qwen2, attention_bias)
  q_norm, k_norm,                   // per-head query/key RMSNorm (Qwen3)
  mlp_gate, mlp_up, mlp_down,       // dense SwiGLU MLP
  mlp_gate_bias, mlp_up_bias, mlp_down_bias,  // Llama's mlp_bias
  router, router_bias,
  expert_gate, expert_up, expert_down,  // routed experts (one entry holds all experts)
  shared_gate, shared_up, shared_down,  // shared experts
  shared_expert_gate,                   // Qwen2-MoE's sigmoid gate on the shared expert
  attn_sink,                            // gpt-oss: a learned sink logit per attention head
  expert_gate_up_bias, expert_down_bias,  // gpt-oss: per-expert projection biases (routed experts)
  mtp_enorm, mtp_hnorm, mtp_eh_proj, mtp_head_norm, mtp_embedding, mtp_output_head,
  // DeepSeek sparse attention's indexer (self_attn.indexer.*): wq_b (index heads x head_dim from
  // the compressed query), wk (one key from the hidden state), k_norm (a LayerNorm: weight and
  // bias), weights_proj (one weight per index head from the hidden state).
  indexer_wq_b, indexer_wk, indexer_k_norm, indexer_k_norm_bias, indexer_weights_proj,
  // Gemma-2/3: the pre-MLP norm (pre_feedforward_layernorm) and the norm on the MLP's output
  // (post_feedforward_layernorm); Gemma's post_attention_layernorm, on the attention's output,
  // keeps the post_attn_norm role.
  pre_ffn_norm, post_ffn_norm,
  // Qwen3-Next's gated attention: q_proj's second half, per head, a sigmoid gate on the output.
  q_gate,
  // Gated DeltaNet linear attention (Qwen3-Next linear_attn.*): in_proj_qkvz (q, k, v and the
  // output gate z), in_proj_ba (beta and alpha per value head), the depthwise causal conv1d over
  // q, k and v, dt_bias and A_log per value head, the gated RMSNorm over a value head, out_proj.
  gdn_in_qkvz, gdn_in_ba, gdn_conv, gdn_dt_bias, gdn_a_log, gdn_norm, gdn_out,
  // Llama-4's multimodal config: every tensor of the vision tower (vision_model.*) and the
  // projector into the text model (multi_modal_projector.linear_1).
  vision_tower, mm_projector,
  // Mamba-2 (Nemotron-H mixer.* of an M block): in_proj (z, x, B, C and dt per head), the
  // depthwise causal conv1d over x, B and C and its bias, dt_bias, A_log and D per head, the
  // gated RMSNorm over the inner width, out_proj.
  mamba_in_proj, mamba_conv, mamba_conv_bias, mamba_dt_bias, mamba_a_log, mamba_d, mamba_norm, mamba_out,
};
inline constexpr std::size_t kRoleCount = static_cast<std::size_t>(Role::mamba_out) + 1;

// Coarse grouping for reports (`count --by module`).
enum class Module : std::uint8_t {
  embedding, attention, norms, dense_mlp, router, routed_experts, shared_experts, output_head, mtp,
  vision,  // Llama-4's vision tower and projector
};
inline constexpr std::size_t kModuleCount = static_cast<std::size_t>(Module::vision) + 1;

// A LoRA adapter matrix (finetune.hpp) of the linear whose role it carries: A is r x in, B out x r.
enum class Adapter : std::uint8_t { none, lora_a, lora_b };

// Where a tensor sits along the pipeline.
enum class Placement : std::uint8_t {
  embedding,  // before the first decoder layer
  decoder,    // in decoder layer `layer`
  head,       // after the last decoder layer (final norm, output head)
  mtp,        // in multi-token-prediction depth `layer - num_layers`
};

struct Tensor {
  std::string name;        // e.g. "layers.7.self_attn.kv_b_proj.weight"
  std::string_view part;   // sub-matrix of a fused checkpoint tensor ("k_nope", "v", ...), or ""
  Role role{};
  Module module{};
  Placement placement{};
  std::int64_t layer = -1;  // decoder index, or num_layers + depth for MTP; -1 otherwise
  std::int64_t rows = 0;    // output features (vectors: their length)
  std::int64_t cols = 1;    // input features (1 for vectors)
  std::int64_t copies = 1;  // experts held in this entry (routed experts), else 1
  bool is_routed_expert = false;
  // The checkpoint stores a copy, but training shares it with the main model (MTP's embedding
  // and output head in DeepSeek-V3).
  bool shared_in_training = false;
  // false: built in training (Megatron-Core gives the MTP stage its own embedding and head) but
  // not stored in the published checkpoint (GLM-5's MTP layer), so `count` leaves it out.
  bool in_checkpoint = true;
  Adapter adapter = Adapter::none;  // a LoRA matrix (apply_finetune), else none
  bool trainable = true;            // false: frozen (the base model under LoRA), no gradient, no optimizer state
  // QLoRA: stored as bitsandbytes NF4, in nf4_bytes (finetune.hpp nf4_bytes; a fused checkpoint
  // matrix's bytes on its first part, 0 on the others).
  bool nf4 = false;
  std::uint64_t nf4_bytes = 0;
  [[nodiscard]] bool quantized() const { return nf4; }

  [[nodiscard]] Count params() const;
  [[nodiscard]] bool is_vector() const { return cols == 1; }
};

struct Inventory {
  std::vector<Tensor> tensors;
  [[nodiscard]] Count total() const;
  // The tensors the checkpoint stores (all but in_checkpoint == false): what `count` reports.
  [[nodiscard]] Count checkpoint_total() const;
};

// Parameters one token passes through: every non-MTP tensor, with routed experts counted for
// top-k of them (routed + shared + dense parts, embedding and head included).
[[nodiscard]] Count active_params(const Inventory& inv, const ModelSpec& m);

[[nodiscard]] std::string_view name_of(Role r);
[[nodiscard]] std::string_view name_of(Module m);
[[nodiscard]] Module module_of(Role r);

// Builds every parameter tensor of `m`, in checkpoint order: embedding, layers, final norm and
// head, then MTP depths.
[[nodiscard]] Inventory build_inventory(const ModelSpec& m);

}  // namespace moemem
