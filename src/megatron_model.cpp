// The model a Megatron script's architecture flags describe, with Megatron's defaults for what
// the script leaves out.
#include <algorithm>

#include <fmt/format.h>

#include "megatron_internal.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"

namespace moemem::detail {

namespace {

// A positive integer the model needs.
std::int64_t need(const ScriptFlags& f, const char* flag) {
  const auto v = f.get_int(flag);
  if (!v || *v < 1) throw InputError(f.field(flag), v ? std::to_string(*v) : "missing", "a positive integer");
  return *v;
}

// A positive integer flag, or Megatron's default when the script leaves it out.
std::int64_t given_or(const ScriptFlags& f, const char* flag, std::int64_t fallback) {
  return f.find(flag) == nullptr ? fallback : need(f, flag);
}

std::string text_or(const ScriptFlags& f, const char* flag, const char* fallback) {
  const RawFlag* r = f.find(flag);
  return r ? r->value : fallback;
}

// Learned absolute positions (Megatron's default) need a table of --max-position-embeddings
// rows (or --seq-length's); rope, yarn and none add no parameters.
void set_positions(const ScriptFlags& f, ModelSpec& m) {
  // Legacy spellings: --use-rotary-position-embeddings is rope (Megatron's validate_args sets
  // position_embedding_type from it), --no-position-embedding leaves the learned table out.
  const char* fallback = f.switches.contains("--use-rotary-position-embeddings") ? "rope"
                         : f.switches.contains("--no-position-embedding")       ? "none"
                                                                                 : "learned_absolute";
  const std::string pos = text_or(f, "--position-embedding-type", fallback);
  if (pos == "learned_absolute") {
    std::int64_t rows = f.get_int("--max-position-embeddings").value_or(0);
    if (const RawFlag* seq = f.find("--seq-length"); seq && rows == 0) rows = to_int(seq->value, f.field("--seq-length"));
    if (rows <= 0) throw InputError(f.field("--max-position-embeddings"), "missing", "the learned position table's size");
    m.learned_positions = rows;
  } else if (pos != "rope" && pos != "none" && pos != "yarn") {
    throw InputError(f.field("--position-embedding-type"), pos, "learned_absolute, rope, yarn or none");
  }
}

// MLA with its ranks and head sizes, or grouped-query attention (Megatron's default: one group
// per head, biased linear layers unless --disable-bias-linear).
// Pai-Megatron-Patch's DeepSeek models are MLA without --multi-latent-attention, and name the head
// sizes --qk-nope-head-dim and --qk-rope-head-dim.
const char* spelling(const ScriptFlags& f, const char* megatron, const char* pai) {
  return f.find(megatron) == nullptr && f.find(pai) != nullptr ? pai : megatron;
}

void set_attention(const ScriptFlags& f, bool biases, ModelSpec& m) {
  if (f.switches.contains("--multi-latent-attention") || f.find("--qk-rope-head-dim") != nullptr) {
    m.attention = AttentionKind::mla;
    m.num_kv_heads = m.num_heads;
    // arguments.py's defaults: --kv-lora-rank 32, --qk-head-dim 128, --qk-pos-emb-head-dim 64,
    // --v-head-dim 128, --q-lora-rank None (a plain q projection).
    m.mla.q_lora_rank = f.get_int("--q-lora-rank").value_or(0);
    m.mla.kv_lora_rank = given_or(f, "--kv-lora-rank", 32);
    m.mla.qk_nope_head_dim = given_or(f, spelling(f, "--qk-head-dim", "--qk-nope-head-dim"), 128);
    m.mla.qk_rope_head_dim = given_or(f, spelling(f, "--qk-pos-emb-head-dim", "--qk-rope-head-dim"), 64);
    m.mla.v_head_dim = given_or(f, "--v-head-dim", 128);
  } else {
    m.attention = AttentionKind::gqa;
    m.naming = NamingStyle::llama;
    // --num-query-groups defaults to 1 (TransformerConfig's argparse default) under --group-query-attention.
    m.num_kv_heads = f.switches.contains("--group-query-attention") ? given_or(f, "--num-query-groups", 1) : m.num_heads;
    m.head_dim = f.get_int("--kv-channels").value_or(m.hidden / m.num_heads);
    m.qkv_bias = biases || f.switches.contains("--add-qkv-bias");
    m.o_bias = biases;
    m.qk_norm = f.switches.contains("--qk-layernorm");
  }
  m.mlp_bias = biases;
  if (biases && m.attention == AttentionKind::mla) {
    throw InputError(f.field("--disable-bias-linear"), "missing", "--disable-bias-linear with MLA (biased MLA is not modelled)");
  }
}

// Routed (and shared) experts on the layers --moe-layer-freq names (default: every layer).
void set_moe(const ScriptFlags& f, ModelSpec& m) {
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::dense);
  const auto n = f.get_int("--num-experts");
  if (!n || *n <= 0) return;
  m.moe.num_routed_experts = *n;
  m.moe.top_k = given_or(f, "--moe-router-topk", 2);  // TransformerConfig.moe_router_topk = 2
  // Given sizes must be positive: a zero expert width would divide the shared-expert count below.
  m.moe.expert_ffn = f.find("--moe-ffn-hidden-size") != nullptr ? need(f, "--moe-ffn-hidden-size") : m.dense_ffn;
  m.moe.shared_ffn = f.find("--moe-shared-expert-intermediate-size") != nullptr
                         ? need(f, "--moe-shared-expert-intermediate-size")
                         : 0;
  if (m.moe.shared_ffn == 0 && f.switches.contains("--enable-shared-expert")) {  // Pai-Megatron-Patch
    m.moe.shared_ffn = need(f, "--num-shared-experts") * m.moe.expert_ffn;
  }
  if (m.moe.expert_ffn < 1) {  // from --ffn-hidden-size 0: a zero width would divide the count below
    throw InputError(f.field("--ffn-hidden-size"), std::to_string(m.moe.expert_ffn),
                     "a positive integer (the experts' width when --moe-ffn-hidden-size is not given)");
  }
  m.moe.num_shared_experts = m.moe.shared_ffn > 0 ? std::max<std::int64_t>(1, m.moe.shared_ffn / m.moe.expert_ffn) : 0;
  // SharedExpertMLP (moe/shared_experts.py) asserts add_bias_linear is off.
  if (m.moe.shared_ffn > 0 && !f.switches.contains("--disable-bias-linear")) {
    throw InputError(f.field("--disable-bias-linear"), "missing",
                     "--disable-bias-linear with shared experts (Megatron's SharedExpertMLP refuses biased linear layers)");
  }
  m.moe.router_bias = f.switches.contains("--moe-router-enable-expert-bias");
  const RawFlag* freq = f.find("--moe-layer-freq");
  const auto moe_layers = freq == nullptr ? std::vector<bool>(static_cast<std::size_t>(m.num_layers), true)
                                          : parse_moe_layer_freq(freq->value, m.num_layers, f.field("--moe-layer-freq"));
  for (std::size_t i = 0; i < moe_layers.size(); ++i) {
    if (moe_layers[i]) m.layer_kinds[i] = LayerKind::moe;
  }
}

// The vocabulary: --vocab-size, else the tokenizer's (a table of well-known ones); 0 when
// neither gives it, with the reason in `missing`.
std::int64_t read_vocab(const ScriptFlags& f, std::string& missing, std::vector<std::string>& notes) {
  if (f.find("--vocab-size") != nullptr) return need(f, "--vocab-size");
  // Where the tokenizer is named: --tokenizer-model; for Pai-Megatron-Patch's tokenizers
  // (--patch-tokenizer-type), the checkpoint --load names, whose tokenizer files they read;
  // then the tokenizer types.
  std::vector<const char*> flags = {"--tokenizer-model"};
  if (f.find("--patch-tokenizer-type") != nullptr) flags.push_back("--load");
  flags.insert(flags.end(), {"--patch-tokenizer-type", "--tokenizer-type"});
  std::string first;
  for (const char* flag : flags) {
    const RawFlag* r = f.find(flag);
    if (r == nullptr) continue;
    std::string name = r->value;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    if (const auto slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
    if (const auto v = known_tokenizer_vocab(name)) {
      notes.push_back(fmt::format("vocabulary {} from {} {} (its model's config.json; --vocab-size overrides it)", *v,
                                  flag, r->value));
      return *v;
    }
    if (first.empty()) first = fmt::format("{} {}", flag, r->value);
  }
  missing = first.empty() ? "the script gives neither --vocab-size nor a tokenizer"
                          : fmt::format("{} is not a tokenizer moemem knows", first);
  return 0;
}

}  // namespace

ModelSpec megatron_model(const ScriptFlags& f, std::string& vocab_missing, std::vector<std::string>& notes) {
  ModelSpec m;
  m.name = "megatron-args:" + f.source;
  m.model_type = "megatron";
  m.num_layers = need(f, "--num-layers");
  if (m.num_layers > (1 << 16)) throw InputError(f.field("--num-layers"), std::to_string(m.num_layers), "at most 65536");
  m.hidden = need(f, "--hidden-size");
  m.num_heads = need(f, "--num-attention-heads");
  const std::int64_t vocab = read_vocab(f, vocab_missing, notes);
  m.vocab = vocab > 0 ? vocab : 1;  // checked with a stand-in; 0 (unknown) once checked
  m.tie_embeddings = !f.switches.contains("--untie-embeddings-and-output-weights");
  // Megatron's defaults, unless the script says otherwise: GeLU MLP (no --swiglu), biases on every
  // linear layer (no --disable-bias-linear), LayerNorm, learned absolute position embeddings.
  // --quick-geglu is gated too (argument_utils.py core_transformer_config_from_args:
  // gated_linear_unit = True, activation quick_gelu).
  m.gated_mlp = f.switches.contains("--swiglu") || f.switches.contains("--quick-geglu");
  // validate_args: without --ffn-hidden-size, 4h, or under --swiglu int((4h * 2/3) / 64) * 64 (a
  // multiple of 64 near the GeLU MLP's parameters): floor(h / 24) * 64 in integers.
  // (the 2/3 default width is --swiglu's alone: validate_args leaves --quick-geglu at 4h)
  m.dense_ffn = f.get_int("--ffn-hidden-size").value_or(f.switches.contains("--swiglu") ? (m.hidden / 24) * 64 : 4 * m.hidden);
  const bool biases = !f.switches.contains("--disable-bias-linear");
  const std::string norm = text_or(f, "--normalization", "LayerNorm");
  if (norm != "LayerNorm" && norm != "RMSNorm") throw InputError(f.field("--normalization"), norm, "LayerNorm or RMSNorm");
  m.norm_bias = norm == "LayerNorm";
  set_positions(f, m);
  set_attention(f, biases, m);
  set_moe(f, m);
  if (const RawFlag* mtp = f.find("--mtp-num-layers")) m.mtp_layers = to_int(mtp->value, f.field("--mtp-num-layers"));
  validate_model(m);
  try {
    (void)build_inventory(m).total();
  } catch (const OverflowError&) {
    throw InputError(f.field("--hidden-size/--ffn-hidden-size/--num-experts"), "too large", "sizes whose products fit in 64 bits");
  }
  if (vocab == 0) m.vocab = 0;
  return m;
}

}  // namespace moemem::detail
