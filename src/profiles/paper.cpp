// paper: "Memory Analysis on the Training Course of DeepSeek Models" (arXiv 2502.07846),
// restated in shared/reference/paper-method.md. Section numbers below refer to that note.
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "moemem/activation.hpp"
#include "moemem/enums.hpp"
#include "moemem/errors.hpp"
#include "moemem/profile.hpp"
#include "shared.hpp"

namespace moemem::profiles {

namespace {

// §4: TP splits W_UQ, W_UK, W_UV, W_O; keeps W_DQ, W_DKV, W_QR, W_KR, norms and router whole;
// shared experts whole. Beyond the report: embedding and output head are vocab-parallel (as in
// every TP framework); the dense MLP of the first layers is kept whole like the shared experts
// (the report's treatment of the one dense MLP it analyses); plain attention is split by heads.
TpSplit paper_tp_split(Role r) {
  switch (r) {
    case Role::q_up:
    case Role::k_up:
    case Role::v_up:
    case Role::q_proj:
    case Role::k_proj:
    case Role::v_proj:
    case Role::q_bias:
    case Role::k_bias:
    case Role::v_bias: return TpSplit::column;
    case Role::o_proj: return TpSplit::row;
    case Role::embedding:
    case Role::output_head:
    case Role::mtp_embedding:
    case Role::mtp_output_head: return TpSplit::vocab;
    default: return TpSplit::replicated;
  }
}

// §5: ZeRO shards "the non-expert part (MLA + norms)" over DP and "the expert part" — the whole
// MoE block: routed experts, shared experts and router — over EDP.
ZeroGroup paper_zero_group(Role r) {
  switch (module_of(r)) {
    case Module::router:
    case Module::routed_experts:
    case Module::shared_experts: return ZeroGroup::expert;
    default: return ZeroGroup::dense;
  }
}

// §2: the report ignores DeepSeek-V3's per-expert router bias.
bool paper_accounts(const Tensor& t) { return t.role != Role::router_bias; }

struct PaperDims {
  std::int64_t b, s, tokens, tokens_sp, heads;
};

PaperDims paper_dims(const ActivationContext& c) {
  const auto& p = c.layout.config;
  const std::int64_t tokens = c.training.micro_batch * (c.training.seq_len / p.cp);
  return {c.training.micro_batch, c.training.seq_len, tokens, tokens / (p.sp ? p.tp : 1),
          c.model.num_heads / p.tp};
}

// §6 MLA terms, one layer. "/2" in the report is the division by TP = SP.
void paper_attention(const ActivationContext& c, std::vector<ActivationTerm>& out) {
  const auto& m = c.model;
  const DType a = c.training.activation_dtype;
  const auto d = paper_dims(c);
  const std::int64_t s_local = d.s / c.layout.config.cp;
  out.push_back({"attn.input", Module::attention, elems({d.tokens_sp, m.hidden}), a, true});
  out.push_back({"attn.norm_output", Module::attention, elems({d.tokens_sp, m.hidden}), a, false, static_cast<std::uint16_t>(kRecomputeLayernorm)});
  if (m.attention == AttentionKind::mla) {
    const auto& l = m.mla;
    if (l.q_lora_rank > 0) {
      out.push_back({"attn.q_compressed", Module::attention, elems({d.tokens, l.q_lora_rank}), a, false});
    }
    out.push_back({"attn.kv_compressed", Module::attention, elems({d.tokens, l.kv_lora_rank}), a, false});
    const std::int64_t qk = l.qk_nope_head_dim + l.qk_rope_head_dim;
    out.push_back({"attn.q_expanded", Module::attention, elems({d.tokens, d.heads, qk}), a, false});
    out.push_back({"attn.k_expanded", Module::attention, elems({d.tokens, d.heads, qk}), a, false});
    out.push_back({"attn.v_expanded", Module::attention, elems({d.tokens, d.heads, l.v_head_dim}), a, false});
  } else {
    const std::int64_t kv_heads = m.num_kv_heads / c.layout.config.tp;
    out.push_back({"attn.q", Module::attention, elems({d.tokens, d.heads, m.head_dim}), a, false});
    out.push_back({"attn.k", Module::attention, elems({d.tokens, kv_heads, m.head_dim}), a, false});
    out.push_back({"attn.v", Module::attention, elems({d.tokens, kv_heads, m.head_dim}), a, false});
  }
  const std::int64_t v_dim = m.attention == AttentionKind::mla ? m.mla.v_head_dim : m.head_dim;
  out.push_back({"attn.scores", Module::attention, elems({d.b, d.heads, s_local, d.s}), a, false});
  out.push_back({"attn.softmax", Module::attention, elems({d.b, d.heads, s_local, d.s}), a, false});
  out.push_back({"attn.dropout_mask", Module::attention, elems({d.b, d.heads, s_local, d.s}), DType::int8, false});
  out.push_back({"attn.context", Module::attention, elems({d.tokens, d.heads, v_dim}), a, false});
  out.push_back({"attn.proj_dropout_mask", Module::attention, elems({d.tokens_sp, m.hidden}), DType::int8, false});
}

// The report's per-expert SwiGLU terms: input (2 bytes) and output-side mask (1 byte) of width
// h, and four intermediate tensors of width ffn (3Eh + 8E h_E bytes for E tokens).
void paper_swiglu(std::int64_t tokens, std::int64_t hidden, std::int64_t ffn, Module mod, DType a,
                  std::vector<ActivationTerm>& out) {
  const char* in = mod == Module::routed_experts ? "experts.input" : mod == Module::shared_experts ? "shared.input" : "mlp.input";
  const char* mask = mod == Module::routed_experts ? "experts.output_mask" : mod == Module::shared_experts ? "shared.output_mask" : "mlp.output_mask";
  const char* mid = mod == Module::routed_experts ? "experts.swiglu_intermediates" : mod == Module::shared_experts ? "shared.swiglu_intermediates" : "mlp.swiglu_intermediates";
  out.push_back({in, mod, elems({tokens, hidden}), a, false});
  out.push_back({mask, mod, elems({tokens, hidden}), DType::int8, false});
  out.push_back({mid, mod, elems({4, tokens, ffn}), a, false});
}

void paper_layer_activations(const ActivationContext& c, LayerKind kind, std::vector<ActivationTerm>& out) {
  const auto& m = c.model;
  const DType a = c.training.activation_dtype;
  const auto d = paper_dims(c);
  paper_attention(c, out);
  const Module block = kind == LayerKind::moe ? Module::router : Module::dense_mlp;
  out.push_back({"mlp.input", block, elems({d.tokens_sp, m.hidden}), a, true});
  out.push_back({"mlp.norm_output", block, elems({d.tokens_sp, m.hidden}), a, false, static_cast<std::uint16_t>(kRecomputeLayernorm)});
  if (kind == LayerKind::dense) {
    paper_swiglu(d.tokens, m.hidden, m.dense_ffn, Module::dense_mlp, a, out);
    return;
  }
  const auto& e = m.moe;
  out.push_back({"router.logits", Module::router, elems({d.tokens, e.num_routed_experts}), a, false});
  out.push_back({"router.probs", Module::router, elems({d.tokens, e.num_routed_experts}), a, false});
  // Replayed exactly under recomputation, so kept in every mode (§6).
  out.push_back({"router.routing_map", Module::router, elems({d.tokens, e.top_k}), a, true});
  // Balanced routing: the device's N/EP experts receive tokens*top_k/EP token copies in all.
  const std::int64_t routed = static_cast<std::int64_t>(elems({d.tokens, e.top_k}, c.layout.config.ep).value());
  paper_swiglu(routed, m.hidden, e.expert_ffn, Module::routed_experts, a, out);
  for (std::int64_t i = 0; i < e.num_shared_experts; ++i) {
    paper_swiglu(d.tokens, m.hidden, e.expert_ffn, Module::shared_experts, a, out);
  }
}

// The report has no terms for embedding, head, loss or MTP.
void paper_chunk_activations(const ActivationContext&, const Chunk&, std::vector<ActivationTerm>&) {}

// The report analyses no recomputation but none and full (uniform, one layer per checkpoint), in
// BF16 with balanced all-to-all routing and materialised attention scores, without FSDP2.
std::optional<InputError> paper_check(const ModelSpec& m, const Layout&, const TrainingConfig& t) {
  if (auto e = refuse_dropout(kPaper.name, t)) return e;
  if (auto e = refuse_megatron_options(kPaper.name, t)) return e;
  if (auto e = refuse_logits_dtype(kPaper.name, t, "the report counts no logits")) return e;
  if (auto e = refuse_finetune(kPaper.name, t, false, {OptimizerKind::adamw})) return e;
  if (t.optimizer_offload > 0) return InputError("--optimizer-cpu-offload", "set", "the megatron profile (Megatron-Core's offload)");
  if ((t.recompute == Recompute::selective && !kPaper.selective_recompute) || t.recompute_method != RecomputeMethod::uniform ||
      t.recompute_num_layers != 1) {
    const std::string_view method = name_of(t.recompute_method);
    return InputError("--recompute", fmt::format("{} {}", name_of(t.recompute), method),
                     "none or full (uniform, one layer) in the paper profile, as the report analyses");
  }
  if (t.fp8 != Fp8Recipe::none) {
    return InputError("--fp8", std::string(name_of(t.fp8)), fmt::format("none for the {} profile (BF16 only)", kPaper.name));
  }
  if (routing_options_set(t)) {
    return InputError("--moe-imbalance/--moe-capacity-factor/--moe-token-dispatcher", "set",
                     fmt::format("balanced routing with all-to-all dispatch for the {} profile", kPaper.name));
  }
  if (auto e = refuse_routing_without_experts(m, t)) return e;
  if (auto e = refuse_fsdp2_options(kPaper.name, t)) return e;
  if (auto e = refuse_transformers_options(kPaper.name, t)) return e;
  if (t.attention.value_or(kPaper.default_attention) == AttentionKernel::flash) {
    return InputError("--attention", "flash", fmt::format("eager for the {} profile (it models materialised scores)", kPaper.name));
  }
  return std::nullopt;
}

}  // namespace

const Profile kPaper{
    .name = "paper",
    .summary = "the reference analysis (Zhang and Su 2025, arXiv 2502.07846) as restated in paper-method.md",
    .assumptions =
        {
            "TP splits W_UQ, W_UK, W_UV, W_O; W_DQ, W_QR, W_DKV, W_KR, norms, router and shared experts are whole on every TP rank",
            "ZeRO shards MLA and norms over dp*cp, and the whole MoE block (experts, shared experts, router) over edp",
            "the router's score-correction bias and the MTP module are not counted (as in the report); --mtp N adds MTP",
            "attention materialises the score matrix (scores, softmax, 1-byte dropout mask); balanced routing",
            "one micro-batch in flight per stage; full recomputation keeps each sub-block's input and the routing map",
            "beyond the report: embedding/head vocab-parallel over TP, first dense MLPs kept whole and counted like a shared expert; "
            "no activations for embedding, head or loss",
            "buffers 0.8-2 GiB and fragmentation 5-30% are the report's ranges, not estimates",
        },
    .check = paper_check,
    .tp_split = paper_tp_split,
    .zero_group = paper_zero_group,
    .accounts = paper_accounts,
    .states = &detail::kZeroStates,
    .default_precision = {.weights = DType::bf16,
                          .gradients = DType::fp32,
                          .master = DType::fp32,
                          .exp_avg = DType::bf16,
                          .exp_avg_sq = DType::bf16},
    .include_mtp_by_default = false,
    .vocab_multiple = 0,
    .default_attention = AttentionKernel::eager,
    .etp_follows_tp = false,  // §4: EDP = DP x TP / (EP x ETP) = 32 x 2 / 8 = 8, so ETP 1
    .supports_flash = false,
    .selective_recompute = false,
    .models_fp8_and_routing = false,
    .layer_activations = paper_layer_activations,
    .chunk_activations = paper_chunk_activations,
    .loss_peak = nullptr,
    .single_microbatch = true,
    .recompute_transient = false,
    // §7: 0.8 to 2 "GB" (the report's GB are GiB) of buffers, 5% to 30% fragmentation.
    .overhead = {.buffers_low = Bytes::from_gib(0.8),
                 .buffers_high = Bytes::from_gib(2.0),
                 .fragmentation_pct_low = 5,
                 .fragmentation_pct_high = 30},
};

}  // namespace moemem::profiles
