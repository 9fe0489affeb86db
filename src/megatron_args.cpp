#include "moemem/megatron_args.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"

namespace moemem {

namespace {

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::int64_t to_int(const std::string& text, const std::string& field) {
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    throw InputError(field, text, "an integer");
  }
  if (v < 0 || v > (std::int64_t{1} << 31)) throw InputError(field, text, "an integer from 0 to 2^31");
  return v;
}

// Megatron flag -> moemem flag, for flags with one value.
const std::map<std::string, std::string, std::less<>> kValueFlags = {
    {"--tensor-model-parallel-size", "--tp"},
    {"--pipeline-model-parallel-size", "--pp"},
    {"--context-parallel-size", "--cp"},
    {"--expert-model-parallel-size", "--ep"},
    {"--expert-tensor-parallel-size", "--etp"},
    {"--num-virtual-stages-per-pipeline-rank", "--vpp"},
    {"--micro-batch-size", "--micro-batch"},
    {"--global-batch-size", "--global-batch"},
    {"--seq-length", "--seq-len"},
    {"--recompute-granularity", "--recompute"},
    {"--recompute-method", "--recompute-method"},
    {"--recompute-num-layers", "--recompute-num-layers"},
    {"--pipeline-model-parallel-layout", "--pipeline-model-parallel-layout"},
    {"--decoder-first-pipeline-num-layers", "--decoder-first-pipeline-num-layers"},
    {"--decoder-last-pipeline-num-layers", "--decoder-last-pipeline-num-layers"},
    {"--mtp-num-layers", "--mtp"},
    {"--main-grads-dtype", "--main-grads-dtype"},
    {"--main-params-dtype", "--main-params-dtype"},
    {"--exp-avg-dtype", "--exp-avg-dtype"},
    {"--exp-avg-sq-dtype", "--exp-avg-sq-dtype"},
    {"--make-vocab-size-divisible-by", "--make-vocab-size-divisible-by"},
    {"--moe-expert-capacity-factor", "--moe-capacity-factor"},
};

// Megatron switch -> moemem switch ("" : accepted, nothing to pass on).
const std::map<std::string, std::string, std::less<>> kSwitches = {
    {"--sequence-parallel", "--sp"},
    {"--use-distributed-optimizer", "--distributed-optimizer"},
    {"--account-for-embedding-in-pipeline-split", "--account-for-embedding-in-pipeline-split"},
    {"--account-for-loss-in-pipeline-split", "--account-for-loss-in-pipeline-split"},
    {"--bf16", ""},
    {"--use-precision-aware-optimizer", ""},
    {"--use-flash-attn", ""},
    {"--swiglu", ""},
    {"--disable-bias-linear", ""},
    {"--multi-latent-attention", ""},
    {"--group-query-attention", ""},
    {"--untie-embeddings-and-output-weights", ""},
    {"--moe-router-enable-expert-bias", ""},
    {"--qk-layernorm", ""},
    {"--add-qkv-bias", ""},
    {"--moe-grouped-gemm", ""},
    {"--moe-enable-deepep", ""},
};

// Architecture flags with one integer or text value.
const std::set<std::string, std::less<>> kArchValueFlags = {
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups",
    "--kv-channels", "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
    "--qk-pos-emb-head-dim", "--v-head-dim", "--vocab-size", "--num-layers-per-virtual-pipeline-stage",
    "--normalization", "--attention-backend", "--nnodes", "--nproc-per-node", "--nproc_per_node", "--fp8-format",
    "--fp8-recipe", "--moe-token-dispatcher-type", "--position-embedding-type", "--max-position-embeddings"};

// Flags that change memory in ways moemem does not model yet.
const std::map<std::string, std::string, std::less<>> kUnsupported = {
    {"--fp4-format", "FP4 training"},
    {"--cpu-offloading", "activation offloading to CPU"},
    {"--use-torch-fsdp2", "FSDP2 sharding (a torchtitan-style profile)"},
    {"--use-megatron-fsdp", "Megatron FSDP sharding"},
    {"--use-custom-fsdp", "Megatron FSDP sharding"},
};

std::string substitute(const std::string& word, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (word[i] != '$' || i + 1 >= word.size()) {
      out += word[i];
      continue;
    }
    std::string name, fallback;
    bool has_fallback = false;
    if (word[i + 1] == '{') {
      const std::size_t close = word.find('}', i + 2);
      if (close == std::string::npos) {
        out += word[i];
        continue;
      }
      std::string inner = word.substr(i + 2, close - i - 2);
      if (const std::size_t d = inner.find(":-"); d != std::string::npos) {
        fallback = inner.substr(d + 2);
        has_fallback = true;
        inner = inner.substr(0, d);
      }
      name = inner;
      i = close;
    } else {
      std::size_t j = i + 1;
      while (j < word.size() && is_name_char(word[j])) ++j;
      if (j == i + 1) {
        out += word[i];
        continue;
      }
      name = word.substr(i + 1, j - i - 1);
      i = j - 1;
    }
    const auto it = vars.find(name);
    out += it != vars.end() ? it->second : has_fallback ? fallback : std::string();
  }
  return out;
}

}  // namespace

std::vector<std::string> split_shell_words(std::string_view text) {
  // First pass: raw words, with quotes removed and continuations joined; lines kept apart so
  // that VAR=value assignments can be recognised and substituted into later lines.
  std::map<std::string, std::string> vars;
  std::vector<std::string> words;
  std::vector<std::string> line_words;
  std::string cur;
  bool in_word = false;
  auto end_word = [&] {
    if (in_word) line_words.push_back(cur);
    cur.clear();
    in_word = false;
  };
  auto end_line = [&] {
    end_word();
    for (auto& w : line_words) {
      std::string v = substitute(w, vars);
      std::string assign = v.rfind("export ", 0) == 0 ? v.substr(7) : v;
      const std::size_t eq = assign.find('=');
      if (eq != std::string::npos && eq > 0 && assign.rfind("--", 0) != 0 &&
          std::all_of(assign.begin(), assign.begin() + static_cast<std::ptrdiff_t>(eq), is_name_char) &&
          !std::isdigit(static_cast<unsigned char>(assign[0]))) {
        vars[assign.substr(0, eq)] = assign.substr(eq + 1);
      }
      // "--flag=value" is the same as "--flag value".
      if (v.rfind("--", 0) == 0 && v.find('=') != std::string::npos) {
        const std::size_t e = v.find('=');
        words.push_back(v.substr(0, e));
        words.push_back(v.substr(e + 1));
      } else {
        words.push_back(std::move(v));
      }
    }
    line_words.clear();
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      ++i;  // continuation
      end_word();
      continue;
    }
    if (c == '\n') {
      end_line();
      continue;
    }
    if (c == '#' && !in_word) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if (c == '\'' || c == '"') {
      const std::size_t close = text.find(c, i + 1);
      const std::size_t stop = close == std::string_view::npos ? text.size() : close;
      cur.append(text.substr(i + 1, stop - i - 1));
      in_word = true;
      i = stop;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      end_word();
      continue;
    }
    cur += c;
    in_word = true;
  }
  end_line();
  return words;
}

std::vector<bool> parse_moe_layer_freq(std::string_view text, std::int64_t num_layers, const std::string& field) {
  std::string t;
  for (const char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  }
  if (!t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    const std::int64_t n = to_int(t, field);
    if (n < 1) throw InputError(field, t, "a positive integer or a list such as ([0]*3+[1]*58)");
    std::vector<bool> out;
    for (std::int64_t i = 0; i < num_layers; ++i) out.push_back(i % n == 0);
    return out;
  }
  while (t.size() >= 2 && t.front() == '(' && t.back() == ')') t = t.substr(1, t.size() - 2);
  std::vector<bool> out;
  std::size_t i = 0;
  auto fail = [&] { throw InputError(field, std::string(text), "an integer or a list such as ([0]*3+[1]*58)"); };
  while (i < t.size()) {
    if (t[i] != '[') fail();
    const std::size_t close = t.find(']', i);
    if (close == std::string::npos) fail();
    std::vector<bool> items;
    std::size_t j = i + 1;
    while (j < close) {
      std::size_t k = t.find(',', j);
      if (k == std::string::npos || k > close) k = close;
      const std::string item = t.substr(j, k - j);
      if (item != "0" && item != "1") fail();
      items.push_back(item == "1");
      j = k + 1;
    }
    i = close + 1;
    std::int64_t times = 1;
    if (i < t.size() && t[i] == '*') {
      std::size_t k = i + 1;
      while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) ++k;
      times = to_int(t.substr(i + 1, k - i - 1), field);
      i = k;
    }
    if (static_cast<std::int64_t>(out.size()) + times * static_cast<std::int64_t>(items.size()) > num_layers) fail();
    for (std::int64_t r = 0; r < times; ++r) out.insert(out.end(), items.begin(), items.end());
    if (i < t.size()) {
      if (t[i] != '+') fail();
      ++i;
    }
  }
  if (static_cast<std::int64_t>(out.size()) != num_layers) {
    throw InputError(field, std::string(text), fmt::format("one entry per layer ({} layers, got {})", num_layers, out.size()));
  }
  return out;
}

MegatronArgs parse_megatron_args(std::string_view text, const std::string& source) {
  const auto words = split_shell_words(text);
  MegatronArgs out;
  std::map<std::string, std::string, std::less<>> arch;
  std::set<std::string, std::less<>> switches;
  std::vector<std::string> recompute_modules;
  auto field = [&](const std::string& flag) { return fmt::format("{}: {}", source, flag); };
  auto is_flag = [](const std::string& w) { return w.size() > 2 && w.rfind("--", 0) == 0; };
  auto is_value = [&](std::size_t i) { return i < words.size() && !is_flag(words[i]) && words[i] != ")"; };

  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (!is_flag(w)) continue;
    if (const auto u = kUnsupported.find(w); u != kUnsupported.end()) {
      throw InputError(field(w), is_value(i + 1) ? words[i + 1] : "on",
                       fmt::format("a launch without it: {} changes memory and is not modelled yet", u->second));
    }
    if (const auto v = kValueFlags.find(w); v != kValueFlags.end()) {
      if (!is_value(i + 1)) throw InputError(field(w), "missing", "a value after the flag");
      out.flags.emplace_back(v->second, words[++i]);
    } else if (const auto s = kSwitches.find(w); s != kSwitches.end()) {
      switches.insert(w);
      if (!s->second.empty()) out.flags.emplace_back(s->second, "");
    } else if (w == "--recompute-modules") {
      while (is_value(i + 1)) recompute_modules.push_back(words[++i]);
      if (recompute_modules.empty()) throw InputError(field(w), "missing", "one or more module names");
    } else if (kArchValueFlags.contains(w)) {
      if (!is_value(i + 1)) throw InputError(field(w), "missing", "a value after the flag");
      arch[w] = words[++i];
    } else if (w == "--fp16") {
      out.flags.emplace_back("--params-dtype", "fp16");
    } else {
      std::string shown = w;
      while (is_value(i + 1)) shown += " " + words[++i];
      out.ignored.push_back(shown);
    }
  }
  if (!recompute_modules.empty()) {
    std::string joined;
    for (const auto& mname : recompute_modules) {
      if (!joined.empty()) joined += ',';
      joined += mname;
    }
    out.flags.emplace_back("--recompute-modules", joined);
  }
  if (const auto b = arch.find("--attention-backend"); b != arch.end()) {
    const std::string& v = b->second;
    if (v == "unfused" || v == "local") out.flags.emplace_back("--attention", "eager");
    else if (v == "flash" || v == "fused" || v == "auto") out.flags.emplace_back("--attention", "flash");
    else throw InputError(field("--attention-backend"), v, "flash, fused, unfused, local or auto");
  }
  // FP8: --fp8-format (e4m3 or hybrid) turns it on, --fp8-recipe picks the scaling (Megatron's
  // default: delayed).
  if (arch.contains("--fp8-format")) {
    const auto recipe = arch.find("--fp8-recipe");
    out.flags.emplace_back("--fp8", recipe == arch.end() ? "delayed" : recipe->second);
  }
  if (const auto d = arch.find("--moe-token-dispatcher-type"); d != arch.end()) {
    if (d->second == "flex" && switches.contains("--moe-enable-deepep")) out.flags.emplace_back("--moe-token-dispatcher", "deepep");
    else if (d->second != "alltoall" && d->second != "allgather" && d->second != "flex") {
      throw InputError(field("--moe-token-dispatcher-type"), d->second, "alltoall, allgather or flex");
    }
  }
  const auto nproc = arch.contains("--nproc-per-node") ? arch.find("--nproc-per-node") : arch.find("--nproc_per_node");
  if (nproc != arch.end()) {
    const auto nodes = arch.find("--nnodes");
    out.world_size = to_int(nproc->second, field("--nproc-per-node")) *
                     (nodes != arch.end() ? std::max<std::int64_t>(1, to_int(nodes->second, field("--nnodes"))) : 1);
  }

  // A model, when the script describes one.
  auto get = [&](const char* flag) -> std::optional<std::int64_t> {
    const auto it = arch.find(flag);
    if (it == arch.end()) return std::nullopt;
    return to_int(it->second, field(flag));
  };
  const bool has_model = arch.contains("--num-layers") || arch.contains("--hidden-size");
  if (has_model) {
    ModelSpec m;
    m.name = "megatron-args:" + source;
    m.model_type = "megatron";
    auto need = [&](const char* flag) {
      const auto v = get(flag);
      if (!v || *v < 1) throw InputError(field(flag), v ? std::to_string(*v) : "missing", "a positive integer");
      return *v;
    };
    m.num_layers = need("--num-layers");
    if (m.num_layers > (1 << 16)) throw InputError(field("--num-layers"), std::to_string(m.num_layers), "at most 65536");
    m.hidden = need("--hidden-size");
    m.num_heads = need("--num-attention-heads");
    if (!get("--vocab-size")) {
      throw InputError(field("--vocab-size"), "missing",
                       "the vocabulary size (Megatron reads it from the tokenizer: add --vocab-size N, or give --model)");
    }
    m.vocab = need("--vocab-size");
    m.dense_ffn = get("--ffn-hidden-size").value_or(4 * m.hidden);
    m.tie_embeddings = !switches.contains("--untie-embeddings-and-output-weights");
    // Megatron's defaults, unless the script says otherwise: GeLU MLP (no --swiglu), biases on every
    // linear layer (no --disable-bias-linear), LayerNorm, learned absolute position embeddings.
    m.gated_mlp = switches.contains("--swiglu");
    const bool biases = !switches.contains("--disable-bias-linear");
    const std::string norm = arch.contains("--normalization") ? arch.find("--normalization")->second : "LayerNorm";
    if (norm != "LayerNorm" && norm != "RMSNorm") throw InputError(field("--normalization"), norm, "LayerNorm or RMSNorm");
    m.norm_bias = norm == "LayerNorm";
    const std::string pos = arch.contains("--position-embedding-type") ? arch.find("--position-embedding-type")->second
                                                                       : "learned_absolute";
    if (pos == "learned_absolute") {
      std::int64_t rows = get("--max-position-embeddings").value_or(0);
      for (const auto& [flag, value] : out.flags) {
        if (flag == "--seq-len" && rows == 0) rows = to_int(value, field("--seq-length"));
      }
      if (rows <= 0) throw InputError(field("--max-position-embeddings"), "missing", "the learned position table's size");
      m.learned_positions = rows;
    } else if (pos != "rope" && pos != "none" && pos != "yarn") {
      throw InputError(field("--position-embedding-type"), pos, "learned_absolute, rope, yarn or none");
    }
    if (switches.contains("--multi-latent-attention")) {
      m.attention = AttentionKind::mla;
      m.num_kv_heads = m.num_heads;
      m.mla.q_lora_rank = get("--q-lora-rank").value_or(0);
      m.mla.kv_lora_rank = need("--kv-lora-rank");
      m.mla.qk_nope_head_dim = need("--qk-head-dim");
      m.mla.qk_rope_head_dim = need("--qk-pos-emb-head-dim");
      m.mla.v_head_dim = need("--v-head-dim");
    } else {
      m.attention = AttentionKind::gqa;
      m.naming = NamingStyle::llama;
      m.num_kv_heads = switches.contains("--group-query-attention") ? need("--num-query-groups") : m.num_heads;
      m.head_dim = get("--kv-channels").value_or(m.hidden / m.num_heads);
      m.qkv_bias = biases || switches.contains("--add-qkv-bias");
      m.o_bias = biases;
      m.qk_norm = switches.contains("--qk-layernorm");
    }
    m.mlp_bias = biases;
    if (biases && m.attention == AttentionKind::mla) {
      throw InputError(field("--disable-bias-linear"), "missing", "--disable-bias-linear with MLA (biased MLA is not modelled)");
    }
    m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::dense);
    if (const auto n = get("--num-experts"); n && *n > 0) {
      m.moe.num_routed_experts = *n;
      m.moe.top_k = need("--moe-router-topk");
      m.moe.expert_ffn = get("--moe-ffn-hidden-size").value_or(m.dense_ffn);
      m.moe.shared_ffn = get("--moe-shared-expert-intermediate-size").value_or(0);
      m.moe.num_shared_experts = m.moe.shared_ffn > 0 ? std::max<std::int64_t>(1, m.moe.shared_ffn / m.moe.expert_ffn) : 0;
      m.moe.router_bias = switches.contains("--moe-router-enable-expert-bias");
      const auto freq = arch.find("--moe-layer-freq");
      const auto moe_layers = freq == arch.end() ? std::vector<bool>(static_cast<std::size_t>(m.num_layers), true)
                                                 : parse_moe_layer_freq(freq->second, m.num_layers, field("--moe-layer-freq"));
      for (std::size_t i = 0; i < moe_layers.size(); ++i) {
        if (moe_layers[i]) m.layer_kinds[i] = LayerKind::moe;
      }
    }
    for (const auto& [flag, value] : out.flags) {
      if (flag == "--mtp") m.mtp_layers = to_int(value, field("--mtp-num-layers"));
    }
    validate_model(m);
    try {
      (void)build_inventory(m).total();
    } catch (const OverflowError&) {
      throw InputError(field("--hidden-size/--ffn-hidden-size/--num-experts"), "too large", "sizes whose products fit in 64 bits");
    }
    out.model = std::move(m);
  }
  if (const auto per_stage = get("--num-layers-per-virtual-pipeline-stage")) {
    // Megatron: vpp = layers / (pp x layers per virtual stage).
    std::int64_t pp = 1;
    for (const auto& [flag, value] : out.flags) {
      if (flag == "--pp") pp = to_int(value, field("--pipeline-model-parallel-size"));
    }
    const auto layers = get("--num-layers");
    if (!layers || *per_stage < 1 || pp < 1 || *layers % (pp * *per_stage) != 0) {
      throw InputError(field("--num-layers-per-virtual-pipeline-stage"), std::to_string(*per_stage),
                       "a count that divides --num-layers / --pipeline-model-parallel-size (and --num-layers given)");
    }
    out.flags.emplace_back("--vpp", std::to_string(*layers / (pp * *per_stage)));
  }
  return out;
}

}  // namespace moemem
