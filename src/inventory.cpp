#include "moemem/inventory.hpp"

#include <fmt/format.h>

#include "inventory_internal.hpp"

namespace moemem {

namespace {

std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// A tensor dimension that is a product of two config sizes (heads x head_dim): checked, since a
// ModelSpec from a library caller need not have gone through the config readers' bounds.
std::int64_t dim(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw_overflow(what);
  return r;
}

struct Builder {
  const ModelSpec& m;
  Inventory inv;

  void add(std::string name, std::string_view part, Role role, Placement placement, std::int64_t layer,
           std::int64_t rows, std::int64_t cols, std::int64_t copies = 1, bool shared = false) {
    Tensor t;
    t.name = std::move(name);
    t.part = part;
    t.role = role;
    t.module = module_of(role);
    t.placement = placement;
    t.layer = layer;
    t.rows = rows;
    t.cols = cols;
    t.copies = copies;
    t.is_routed_expert = role == Role::expert_gate || role == Role::expert_up || role == Role::expert_down ||
                         role == Role::expert_gate_up_bias || role == Role::expert_down_bias;
    t.shared_in_training = shared;
    (void)t.params();  // overflow check at build time
    inv.tensors.push_back(std::move(t));
  }

  void attention(const std::string& p, Placement pl, std::int64_t layer) {
    const std::int64_t h = m.hidden;
    if (m.attention == AttentionKind::mla) {
      const std::int64_t nh = m.num_heads;
      const auto& a = m.mla;
      if (a.q_lora_rank > 0) {
        add(p + "self_attn.q_a_proj.weight", "", Role::q_down, pl, layer, a.q_lora_rank, h);
        add(p + "self_attn.q_a_layernorm.weight", "", Role::q_a_norm, pl, layer, a.q_lora_rank, 1);
        add(p + "self_attn.q_b_proj.weight", "q_nope", Role::q_up, pl, layer, dim(nh, a.qk_nope_head_dim, "heads x qk_nope_head_dim"), a.q_lora_rank);
        add(p + "self_attn.q_b_proj.weight", "q_rope", Role::q_rope, pl, layer, dim(nh, a.qk_rope_head_dim, "heads x qk_rope_head_dim"), a.q_lora_rank);
      } else {
        add(p + "self_attn.q_proj.weight", "q_nope", Role::q_up, pl, layer, dim(nh, a.qk_nope_head_dim, "heads x qk_nope_head_dim"), h);
        add(p + "self_attn.q_proj.weight", "q_rope", Role::q_rope, pl, layer, dim(nh, a.qk_rope_head_dim, "heads x qk_rope_head_dim"), h);
      }
      add(p + "self_attn.kv_a_proj_with_mqa.weight", "kv_latent", Role::kv_down, pl, layer, a.kv_lora_rank, h);
      add(p + "self_attn.kv_a_proj_with_mqa.weight", "k_rope", Role::k_rope, pl, layer, a.qk_rope_head_dim, h);
      add(p + "self_attn.kv_a_layernorm.weight", "", Role::kv_a_norm, pl, layer, a.kv_lora_rank, 1);
      add(p + "self_attn.kv_b_proj.weight", "k_nope", Role::k_up, pl, layer, dim(nh, a.qk_nope_head_dim, "heads x qk_nope_head_dim"), a.kv_lora_rank);
      add(p + "self_attn.kv_b_proj.weight", "v", Role::v_up, pl, layer, dim(nh, a.v_head_dim, "heads x v_head_dim"), a.kv_lora_rank);
      add(p + "self_attn.o_proj.weight", "", Role::o_proj, pl, layer, h, dim(nh, a.v_head_dim, "heads x v_head_dim"));
      if (m.has_indexer()) indexer(p, pl, layer);
    } else {
      // MiMo-V2-Flash's sliding-window layers have their own sizes and sinks (SwaDims); its value
      // heads are narrower than its query/key heads (v_head_dim: v_proj rows, o_proj columns).
      const bool swa = m.swa_at(layer);
      const std::int64_t nh = swa ? m.swa.heads : m.num_heads, hd = swa ? m.swa.head_dim : m.head_dim;
      const NasBlock* nas = m.nas_at(layer);  // Nemotron-NAS: key/value heads per layer
      const std::int64_t kvh = swa ? m.swa.kv_heads : nas ? nas->kv_heads : m.num_kv_heads, kv = dim(kvh, hd, "key/value heads x head_dim");
      const std::int64_t vd = swa ? m.swa.v_head_dim : (m.v_head_dim > 0 ? m.v_head_dim : hd);
      // Qwen3-Next's q_proj holds, per head, the query then its output gate (rows interleaved by head).
      add(p + "self_attn.q_proj.weight", m.attn_output_gate ? "query" : "", Role::q_proj, pl, layer, dim(nh, hd, "heads x head_dim"), h);
      if (m.attn_output_gate) add(p + "self_attn.q_proj.weight", "gate", Role::q_gate, pl, layer, dim(nh, hd, "heads x head_dim"), h);
      if (m.qkv_bias) add(p + "self_attn.q_proj.bias", "", Role::q_bias, pl, layer, dim(nh, hd, "heads x head_dim"), 1);
      add(p + "self_attn.k_proj.weight", "", Role::k_proj, pl, layer, kv, h);
      if (m.qkv_bias) add(p + "self_attn.k_proj.bias", "", Role::k_bias, pl, layer, kv, 1);
      add(p + "self_attn.v_proj.weight", "", Role::v_proj, pl, layer, dim(kvh, vd, "key/value heads x v_head_dim"), h);
      if (m.qkv_bias) add(p + "self_attn.v_proj.bias", "", Role::v_bias, pl, layer, dim(kvh, vd, "key/value heads x v_head_dim"), 1);
      add(p + "self_attn.o_proj.weight", "", Role::o_proj, pl, layer, h, dim(nh, vd, "heads x v_head_dim"));
      if (m.o_bias) add(p + "self_attn.o_proj.bias", "", Role::o_bias, pl, layer, h, 1);
      if (m.qk_norm) {  // per head (Qwen3, GLM, Hunyuan's query/key_layernorm), or over the whole projection (OLMoE)
        const bool hy = m.naming == NamingStyle::hunyuan;
        add(p + (hy ? "self_attn.query_layernorm.weight" : "self_attn.q_norm.weight"), "", Role::q_norm, pl, layer, m.qk_norm_full_width ? dim(nh, hd, "heads x head_dim") : hd, 1);
        add(p + (hy ? "self_attn.key_layernorm.weight" : "self_attn.k_norm.weight"), "", Role::k_norm, pl, layer, m.qk_norm_full_width ? kv : hd, 1);
      }
      // gpt-oss (transformers GptOssAttention.sinks): one logit per head added to the softmax.
      if (swa ? m.swa.sinks : m.attention_sinks) {
        add(p + (m.naming == NamingStyle::mimo_v2 ? "self_attn.attention_sink_bias" : "self_attn.sinks"), "", Role::attn_sink, pl, layer, nh, 1);
      }
    }
  }

  // DeepSeek-V3.2's lightning indexer (DeepSeek-V3.2-Exp inference/model.py Indexer.__init__;
  // transformers DeepseekV32Indexer; Megatron-Core DSAIndexer): wq_b [heads x dim, q_lora_rank]
  // on the compressed query, wk [dim, hidden], k_norm a LayerNorm(dim) with weight and bias,
  // weights_proj [heads, hidden]; no projection biases. The MTP layer's decoder has one too.
  void indexer(const std::string& p, Placement pl, std::int64_t layer) {
    const auto& d = m.dsa;
    const std::string x = p + "self_attn.indexer.";
    add(x + "wq_b.weight", "", Role::indexer_wq_b, pl, layer, dim(d.index_n_heads, d.index_head_dim, "index heads x index_head_dim"),
        m.mla.q_lora_rank);
    add(x + "wk.weight", "", Role::indexer_wk, pl, layer, d.index_head_dim, m.hidden);
    add(x + "k_norm.weight", "", Role::indexer_k_norm, pl, layer, d.index_head_dim, 1);
    add(x + "k_norm.bias", "", Role::indexer_k_norm_bias, pl, layer, d.index_head_dim, 1);
    add(x + "weights_proj.weight", "", Role::indexer_weights_proj, pl, layer, d.index_n_heads, m.hidden);
  }

  // Qwen3-Next's Gated DeltaNet (transformers Qwen3NextGatedDeltaNet): in_proj_qkvz [2 key_dim +
  // 2 value_dim, h] (q, k, v, z), in_proj_ba [2 v_heads, h], conv1d [2 key_dim + value_dim, 1,
  // kernel] without a bias, dt_bias and A_log [v_heads], a gated RMSNorm over one value head
  // [v_head_dim], out_proj [h, value_dim]; no biases.
  void gated_delta_net(const std::string& p, Placement pl, std::int64_t layer) {
    const auto& g = m.gdn;
    const std::string x = p + "linear_attn.";
    const std::int64_t key = dim(g.num_k_heads, g.k_head_dim, "linear key heads x head dim");
    const std::int64_t value = dim(g.num_v_heads, g.v_head_dim, "linear value heads x head dim");
    const std::int64_t conv = dim(2, key, "2 x key dim") + value;
    if (m.naming == NamingStyle::qwen3_5) {  // the same sizes in four tensors (inventory_qwen3_5.cpp)
      qwen3_5_gdn_inputs(m, x, [&](std::string name, Role role, std::int64_t rows, std::int64_t cols, std::int64_t) {
        add(std::move(name), "", role, pl, layer, rows, cols);
      });
    } else {
      add(x + "in_proj_qkvz.weight", "", Role::gdn_in_qkvz, pl, layer, conv + value, m.hidden);
      add(x + "in_proj_ba.weight", "", Role::gdn_in_ba, pl, layer, dim(2, g.num_v_heads, "2 x linear value heads"), m.hidden);
    }
    add(x + "conv1d.weight", "", Role::gdn_conv, pl, layer, conv, g.conv_kernel);
    add(x + "dt_bias", "", Role::gdn_dt_bias, pl, layer, g.num_v_heads, 1);
    add(x + "A_log", "", Role::gdn_a_log, pl, layer, g.num_v_heads, 1);
    add(x + "norm.weight", "", Role::gdn_norm, pl, layer, g.v_head_dim, 1);
    add(x + "out_proj.weight", "", Role::gdn_out, pl, layer, m.hidden, value);
  }

  void mlp(const std::string& p, Placement pl, std::int64_t layer, LayerKind kind) {
    const std::int64_t h = m.hidden;
    if (kind == LayerKind::dense && !m.gated_mlp) {
      // GPT: fc1 (h -> ffn), GeLU, fc2 (ffn -> h).
      const std::int64_t f = m.dense_ffn;
      add(p + "mlp.fc1.weight", "", Role::mlp_up, pl, layer, f, h);
      if (m.mlp_bias) add(p + "mlp.fc1.bias", "", Role::mlp_up_bias, pl, layer, f, 1);
      add(p + "mlp.fc2.weight", "", Role::mlp_down, pl, layer, h, f);
      if (m.mlp_bias) add(p + "mlp.fc2.bias", "", Role::mlp_down_bias, pl, layer, h, 1);
      return;
    }
    if (kind == LayerKind::dense) {
      const std::int64_t f = m.nas_at(layer) ? m.nas_at(layer)->ffn_size : m.dense_ffn;  // Nemotron-NAS: per layer
      const std::string d = p + (m.naming == NamingStyle::llama4 ? "feed_forward." : "mlp.");  // Llama4TextMLP
      add(d + "gate_proj.weight", "", Role::mlp_gate, pl, layer, f, h);
      if (m.mlp_bias) add(d + "gate_proj.bias", "", Role::mlp_gate_bias, pl, layer, f, 1);
      add(d + "up_proj.weight", "", Role::mlp_up, pl, layer, f, h);
      if (m.mlp_bias) add(d + "up_proj.bias", "", Role::mlp_up_bias, pl, layer, f, 1);
      add(d + "down_proj.weight", "", Role::mlp_down, pl, layer, h, f);
      if (m.mlp_bias) add(d + "down_proj.bias", "", Role::mlp_down_bias, pl, layer, h, 1);
      return;
    }
    if (m.naming == NamingStyle::llama4) {
      llama4_moe(p, pl, layer);
      return;
    }
    if (m.naming == NamingStyle::gpt_oss) {
      gpt_oss_moe(p, pl, layer);
      return;
    }
    if (m.naming == NamingStyle::granite) {
      granite_moe(p, pl, layer);
      return;
    }
    const auto& e = m.moe;
    const bool mixtral = m.naming == NamingStyle::mixtral;
    const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
    // Hunyuan's HunYuanTopKGate holds the router as gate.wg.
    add(moe + (m.naming == NamingStyle::hunyuan ? "gate.wg.weight" : "gate.weight"), "", Role::router, pl, layer, e.num_routed_experts, h);
    if (e.router_bias) {  // ERNIE-4.5 keeps it in Ernie4_5_MoeStatics, shaped [1, experts]; MiniMax-M2 beside the gate
      const char* bias = m.naming == NamingStyle::ernie ? "moe_statics.e_score_correction_bias"
                         : mixtral                      ? "e_score_correction_bias"
                                                        : "gate.e_score_correction_bias";
      add(moe + bias, "", Role::router_bias, pl, layer, e.num_routed_experts, 1);
    }
    const std::int64_t n = e.num_routed_experts, f = e.expert_ffn;
    if (m.naming == NamingStyle::qwen3_5) {  // Qwen3NextExperts, as the checkpoint stores them: gate_up_proj [E, 2f, h], down_proj [E, h, f]
      add(moe + "experts.gate_up_proj", "gate", Role::expert_gate, pl, layer, f, h, n);
      add(moe + "experts.gate_up_proj", "up", Role::expert_up, pl, layer, f, h, n);
      add(moe + "experts.down_proj", "", Role::expert_down, pl, layer, h, f, n);
    } else {
      // A Megatron launch without --swiglu (or --quick-geglu) has ungated experts: linear_fc1 is ffn
      // wide, not 2 ffn (megatron/core/transformer/moe/experts.py TEGroupedMLP: fc1's output doubles
      // only under gated_linear_unit); with biased linear layers (no --disable-bias-linear) each
      // expert's fc1 and fc2 carry a bias (bias=add_bias_linear).
      if (m.gated_mlp) {
        add(moe + (mixtral ? "experts.*.w1.weight" : "experts.*.gate_proj.weight"), "", Role::expert_gate, pl, layer, f, h, n);
      }
      add(moe + (mixtral ? "experts.*.w3.weight" : "experts.*.up_proj.weight"), "", Role::expert_up, pl, layer, f, h, n);
      if (m.mlp_bias) {
        add(moe + "experts.*.fc1.bias", "", Role::expert_gate_up_bias, pl, layer, m.gated_mlp ? dim(2, f, "2 x expert ffn") : f, 1, n);
      }
      add(moe + (mixtral ? "experts.*.w2.weight" : "experts.*.down_proj.weight"), "", Role::expert_down, pl, layer, h, f, n);
      if (m.mlp_bias) add(moe + "experts.*.fc2.bias", "", Role::expert_down_bias, pl, layer, h, 1, n);
    }
    if (e.shared_ffn > 0) {
      const std::int64_t sf = e.shared_ffn;
      const bool qwen = m.naming == NamingStyle::qwen_moe || m.naming == NamingStyle::qwen3_5;
      const std::string sh = moe + (qwen                               ? "shared_expert."
                                    : m.naming == NamingStyle::hunyuan ? "shared_mlp."
                                                                       : "shared_experts.");
      if (m.gated_mlp) add(sh + "gate_proj.weight", "", Role::shared_gate, pl, layer, sf, h);
      add(sh + "up_proj.weight", "", Role::shared_up, pl, layer, sf, h);
      add(sh + "down_proj.weight", "", Role::shared_down, pl, layer, h, sf);
      if (e.shared_expert_gate) add(moe + "shared_expert_gate.weight", "", Role::shared_expert_gate, pl, layer, 1, h);
    }
  }

  // gpt-oss (transformers GptOssTopKRouter, GptOssExperts): a router with a bias, and all experts
  // in fused tensors with biases: gate_up_proj [E, h, 2f] (gate and up columns interleaved),
  // gate_up_proj_bias [E, 2f], down_proj [E, f, h], down_proj_bias [E, h]. The published
  // checkpoint stores the two projections as MXFP4 (gate_up_proj_blocks/_scales, ...); the
  // parameters, and the training weights, are these.
  void gpt_oss_moe(const std::string& p, Placement pl, std::int64_t layer) {
    const std::int64_t h = m.hidden, n = m.moe.num_routed_experts, f = m.moe.expert_ffn;
    add(p + "mlp.router.weight", "", Role::router, pl, layer, n, h);
    add(p + "mlp.router.bias", "", Role::router_bias, pl, layer, n, 1);
    add(p + "mlp.experts.gate_up_proj", "gate", Role::expert_gate, pl, layer, f, h, n);
    add(p + "mlp.experts.gate_up_proj", "up", Role::expert_up, pl, layer, f, h, n);
    add(p + "mlp.experts.gate_up_proj_bias", "", Role::expert_gate_up_bias, pl, layer, dim(2, f, "2 x expert ffn"), 1, n);
    add(p + "mlp.experts.down_proj", "", Role::expert_down, pl, layer, h, f, n);
    add(p + "mlp.experts.down_proj_bias", "", Role::expert_down_bias, pl, layer, h, 1, n);
  }

  // Llama-4 (transformers Llama4TextMoe): Llama4Router, a bias-free nn.Linear [E, h]; the experts
  // fused as Llama4TextExperts' gate_up_proj [E, h, 2f] (gate columns, then up: chunk(2, -1)) and
  // down_proj [E, f, h], held here as [out, in] parts like gpt-oss's; and shared_expert, a
  // Llama4TextMLP of intermediate_size (the same f), bias-free.
  void llama4_moe(const std::string& p, Placement pl, std::int64_t layer) {
    const std::int64_t h = m.hidden, n = m.moe.num_routed_experts, f = m.moe.expert_ffn, s = m.moe.shared_ffn;
    const std::string x = p + "feed_forward.";
    add(x + "router.weight", "", Role::router, pl, layer, n, h);
    add(x + "experts.gate_up_proj", "gate", Role::expert_gate, pl, layer, f, h, n);
    add(x + "experts.gate_up_proj", "up", Role::expert_up, pl, layer, f, h, n);
    add(x + "experts.down_proj", "", Role::expert_down, pl, layer, h, f, n);
    add(x + "shared_expert.gate_proj.weight", "", Role::shared_gate, pl, layer, s, h);
    add(x + "shared_expert.up_proj.weight", "", Role::shared_up, pl, layer, s, h);
    add(x + "shared_expert.down_proj.weight", "", Role::shared_down, pl, layer, h, s);
  }

  // Llama-4's vision tower (transformers Llama4VisionModel) and projector, before the text model:
  // patch_embedding.linear [hidden, channels x patch^2] (Llama4UnfoldConvolution, no bias), a
  // class embedding [hidden], positional_embedding_vlm [(image / patch)^2 + 1, hidden], LayerNorms
  // (weight and bias) before and after the encoder; per encoder layer q/k/v/o [hidden, hidden]
  // with biases (head_dim = hidden / heads), fc1 [intermediate, hidden] and fc2 [hidden,
  // intermediate] with biases, two LayerNorms; the pixel-shuffle adapter's bias-free fc1
  // [projector_input, intermediate] and fc2 [projector_output, projector_output]
  // (Llama4VisionMLP2); multi_modal_projector.linear_1 [text hidden, vision_output_dim], no bias
  // (Llama4MultiModalProjector builds none whatever multi_modal_projector_bias says).
  void vision_tower() {
    const auto& v = m.vision;
    const Placement pl = Placement::embedding;
    const auto w = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
      add("vision_model." + name, "", Role::vision_tower, pl, -1, rows, cols);
    };
    const auto layer_norm = [&](const std::string& name) {
      w(name + ".weight", v.hidden, 1);
      w(name + ".bias", v.hidden, 1);
    };
    const std::int64_t side = v.image_size / v.patch_size;
    w("patch_embedding.linear.weight", v.hidden, dim(v.channels, dim(v.patch_size, v.patch_size, "patch_size^2"), "channels x patch_size^2"));
    w("class_embedding", v.hidden, 1);
    w("positional_embedding_vlm", dim(side, side, "patches") + 1, v.hidden);
    layer_norm("layernorm_pre");
    layer_norm("layernorm_post");
    for (std::int64_t i = 0; i < v.layers; ++i) {
      const std::string l = fmt::format("model.layers.{}.", i);
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
        w(l + "self_attn." + proj + ".weight", v.hidden, v.hidden);
        w(l + "self_attn." + proj + ".bias", v.hidden, 1);
      }
      w(l + "mlp.fc1.weight", v.intermediate, v.hidden);
      w(l + "mlp.fc1.bias", v.intermediate, 1);
      w(l + "mlp.fc2.weight", v.hidden, v.intermediate);
      w(l + "mlp.fc2.bias", v.hidden, 1);
      layer_norm(l + "input_layernorm");
      layer_norm(l + "post_attention_layernorm");
    }
    w("vision_adapter.mlp.fc1.weight", v.projector_input, v.intermediate);
    w("vision_adapter.mlp.fc2.weight", v.projector_output, v.projector_output);
    add("multi_modal_projector.linear_1.weight", "", Role::mm_projector, pl, -1, m.hidden, v.output_dim);
  }

  // Granite MoE (transformers GraniteMoeMoE, from JetMoe's JetMoeParallelExperts and
  // JetMoeTopKGating): router.layer [E, h] without a bias; input_linear [E, 2f, h] holding each
  // expert's gate and up rows (chunked in two in forward); output_linear [E, h, f]. The shared
  // variant (GraniteMoeSharedMLP) adds shared_mlp.input_linear [2s, h] and output_linear [h, s],
  // bias-free, beside block_sparse_moe.
  void granite_moe(const std::string& p, Placement pl, std::int64_t layer) {
    const std::int64_t h = m.hidden, n = m.moe.num_routed_experts, f = m.moe.expert_ffn, s = m.moe.shared_ffn;
    const std::string moe = p + "block_sparse_moe.";
    add(moe + "router.layer.weight", "", Role::router, pl, layer, n, h);
    add(moe + "input_linear.weight", "gate", Role::expert_gate, pl, layer, f, h, n);
    add(moe + "input_linear.weight", "up", Role::expert_up, pl, layer, f, h, n);
    add(moe + "output_linear.weight", "", Role::expert_down, pl, layer, h, f, n);
    if (s == 0) return;
    add(p + "shared_mlp.input_linear.weight", "gate", Role::shared_gate, pl, layer, s, h);
    add(p + "shared_mlp.input_linear.weight", "up", Role::shared_up, pl, layer, s, h);
    add(p + "shared_mlp.output_linear.weight", "", Role::shared_down, pl, layer, h, s);
  }

  // DBRX (transformers DbrxBlock): DbrxNormAttentionNorm's norm_1 and norm_2, LayerNorms without
  // a bias; DbrxAttention's fused Wqkv [n_h d + 2 n_kv d, h] (q, k, v rows in that order) and
  // out_proj, no biases; DbrxFFN's router.layer [E, h] and DbrxExpertGLU's w1 (gate), v1 (up) and
  // w2 (down), each [E x f, h] parameters. w2 is held here as E copies of h x f, the down
  // projection's [out, in] shape that sharding splits by columns; the count is the same.
  void dbrx_block(const std::string& p, std::int64_t i, Placement pl) {
    const std::int64_t h = m.hidden, q = dim(m.num_heads, m.head_dim, "heads x head_dim");
    const std::int64_t kv = dim(m.num_kv_heads, m.head_dim, "key/value heads x head_dim");
    const std::int64_t n = m.moe.num_routed_experts, f = m.moe.expert_ffn;
    const std::string a = p + "norm_attn_norm.";
    add(a + "norm_1.weight", "", Role::input_norm, pl, i, h, 1);
    add(a + "attn.Wqkv.weight", "q", Role::q_proj, pl, i, q, h);
    add(a + "attn.Wqkv.weight", "k", Role::k_proj, pl, i, kv, h);
    add(a + "attn.Wqkv.weight", "v", Role::v_proj, pl, i, kv, h);
    add(a + "attn.out_proj.weight", "", Role::o_proj, pl, i, h, q);
    add(a + "norm_2.weight", "", Role::post_attn_norm, pl, i, h, 1);
    add(p + "ffn.router.layer.weight", "", Role::router, pl, i, n, h);
    add(p + "ffn.experts.mlp.w1", "", Role::expert_gate, pl, i, f, h, n);
    add(p + "ffn.experts.mlp.v1", "", Role::expert_up, pl, i, f, h, n);
    add(p + "ffn.experts.mlp.w2", "", Role::expert_down, pl, i, h, f, n);
  }

  // MiMo-V2-Flash's MTP layer k (checkpoint model.mtp.layers.<k>; vLLM mimo_v2_mtp.py
  // MiMoV2MTPLayer, Megatron-Bridge MiMoV2FlashBridge's mtp mappings): enorm, hnorm, eh_proj
  // [h, 2h], a sliding-window decoder layer whose post-attention norm is pre_mlp_layernorm and
  // whose MLP is dense (intermediate_size), and final_layernorm; embedding and head are shared.
  void mimo_mtp_layer(std::int64_t k) {
    const std::int64_t i = m.num_layers + k, h = m.hidden;
    const std::string p = fmt::format("mtp.layers.{}.", k);
    add(p + "enorm.weight", "", Role::mtp_enorm, Placement::mtp, i, h, 1);
    add(p + "hnorm.weight", "", Role::mtp_hnorm, Placement::mtp, i, h, 1);
    add(p + "eh_proj.weight", "", Role::mtp_eh_proj, Placement::mtp, i, h, dim(2, h, "2 x hidden_size"));
    norm(p + "input_layernorm", Role::input_norm, Placement::mtp, i);
    attention(p, Placement::mtp, i);
    norm(p + "pre_mlp_layernorm", Role::post_attn_norm, Placement::mtp, i);
    mlp(p, Placement::mtp, i, LayerKind::dense);
    add(p + "final_layernorm.weight", "", Role::mtp_head_norm, Placement::mtp, i, h, 1);
  }

  // Qwen3.5's and Qwen3.5-MoE's MTP block (checkpoint mtp.*; vLLM qwen3_next_mtp.py
  // Qwen3NextMultiTokenPredictor, NeMo Automodel's Qwen3.5 MTP key map): pre_fc_norm_embedding and
  // pre_fc_norm_hidden (the enorm and hnorm), fc [h, 2h] (eh_proj), one full-attention decoder layer
  // mtp.layers.0 with the model's MLP (sparse for Qwen3.5-MoE, dense for Qwen3.5: mtp_kind), and
  // mtp.norm; the embedding and head are the main model's (mtp_use_dedicated_embeddings false).
  void qwen3_5_mtp() {
    const std::int64_t i = m.num_layers, h = m.hidden;
    add("mtp.pre_fc_norm_embedding.weight", "", Role::mtp_enorm, Placement::mtp, i, h, 1);
    add("mtp.pre_fc_norm_hidden.weight", "", Role::mtp_hnorm, Placement::mtp, i, h, 1);
    add("mtp.fc.weight", "", Role::mtp_eh_proj, Placement::mtp, i, h, dim(2, h, "2 x hidden_size"));
    decoder_layer("mtp.layers.0.", i, Placement::mtp, m.mtp_kind());
    add("mtp.norm.weight", "", Role::mtp_head_norm, Placement::mtp, i, h, 1);
  }

  void norm(const std::string& name, Role role, Placement pl, std::int64_t layer) {
    add(name + ".weight", "", role, pl, layer, m.hidden, 1);
    if (m.norm_bias) add(name + ".bias", "", Role::norm_bias, pl, layer, m.hidden, 1);
  }

  void decoder_layer(std::int64_t i, Placement pl, LayerKind kind) {
    decoder_layer(fmt::format("{}.{}.", m.naming == NamingStyle::dbrx ? "blocks" : "layers", i), i, pl, kind);
  }

  void decoder_layer(const std::string& p, std::int64_t i, Placement pl, LayerKind kind) {
    if (m.naming == NamingStyle::dbrx) {
      dbrx_block(p, i, pl);
      return;
    }
    if (m.naming == NamingStyle::nemotron_h) {  // src/inventory_nemotron_h.cpp
      nemotron_h_block(m, p, i, kind, [&](std::string name, Role role, std::int64_t rows, std::int64_t cols, std::int64_t copies) {
        add(std::move(name), "", role, pl, i, rows, cols, copies);
      });
      return;
    }
    // Nemotron-NAS (DeciLM Block): a no_op part has no norm either; a linear part is one h x h
    // matrix, self_attn.linear_attn or mlp.linear_mlp (counted with attention and the MLP).
    const NasBlock* nas = m.nas_at(i);
    if (!nas || nas->attention != NasPart::none) norm(p + "input_layernorm", Role::input_norm, pl, i);
    if (nas && nas->attention == NasPart::linear) add(p + "self_attn.linear_attn.weight", "", Role::o_proj, pl, i, m.hidden, m.hidden);
    else if (pl == Placement::decoder && m.mixer_at(i) == MixerKind::gated_delta_net) gated_delta_net(p, pl, i);
    else if (!nas || nas->attention == NasPart::full) attention(p, pl, i);
    if (!nas || nas->ffn != NasPart::none) norm(p + "post_attention_layernorm", Role::post_attn_norm, pl, i);
    if (m.sandwich_norms) norm(p + "pre_feedforward_layernorm", Role::pre_ffn_norm, pl, i);
    if (nas && nas->ffn == NasPart::linear) add(p + "mlp.linear_mlp.weight", "", Role::mlp_down, pl, i, m.hidden, m.hidden);
    else if (!nas || nas->ffn == NasPart::full) mlp(p, pl, i, kind);
    if (m.sandwich_norms) norm(p + "post_feedforward_layernorm", Role::post_ffn_norm, pl, i);
  }
};

}  // namespace

Count Tensor::params() const {
  return Count(checked_mul(checked_mul(u(rows), u(cols), "tensor size"), u(copies), "tensor size"));
}

Count Inventory::total() const {
  Count c;
  for (const auto& t : tensors) c += t.params();
  return c;
}

Count Inventory::checkpoint_total() const {
  Count c;
  for (const auto& t : tensors) {
    if (t.in_checkpoint) c += t.params();
  }
  return c;
}

Count active_params(const Inventory& inv, const ModelSpec& m) {
  Count c;
  for (const auto& t : inv.tensors) {
    if (t.placement == Placement::mtp) continue;
    if (t.is_routed_expert) {
      c += Count(checked_mul(t.params().value() / u(t.copies), u(m.moe.top_k), "active parameters"));
    } else {
      c += t.params();
    }
  }
  return c;
}

Module module_of(Role r) {
  switch (r) {
    case Role::embedding:
    case Role::position_embedding: return Module::embedding;
    case Role::norm_bias: return Module::norms;
    case Role::output_head:
    case Role::final_norm: return Module::output_head;
    case Role::input_norm:
    case Role::post_attn_norm:
    case Role::q_a_norm:
    case Role::kv_a_norm:
    case Role::q_norm:
    case Role::k_norm: return Module::norms;
    case Role::q_down:
    case Role::q_up:
    case Role::q_rope:
    case Role::kv_down:
    case Role::k_rope:
    case Role::k_up:
    case Role::v_up:
    case Role::o_proj:
    case Role::q_proj:
    case Role::k_proj:
    case Role::v_proj:
    case Role::q_bias:
    case Role::k_bias:
    case Role::v_bias:
    case Role::o_bias:
    case Role::attn_sink:
    case Role::q_gate:
    case Role::gdn_in_qkvz:
    case Role::gdn_in_ba:
    case Role::gdn_conv:
    case Role::gdn_dt_bias:
    case Role::gdn_a_log:
    case Role::gdn_out:
    case Role::mamba_in_proj:
    case Role::mamba_conv:
    case Role::mamba_conv_bias:
    case Role::mamba_dt_bias:
    case Role::mamba_a_log:
    case Role::mamba_d:
    case Role::mamba_out:
    case Role::indexer_wq_b:
    case Role::indexer_wk:
    case Role::indexer_weights_proj: return Module::attention;
    case Role::indexer_k_norm:
    case Role::indexer_k_norm_bias:
    case Role::pre_ffn_norm:
    case Role::post_ffn_norm:
    case Role::gdn_norm:
    case Role::mamba_norm: return Module::norms;
    case Role::vision_tower:
    case Role::mm_projector: return Module::vision;
    case Role::mlp_gate:
    case Role::mlp_up:
    case Role::mlp_down:
    case Role::mlp_gate_bias:
    case Role::mlp_up_bias:
    case Role::mlp_down_bias: return Module::dense_mlp;
    case Role::router:
    case Role::router_bias: return Module::router;
    case Role::expert_gate:
    case Role::expert_up:
    case Role::expert_down:
    case Role::expert_gate_up_bias:
    case Role::expert_down_bias: return Module::routed_experts;
    case Role::shared_gate:
    case Role::shared_up:
    case Role::shared_down:
    case Role::shared_expert_gate: return Module::shared_experts;
    case Role::mtp_enorm:
    case Role::mtp_hnorm:
    case Role::mtp_eh_proj:
    case Role::mtp_head_norm:
    case Role::mtp_embedding:
    case Role::mtp_output_head: return Module::mtp;
  }
  return Module::attention;
}

Inventory build_inventory(const ModelSpec& m) {
  Builder b{m, {}};
  const std::int64_t h = m.hidden;
  const bool dbrx = m.naming == NamingStyle::dbrx;  // DbrxModel: wte, blocks, norm_f
  const bool nemotron = m.naming == NamingStyle::nemotron_h;  // NemotronHModel: embeddings, layers, norm_f
  const auto add_vision = [&](std::string name, Role role, std::int64_t rows, std::int64_t cols, std::int64_t) {
    b.add(std::move(name), "", role, Placement::embedding, -1, rows, cols);
  };
  if (m.has_vision() && m.naming == NamingStyle::qwen3_5) {
    qwen3_5_vision_tower(m, add_vision);
  } else if (m.has_vision() && m.model_type == "gemma3_text") {  // Gemma-3's SigLIP tower (config_gemma3.cpp)
    gemma3_vision_tower(m, add_vision);
  } else if (m.has_vision()) {
    b.vision_tower();
  }
  b.add(dbrx ? "wte.weight" : nemotron ? "embeddings.weight" : "embed_tokens.weight", "", Role::embedding, Placement::embedding, -1, m.vocab, h);
  if (m.learned_positions > 0) {
    b.add("position_embeddings.weight", "", Role::position_embedding, Placement::embedding, -1, m.learned_positions, h);
  }
  for (std::int64_t i = 0; i < m.num_layers; ++i) {
    b.decoder_layer(i, Placement::decoder, m.layer_kinds[static_cast<std::size_t>(i)]);
  }
  b.add(dbrx || nemotron ? "norm_f.weight" : "norm.weight", "", Role::final_norm, Placement::head, -1, h, 1);
  if (m.norm_bias) b.add("norm.bias", "", Role::norm_bias, Placement::head, -1, h, 1);
  if (!m.tie_embeddings) b.add("lm_head.weight", "", Role::output_head, Placement::head, -1, m.vocab, h);
  // PhimoeForCausalLM (lm_head_bias): one per vocabulary entry, split over the vocabulary like the head.
  if (m.head_bias) b.add("lm_head.bias", "", Role::output_head, Placement::head, -1, m.vocab, 1);
  // DeepSeek-V3 MTP depth k is stored as decoder index num_layers + k: its own norms of the
  // embedding (enorm) and hidden state (hnorm), a 2h -> h projection, a full decoder layer (MoE
  // like the last main layer), a norm before the head, and copies of embedding and head.
  const LayerKind mtp_kind = m.mtp_kind();
  for (std::int64_t k = 0; k < m.mtp_layers && m.naming == NamingStyle::ernie; ++k) {
    // ERNIE-4.5 (sglang models/ernie4_eagle.py, Ernie4ModelMTP; the -PT checkpoints' model.mtp_*
    // tensors): norms of the embedding and of the hidden state, a 2h -> h projection and a dense
    // decoder block; the embedding, final norm and head are the main model's.
    const std::int64_t i = m.num_layers + k;
    b.add(fmt::format("mtp_emb_norm.{}.weight", k), "", Role::mtp_enorm, Placement::mtp, i, h, 1);
    b.add(fmt::format("mtp_hidden_norm.{}.weight", k), "", Role::mtp_hnorm, Placement::mtp, i, h, 1);
    b.add(fmt::format("mtp_linear_proj.{}.weight", k), "", Role::mtp_eh_proj, Placement::mtp, i, h, dim(2, h, "2 x hidden_size"));
    b.decoder_layer(fmt::format("mtp_block.{}.", k), i, Placement::mtp, mtp_kind);
  }
  for (std::int64_t k = 0; k < m.mtp_layers && m.naming == NamingStyle::mimo_v2; ++k) b.mimo_mtp_layer(k);
  // Qwen3.5's MTP block, and Qwen3-Next's (the same module): one layer at most (config_qwen3_5.cpp).
  const bool qwen_mtp = m.naming == NamingStyle::qwen3_5 || m.model_type == "qwen3_next";
  if (m.mtp_layers > 0 && qwen_mtp) b.qwen3_5_mtp();
  const bool own_mtp = m.naming == NamingStyle::ernie || m.naming == NamingStyle::mimo_v2 || qwen_mtp;
  for (std::int64_t k = 0; k < m.mtp_layers && !own_mtp; ++k) {
    const std::int64_t i = m.num_layers + k;
    const std::string p = fmt::format("layers.{}.", i);
    b.add(p + "embed_tokens.weight", "", Role::mtp_embedding, Placement::mtp, i, m.vocab, h, 1, true);
    b.inv.tensors.back().in_checkpoint = m.mtp_stores_embedding_and_head;
    b.add(p + "enorm.weight", "", Role::mtp_enorm, Placement::mtp, i, h, 1);
    b.add(p + "hnorm.weight", "", Role::mtp_hnorm, Placement::mtp, i, h, 1);
    b.add(p + "eh_proj.weight", "", Role::mtp_eh_proj, Placement::mtp, i, h, dim(2, h, "2 x hidden_size"));
    b.decoder_layer(i, Placement::mtp, mtp_kind);
    b.add(p + "shared_head.norm.weight", "", Role::mtp_head_norm, Placement::mtp, i, h, 1);
    b.add(p + "shared_head.head.weight", "", Role::mtp_output_head, Placement::mtp, i, m.vocab, h, 1, true);
    b.inv.tensors.back().in_checkpoint = m.mtp_stores_embedding_and_head;
  }
  // A router's score-correction bias is a buffer, not a parameter, wherever it is trained: the
  // checkpoint stores it (count keeps it), but the load-balancing rule moves it, not the optimizer.
  // Megatron-Core's TopKRouter register_buffer('expert_bias'); transformers 5.17's DeepSeek-V3
  // router (measured: model.parameters() of moonlight-16b-4l holds 192 values fewer than the
  // checkpoint, its three MoE layers' biases; scripts/measure/hf_step_memory.py). No gradient, no
  // optimizer state.
  for (Tensor& t : b.inv.tensors) {
    if (t.name.ends_with("e_score_correction_bias")) t.trainable = false;
  }
  return std::move(b.inv);
}

}  // namespace moemem
