// DeepSeek sparse attention (DSA, DeepSeek-V3.2) under the megatron profile: what one layer's
// forward saves and holds in Megatron-Core (Megatron-LM d98e8a64), read in
//   megatron/core/models/gpt/experimental_attention_variant_module_specs.py
//     get_dsa_module_spec_for_backend: --experimental-attention-variant dsa builds
//     AbsorbedMLASelfAttention with DSAttention (its DSAIndexer inside) as the core attention;
//   megatron/core/transformer/experimental_attention_variant/absorbed_mla.py
//     AbsorbedMLASelfAttention.get_query_key_value_tensors / forward (absorbed MLA);
//   .../experimental_attention_variant/dsa.py DSAttention.forward, DSAIndexer.forward_before_topk;
//   .../experimental_attention_variant/dsa_kernels.py, dsa_tilelang_kernels.py, ops/tilelang_dsa.py
//     (fused_qk_topk_lighting_with_streaming_sparse_kl, fused_sparse_mla_absorbed);
//   .../experimental_attention_variant/ops/indexer.py IndexerFunction, ops/sparse_mla.py SparseMLA,
//     ops/tilelang_indexer_loss.py SparseIndexerKLLoss.
// moemem models the fused path a V3.2 training run takes: --dsa-kernel-backend tilelang (the
// default `none`, and --attention-backend unfused, run the PyTorch reference path, which builds
// dense b x heads x s x s fp32 scores: _unfused_absorbed_dsa_fn, compute_dsa_indexer_loss), with
// the indexer trained by its KL loss on the selected keys (--dsa-indexer-loss-coeff > 0,
// --dsa-indexer-use-sparse-loss: DeepSeek-V3.2 §2.1.1's sparse training stage) and top-k computed
// in every layer (--dsa-indexer-topk-freq 1), index_topk keys from the model's config.
#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "profiles/shared.hpp"

namespace moemem::profiles {

namespace {

// SparseMLA's head tile (ops/tilelang_dsa.py fused_sparse_mla_absorbed: fewer heads per TP rank are
// padded to 16) and the indexer's query block (DSAttention.forward: fused_indexer_block_size 8192).
constexpr std::int64_t kSparseMlaMinHeads = 16, kIndexerBlock = 8192;

struct DsaShape {
  std::int64_t b, s, tokens, tokens_sp, heads, kernel_heads, latent, topk;
  bool sp_gather;  // sequence parallelism over tp > 1: the indexer and the key gather the sequence
};

DsaShape dsa_shape(const ActivationContext& c) {
  const auto& p = c.layout.config;
  const auto& m = c.model;
  const std::int64_t b = c.training.micro_batch, s = c.training.seq_len;  // cp is 1 (megatron_dsa_check)
  const std::int64_t tokens = b * s, heads = m.num_heads / p.tp;
  return {b,
          s,
          tokens,
          tokens / (p.sp ? p.tp : 1),
          heads,
          std::max(heads, kSparseMlaMinHeads),
          m.mla.kv_lora_rank + m.mla.qk_rope_head_dim,
          std::min(m.dsa.index_topk, s),  // tilelang_dsa.py: min(index_topk, k.size(0))
          p.sp && p.tp > 1};
}

// The lightning indexer with its loss (dsa.py DSAttention.forward: forward_before_topk under
// enable_grad when the indexer loss is on, on x and qr detached from the model; then
// run_fused_qk_topk_with_loss). Everything here is inside the core attention, so core_attn's
// checkpoint (absorbed_mla.py _checkpointed_attention_forward) drops it.
void indexer_terms(const ActivationContext& c, const DsaShape& d, Terms& t) {
  const auto& m = c.model;
  const auto& x = m.dsa;
  const std::uint16_t core = kRecomputeCoreAttn;
  if (d.sp_gather) {
    // DSAIndexer.forward_before_topk gathers x and qr over tp; the duplicated linears (wk and
    // weights_proj on x, wq_b on qr) save the gathered copies. Without the gather they are the
    // layer's norm output and the q norm's output, already counted.
    t.add("indexer.x_gathered (wk/weights_proj input)", Module::attention, elems({d.tokens, m.hidden}), t.a, core,
          "b*s x h (gathered over tp)");
    t.add("indexer.qr_gathered (wq_b input)", Module::attention, elems({d.tokens, m.mla.q_lora_rank}), t.a, core,
          "b*s x q_lora_rank (gathered over tp)");
  }
  // k_norm (a LayerNorm, backend.layer_norm(rms_norm=False)) saves its input, mean and 1/std. The
  // RoPE multiplies (apply_rotary_pos_emb, unfused: DSA asserts no RoPE fusion) save only the
  // cos/sin tables and the Hadamard rotation (rotate_activation, fast_hadamard_transform) nothing.
  t.add("indexer.k_norm_input", Module::attention, elems({d.tokens, x.index_head_dim}), t.a, core, "b*s x index_head_dim");
  t.add("indexer.k_norm_stats", Module::attention, elems({2, d.tokens}), DType::fp32, core, "b*s x 2 (mean, 1/std)");
  // ops/indexer.py IndexerFunction.forward saves index_q, index_k, the weights (as .float():
  // tilelang_dsa.py index_w) and its own int32 top-k (_select_topk_from_logits).
  t.add("indexer.q", Module::attention, elems({d.tokens, x.index_n_heads, x.index_head_dim}), t.a, core,
        "b*s x index_n_heads x index_head_dim");
  t.add("indexer.k", Module::attention, elems({d.tokens, x.index_head_dim}), t.a, core, "b*s x index_head_dim");
  t.add("indexer.weights", Module::attention, elems({d.tokens, x.index_n_heads}), DType::fp32, core, "b*s x index_n_heads");
  t.add("indexer.topk_indices", Module::attention, elems({d.tokens, d.topk}), DType::int32, core, "b*s x topk");
  // The top-k scores carry the loss's gradient: _sanitize_fused_topk_outputs masks them
  // (masked_fill saves its bool mask); over tp > 1 _canonicalize_topk_scores_for_tp_reduce sorts
  // them by key (dsa_masking.py sort_topk_by_index: gather saves the int64 order, masked_fill a
  // second mask); SparseIndexerKLLoss saves the fp32 gradient of the scores it computed.
  t.add("indexer.score_mask", Module::attention, elems({d.tokens, d.topk}), DType::int8, core, "b*s x topk (a bool each)");
  if (c.layout.config.tp > 1) {
    t.add("indexer.sort_order", Module::attention, elems({d.tokens, d.topk}), DType::int64, core, "b*s x topk");
    t.add("indexer.sorted_mask", Module::attention, elems({d.tokens, d.topk}), DType::int8, core, "b*s x topk (a bool each)");
  }
  t.add("indexer.kl_score_grad", Module::attention, elems({d.tokens, d.topk}), DType::fp32, core, "b*s x topk");
}

// What the forward holds without saving, in two phases that are not alive together (the larger
// is the layer's transient):
// - the indexer (fused_qk_topk_lighting_with_streaming_sparse_kl, per batch row): a contiguous
//   [heads, s, L] copy of the row's absorbed query (query_h, made whether or not the fallback target
//   uses it) while the indexer's fp32 logits of one block of at most 8192 queries against every key
//   are alive (ops/indexer.py indexer_fwd_interface, freed after torch.topk);
// - the sparse attention, when its output must be copied into [s, b, heads] order (b > 1, or
//   heads padded to 16): SparseMLA's output beside the copy.
void dsa_transient(const DsaShape& d, Terms& t, std::int64_t kv_lora_rank) {
  const Count query_row = elems({d.s, d.heads, d.latent}), logits = elems({std::min(d.s, kIndexerBlock), d.s});
  const bool copied = d.b > 1 || d.heads < kSparseMlaMinHeads;
  const Count out = copied ? elems({d.tokens, d.kernel_heads, kv_lora_rank}) : Count{};
  const std::uint64_t indexer_phase = bytes_of(query_row, t.a).value() + bytes_of(logits, DType::fp32).value();
  if (bytes_of(out, t.a).value() > indexer_phase) {
    t.transient("attn.sparse_mla_output (transient)", Module::attention, out, t.a, kRecomputeCoreAttn,
                "b*s x max(heads/tp, 16) x kv_lora_rank");
    return;
  }
  t.transient("indexer.query_row_copy (transient)", Module::attention, query_row, t.a, kRecomputeCoreAttn,
              "s x heads/tp x (kv_lora_rank + rope), one sequence");
  t.transient("indexer.logits (transient)", Module::attention, logits, DType::fp32, kRecomputeCoreAttn,
              "min(s, 8192) x s (one query block of one sequence)");
}

// The shapes the fused TileLang kernels take; others fall back to the PyTorch reference path,
// which moemem does not model (dense scores): ops/tilelang_dsa.py fused_sparse_mla_absorbed (query
// dim 576 and latent 512, heads per rank after padding to 16 a power of two, top-k a multiple of
// 64), fused_qk_topk_lighting_with_streaming_sparse_kl (ops/tilelang_indexer_bwd.py
// is_supported_indexer_bwd_head_count: at most 64 indexer heads, a multiple of 8) and
// _can_use_fused_sparse_indexer_kl (top-k a multiple of 256).
std::optional<InputError> megatron_dsa_kernel_check(const ModelSpec& m, const ParallelConfig& p, const TrainingConfig& t) {
  const std::string fallback = "(otherwise Megatron falls back to its PyTorch reference DSA, which moemem does not model)";
  if (m.mla.kv_lora_rank != 512 || m.mla.qk_rope_head_dim != 64) {
    return InputError("kv_lora_rank/qk_rope_head_dim", fmt::format("{}/{}", m.mla.kv_lora_rank, m.mla.qk_rope_head_dim),
                      fmt::format("512/64, the fused SparseMLA kernel's dimensions {}", fallback));
  }
  const std::int64_t heads = std::max(m.num_heads / p.tp, kSparseMlaMinHeads);
  if ((heads & (heads - 1)) != 0) {
    return InputError("--tp", std::to_string(p.tp),
                      fmt::format("a split leaving a power-of-two number of heads per rank (at least 16 after padding; "
                                  "{} heads) {}", m.num_heads, fallback));
  }
  if (m.dsa.index_n_heads > 64 || m.dsa.index_n_heads % 8 != 0) {
    return InputError("index_n_heads", std::to_string(m.dsa.index_n_heads),
                      fmt::format("at most 64 and a multiple of 8, the fused indexer backward's heads {}", fallback));
  }
  const std::int64_t topk = std::min(m.dsa.index_topk, t.seq_len);
  if (topk <= 0 || topk % 256 != 0) {
    const bool by_seq = t.seq_len < m.dsa.index_topk;
    return InputError(by_seq ? "--seq-len" : "index_topk", std::to_string(by_seq ? t.seq_len : m.dsa.index_topk),
                      fmt::format("top-k keys per query (min(index_topk, seq_len) = {}) a positive multiple of 256, "
                                  "the fused sparse KL kernel's tile {}", topk, fallback));
  }
  return std::nullopt;
}

}  // namespace

// One DSA layer's attention block after its input norm (megatron_attention counts the layer input
// and the norm output): absorbed MLA's projections, the sparse MLA and the indexer.
void megatron_dsa_attention(const ActivationContext& c, Terms& t) {
  const auto& m = c.model;
  const auto& l = m.mla;
  const auto d = dsa_shape(c);
  const std::uint16_t up = kRecomputeMlaUpProj, core = kRecomputeCoreAttn;
  const bool up_rerun = c.training.recompute == Recompute::selective && (c.training.recompute_modules & up) != 0;
  // get_query_key_value_tensors: the duplicated down-projections run on the sequence-parallel
  // tokens; q_layernorm and kv_layernorm (RMSNorm) save their inputs; the q norm's output is the
  // column-parallel q up-projection's input (and the indexer's qr, detached: the same storage).
  t.add("attn.q_compressed", Module::attention, elems({d.tokens_sp, l.q_lora_rank}), t.a, 0, "tokens x q_lora_rank");
  t.add("attn.q_compressed_norm (q_up input)", Module::attention, elems({d.tokens_sp, l.q_lora_rank}), t.a, 0,
        "tokens x q_lora_rank");
  t.add("attn.kv_compressed", Module::attention, elems({d.tokens_sp, l.kv_lora_rank}), t.a, 0, "tokens x kv_lora_rank");
  if (up_rerun) {
    // mla_up_proj (CheckpointWithoutOutput around qkv_up_proj_and_rope_apply) keeps the function's
    // inputs: the normed kv latent, gathered over tp, and the RoPE key part. Without it no autograd
    // node saves them (torch.cat saves nothing).
    t.add("attn.kv_compressed_norm (mla_up_proj input)", Module::attention, elems({d.tokens, l.kv_lora_rank}), t.a, 0,
          "b*s x kv_lora_rank");
    t.add("attn.k_pos_emb (mla_up_proj input)", Module::attention, elems({d.tokens, l.qk_rope_head_dim}), t.a, 0,
          "b*s x qk_rope_head_dim");
  }
  // The absorption einsum (q_no_pe x k_up_weight) saves q_no_pe, a view of the q up-projection's
  // output: its whole storage stays.
  t.add("attn.q_up_output (absorption input)", Module::attention,
        elems({d.tokens, d.heads, l.qk_nope_head_dim + l.qk_rope_head_dim}), t.a, up, "b*s x heads/tp x (nope + rope)");
  // SparseMLA.forward saves q and kv in [b, s] order (query.permute(1, 0, 2, 3).contiguous(): the
  // same storage when b is 1, which mla_up_proj's discard_output_and_register_recompute frees) and
  // does not save its output or LSE (recomputed in backward). core_attn's checkpoint keeps the
  // same absorbed query and key as its inputs.
  const std::uint16_t shared = d.b == 1 ? up : 0;
  t.add("attn.query (absorbed)", Module::attention, elems({d.tokens, d.heads, d.latent}), t.a,
        d.heads >= kSparseMlaMinHeads ? shared : std::uint16_t{0}, "b*s x heads/tp x (kv_lora_rank + rope)");
  if (d.heads < kSparseMlaMinHeads) {
    t.add("attn.query_head_padding", Module::attention, elems({d.tokens, d.kernel_heads - d.heads, d.latent}), t.a, core,
          "b*s x (16 - heads/tp) x (kv_lora_rank + rope)");
  }
  t.add("attn.key (latent)", Module::attention, elems({d.tokens, d.latent}), t.a, shared, "b*s x (kv_lora_rank + rope)");
  t.add("attn.topk_indices", Module::attention, elems({d.tokens, d.topk}), DType::int32, core, "b*s x topk");
  t.add("attn.valid_heads", Module::attention, elems({d.tokens, d.kernel_heads}), DType::int8, core,
        "b*s x max(heads/tp, 16) (a bool each)");
  // DSAttention consumes the V up-projection (_run_sparse_attention: einsum of the latent output
  // with up_v_weight, made contiguous in DSAttention.forward: a copy of the weight's V half),
  // saving both; o_proj (row-parallel) saves the projected output.
  t.add("attn.latent_context (v_up input)", Module::attention, elems({d.tokens, d.heads, l.kv_lora_rank}), t.a, core,
        "b*s x heads/tp x kv_lora_rank");
  t.add("attn.v_up_weight (contiguous copy)", Module::attention, elems({d.heads, l.v_head_dim, l.kv_lora_rank}), t.a, core,
        "heads/tp x v_head_dim x kv_lora_rank");
  t.add("attn.context (o_proj input)", Module::attention, elems({d.tokens, d.heads, l.v_head_dim}), t.a, 0,
        "b*s x heads/tp x v_head_dim");
  indexer_terms(c, d, t);
  dsa_transient(d, t, l.kv_lora_rank);
}

// What Megatron-Core refuses with DSA, and what moemem does not model of what it accepts.
std::optional<InputError> megatron_dsa_check(const ModelSpec& m, const Layout& layout, const TrainingConfig& t) {
  if (!m.has_indexer()) return std::nullopt;
  const auto& p = layout.config;
  const std::string why = "DeepSeek sparse attention (index_n_heads in the config)";
  if (p.cp > 1) {
    // transformer_config.py __post_init__: DSA's context parallelism is cp_comm_type allgather only,
    // which moemem's ring (p2p) model of context parallelism does not describe.
    return InputError("--cp", std::to_string(p.cp), fmt::format("1 with {}: Megatron runs DSA's context parallelism as an "
                                                                "all-gather of keys, which moemem does not model", why));
  }
  if (t.attention && *t.attention != AttentionKernel::flash) {
    return InputError("--attention", std::string(name_of(*t.attention)),
                      fmt::format("flash with {}: the unfused backend runs Megatron's PyTorch reference DSA (dense fp32 "
                                  "scores), which moemem does not model", why));
  }
  if (t.fp8 != Fp8Recipe::none || t.attn_out_e5m6) {
    return InputError("--fp8", std::string(name_of(t.fp8)),
                      fmt::format("none with {}: the fused DSA kernels take bf16 and absorbed MLA refuses FP8 with "
                                  "mla_up_proj; FP8 caching in DSA layers is not modelled", why));
  }
  if (t.finetune == Finetune::lora) {
    return InputError("--finetune", "lora", fmt::format("full training with {}: absorbed MLA reads the kv up-projection's "
                                                        "weight directly (_get_kv_up_weights), bypassing adapters", why));
  }
  if (p.tp > 1 && !p.sp) {
    return InputError("--sp", "off", fmt::format("on when tp > 1 with {} (AbsorbedMLASelfAttention.forward asserts "
                                                 "sequence-parallel hidden states)", why));
  }
  return megatron_dsa_kernel_check(m, p, t);
}

}  // namespace moemem::profiles
