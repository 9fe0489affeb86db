// A Megatron script's model against the model named by --model, and the vocabularies of the
// tokenizers launch scripts name.
#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include <fmt/format.h>

#include "moemem/megatron_args.hpp"

namespace moemem {

namespace {

struct Tokenizer {
  std::string_view prefix;  // of the lower-cased name
  std::int64_t vocab;
};

// vocab_size of each model's Hugging Face config.json (data/models/, shared/models/), which is
// the embedding's row count (the tokenizer padded as its checkpoint is); ModelZoo recipes pad
// Megatron's vocabulary to the same size with --make-vocab-size-divisible-by (DeepSeek-V3 3232 x 40,
// Qwen 1187 x 128, Kimi-K2 1280 x 128).
constexpr std::array kTokenizers = {
    Tokenizer{"deepseek-v3", 129280},      // deepseek-ai/DeepSeek-V3
    Tokenizer{"deepseek-v2", 102400},      // deepseek-ai/DeepSeek-V2, DeepSeek-V2-Lite
    Tokenizer{"qwen3", 151936},            // Qwen/Qwen3-8B, Qwen3-30B-A3B, Qwen3-235B-A22B; also
                                           // Pai-Megatron-Patch's Qwen3Tokenizer with --extra-vocab-size 293
    Tokenizer{"qwen2-57b-a14b", 151936},   // Qwen/Qwen2-57B-A14B
    Tokenizer{"qwen2-7b", 152064},         // Qwen/Qwen2-7B
    Tokenizer{"llama-3", 128256},          // meta-llama/Llama-3.1-8B, -70B, -405B
    Tokenizer{"meta-llama-3", 128256},     // the same, as Meta-Llama-3.1-*
    Tokenizer{"mixtral-8x", 32000},        // mistralai/Mixtral-8x7B-v0.1, Mixtral-8x22B-v0.1
    Tokenizer{"mistral-7b", 32000},        // mistralai/Mistral-7B-v0.1
    Tokenizer{"llama2tokenizer", 32000},   // Llama 2's SentencePiece model, which Mixtral shares
    Tokenizer{"moonlight", 163840},        // moonshotai/Moonlight-16B-A3B-Instruct
    Tokenizer{"kimi-k2", 163840},          // Kimi-K2 shares Moonlight's tokenizer (ModelZoo pads to 1280 x 128)
};

template <class T>
std::optional<InputError> differ(const char* flag, const T& script, const T& named, const std::string& model) {
  if (script == named) return std::nullopt;
  return InputError(fmt::format("--megatron-args {}", flag), fmt::format("{}", script),
                    fmt::format("{} as in --model {}", named, model));
}

std::string freq_text(const ModelSpec& m) {
  std::string s;
  for (const LayerKind k : m.layer_kinds) s += k == LayerKind::moe ? '1' : '0';
  return "[" + s + "]";
}

std::optional<InputError> differ_attention(const ModelSpec& s, const ModelSpec& n) {
  const auto on = [](bool b) { return std::string(b ? "on" : "off"); };
  if (auto e = differ("--multi-latent-attention", on(s.attention == AttentionKind::mla), on(n.attention == AttentionKind::mla), n.name)) return e;
  if (s.attention == AttentionKind::mla) {
    if (auto e = differ("--q-lora-rank", s.mla.q_lora_rank, n.mla.q_lora_rank, n.name)) return e;
    if (auto e = differ("--kv-lora-rank", s.mla.kv_lora_rank, n.mla.kv_lora_rank, n.name)) return e;
    if (auto e = differ("--qk-head-dim", s.mla.qk_nope_head_dim, n.mla.qk_nope_head_dim, n.name)) return e;
    if (auto e = differ("--qk-pos-emb-head-dim", s.mla.qk_rope_head_dim, n.mla.qk_rope_head_dim, n.name)) return e;
    return differ("--v-head-dim", s.mla.v_head_dim, n.mla.v_head_dim, n.name);
  }
  if (auto e = differ("--num-query-groups", s.num_kv_heads, n.num_kv_heads, n.name)) return e;
  if (auto e = differ("--kv-channels", s.head_dim, n.head_dim, n.name)) return e;
  if (auto e = differ("--add-qkv-bias", on(s.qkv_bias), on(n.qkv_bias), n.name)) return e;
  if (auto e = differ("--disable-bias-linear (attention output)", on(!s.o_bias), on(!n.o_bias), n.name)) return e;
  return differ("--qk-layernorm", on(s.qk_norm), on(n.qk_norm), n.name);
}

std::optional<InputError> differ_mlp(const ModelSpec& s, const ModelSpec& n) {
  const auto on = [](bool b) { return std::string(b ? "on" : "off"); };
  if (auto e = differ("--num-experts", s.moe.num_routed_experts, n.moe.num_routed_experts, n.name)) return e;
  if (auto e = differ("--moe-layer-freq", freq_text(s), freq_text(n), n.name)) return e;
  const bool dense = std::find(s.layer_kinds.begin(), s.layer_kinds.end(), LayerKind::dense) != s.layer_kinds.end();
  if (dense) {
    if (auto e = differ("--ffn-hidden-size", s.dense_ffn, n.dense_ffn, n.name)) return e;
    if (auto e = differ("--disable-bias-linear (MLP)", on(!s.mlp_bias), on(!n.mlp_bias), n.name)) return e;
  }
  if (auto e = differ("--swiglu", on(s.gated_mlp), on(n.gated_mlp), n.name)) return e;
  if (!s.is_moe()) return std::nullopt;
  if (auto e = differ("--moe-router-topk", s.moe.top_k, n.moe.top_k, n.name)) return e;
  if (auto e = differ("--moe-ffn-hidden-size", s.moe.expert_ffn, n.moe.expert_ffn, n.name)) return e;
  if (auto e = differ("--moe-shared-expert-intermediate-size", s.moe.shared_ffn, n.moe.shared_ffn, n.name)) return e;
  return differ("--moe-router-enable-expert-bias", on(s.moe.router_bias), on(n.moe.router_bias), n.name);
}

}  // namespace

std::optional<std::int64_t> known_tokenizer_vocab(std::string_view name) {
  std::string lower;
  for (const char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& t : kTokenizers) {
    if (lower.compare(0, t.prefix.size(), t.prefix) == 0) return t.vocab;
  }
  return std::nullopt;
}

std::optional<InputError> model_disagreement(const ModelSpec& s, const ModelSpec& n) {
  const auto on = [](bool b) { return std::string(b ? "on" : "off"); };
  if (auto e = differ("--num-layers", s.num_layers, n.num_layers, n.name)) return e;
  if (auto e = differ("--hidden-size", s.hidden, n.hidden, n.name)) return e;
  if (auto e = differ("--num-attention-heads", s.num_heads, n.num_heads, n.name)) return e;
  if (auto e = differ_attention(s, n)) return e;
  if (auto e = differ_mlp(s, n)) return e;
  if (s.vocab != 0) {
    if (auto e = differ("--vocab-size", s.vocab, n.vocab, n.name)) return e;
  }
  if (auto e = differ("--untie-embeddings-and-output-weights", on(!s.tie_embeddings), on(!n.tie_embeddings), n.name)) {
    return e;
  }
  if (auto e = differ("--normalization", std::string(s.norm_bias ? "LayerNorm" : "RMSNorm"),
                      std::string(n.norm_bias ? "LayerNorm" : "RMSNorm"), n.name)) {
    return e;
  }
  return differ("--position-embedding-type", std::string(s.learned_positions > 0 ? "learned_absolute" : "rope"),
                std::string(n.learned_positions > 0 ? "learned_absolute" : "rope"), n.name);
}

}  // namespace moemem
