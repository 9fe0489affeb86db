#include "moemem/megatron_args.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "megatron_internal.hpp"
#include "moemem/errors.hpp"

namespace moemem {

namespace detail {

std::int64_t to_int(const std::string& text, const std::string& field) {
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    throw InputError(field, text, "an integer");
  }
  if (v < 0 || v > (std::int64_t{1} << 31)) throw InputError(field, text, "an integer from 0 to 2^31");
  return v;
}

const RawFlag* ScriptFlags::find(std::string_view flag) const {
  const auto it = values.find(flag);
  return it == values.end() ? nullptr : &it->second;
}

std::string ScriptFlags::field(std::string_view flag) const { return fmt::format("{}: {}", source, flag); }

std::optional<std::int64_t> ScriptFlags::get_int(std::string_view flag) const {
  const RawFlag* r = find(flag);
  if (r == nullptr) return std::nullopt;
  return to_int(r->value, field(flag));
}

}  // namespace detail

using detail::to_int;

namespace {

using detail::RawFlag;
using detail::ScriptFlags;

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Megatron flag -> moemem flag, for flags with one value (the moemem flag names the setting in
// error messages and in MegatronSettings::repeated).
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
    {"--hidden-dropout", "--hidden-dropout"},
    {"--attention-dropout", "--attention-dropout"},
};

// Switches understood: those that are settings (kSwitchSettings) and those that shape the model
// or change nothing moemem models.
const std::set<std::string, std::less<>> kSwitches = {
    "--sequence-parallel", "--use-distributed-optimizer", "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split", "--bf16", "--use-precision-aware-optimizer", "--use-flash-attn", "--swiglu",
    "--disable-bias-linear", "--multi-latent-attention", "--group-query-attention",
    "--untie-embeddings-and-output-weights", "--moe-router-enable-expert-bias", "--qk-layernorm", "--add-qkv-bias",
    "--moe-grouped-gemm", "--moe-enable-deepep", "--moe-shared-expert-overlap",
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

namespace {

bool is_flag(const std::string& w) { return w.size() > 2 && w.rfind("--", 0) == 0; }

// The 1-based line on which each of the first `count` words of split_shell_words(text) starts.
// split_shell_words stays the one tokenizer: the text up to the end of a line splits into the
// first words of the whole text (a word still open in quotes there counts from its first line),
// so a word's line is the first whose prefix has more words than the word's index. Each line's
// prefix is split at most once.
std::vector<std::int64_t> word_lines(std::string_view text, std::size_t count) {
  std::vector<std::size_t> ends;  // offset past each line
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') ends.push_back(i + 1);
  }
  if (ends.empty() || ends.back() != text.size()) ends.push_back(text.size());
  std::map<std::size_t, std::size_t> words_through;  // line index -> words up to its end
  const auto through = [&](std::size_t line) {
    const auto [it, fresh] = words_through.try_emplace(line, 0);
    if (fresh) it->second = split_shell_words(text.substr(0, ends[line])).size();
    return it->second;
  };
  std::vector<std::int64_t> lines;
  std::size_t lo = 0;
  for (std::size_t w = 0; w < count; ++w) {
    std::size_t hi = ends.size() - 1;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (through(mid) > w) hi = mid;
      else lo = mid + 1;
    }
    lines.push_back(static_cast<std::int64_t>(lo) + 1);
  }
  return lines;
}

struct Words {
  const std::vector<std::string>& words;
  std::vector<std::int64_t> lines;
  [[nodiscard]] bool is_value(std::size_t i) const {
    return i < words.size() && !is_flag(words[i]) && words[i] != ")";
  }
};

// The value after the flag at i (i moves onto it), with where the flag was given.
RawFlag take_value(const Words& w, std::size_t& i, const ScriptFlags& f) {
  const std::size_t at = i;
  if (!w.is_value(i + 1)) throw InputError(f.field(w.words[at]), "missing", "a value after the flag");
  ++i;
  return RawFlag{w.words[i], Provenance{w.lines[at], w.words[at] + " " + w.words[i]}};
}

// --recompute-modules takes one or more names; several of them add up.
void take_modules(const Words& w, std::size_t& i, ScriptFlags& f) {
  const std::size_t at = i;
  std::string text = w.words[at];
  while (w.is_value(i + 1)) {
    f.recompute_modules.push_back(w.words[++i]);
    text += " " + w.words[i];
  }
  if (f.recompute_modules.empty()) throw InputError(f.field(w.words[at]), "missing", "one or more module names");
  if (!f.recompute_modules_from) f.recompute_modules_from = Provenance{w.lines[at], text};
}

// A flag not understood, with the values that follow it, as the notes show it.
std::string take_unknown(const Words& w, std::size_t& i) {
  std::string shown = w.words[i];
  while (w.is_value(i + 1)) shown += " " + w.words[++i];
  return shown;
}

// Every flag in the words, by kind; refuses flags that change memory unmodelled and flags
// missing their value.
ScriptFlags scan(const Words& w, const std::string& source) {
  ScriptFlags f;
  f.source = source;
  for (std::size_t i = 0; i < w.words.size(); ++i) {
    const std::string& flag = w.words[i];
    if (!is_flag(flag)) continue;
    if (const auto u = kUnsupported.find(flag); u != kUnsupported.end()) {
      throw InputError(f.field(flag), w.is_value(i + 1) ? w.words[i + 1] : "on",
                       fmt::format("a launch without it: {} changes memory and is not modelled yet", u->second));
    }
    if (const auto v = kValueFlags.find(flag); v != kValueFlags.end()) {
      f.values[flag] = take_value(w, i, f);
      ++f.counts[v->second];
    } else if (kSwitches.contains(flag)) {
      f.switches.try_emplace(flag, Provenance{w.lines[i], flag});
    } else if (flag == "--recompute-modules") {
      take_modules(w, i, f);
    } else if (kArchValueFlags.contains(flag)) {
      f.values[flag] = take_value(w, i, f);
    } else if (flag == "--fp16") {
      f.fp16 = Provenance{w.lines[i], flag};
      ++f.counts["--params-dtype"];
    } else {
      f.ignored.push_back(take_unknown(w, i));
    }
  }
  return f;
}

// --attention-backend: unfused and local keep the score matrices (eager), the others do not.
void read_attention(const ScriptFlags& f, MegatronSettings& s) {
  const RawFlag* b = f.find("--attention-backend");
  if (b == nullptr) return;
  const std::string& v = b->value;
  if (v == "unfused" || v == "local") s.attention = FromScript<AttentionKernel>{AttentionKernel::eager, b->from};
  else if (v == "flash" || v == "fused" || v == "auto") s.attention = FromScript<AttentionKernel>{AttentionKernel::flash, b->from};
  else throw InputError(f.field("--attention-backend"), v, "flash, fused, unfused, local or auto");
}

// DeepEP is the flex dispatcher with --moe-enable-deepep; the others keep no resident buffer.
void read_dispatcher(const ScriptFlags& f, MegatronSettings& s) {
  const RawFlag* d = f.find("--moe-token-dispatcher-type");
  if (d == nullptr) return;
  if (d->value == "flex" && f.switches.contains("--moe-enable-deepep")) {
    s.dispatcher = FromScript<Dispatcher>{Dispatcher::deepep, d->from};
  } else if (d->value != "alltoall" && d->value != "allgather" && d->value != "flex") {
    throw InputError(f.field("--moe-token-dispatcher-type"), d->value, "alltoall, allgather or flex");
  }
}

// torchrun's --nproc-per-node (or --nproc_per_node) x --nnodes.
void read_world_size(const ScriptFlags& f, MegatronSettings& s) {
  const RawFlag* nproc = f.find("--nproc-per-node");
  if (nproc == nullptr) nproc = f.find("--nproc_per_node");
  if (nproc == nullptr) return;
  const std::int64_t per_node = to_int(nproc->value, f.field("--nproc-per-node"));
  const RawFlag* nodes = f.find("--nnodes");
  const std::int64_t n = nodes != nullptr ? std::max<std::int64_t>(1, to_int(nodes->value, f.field("--nnodes"))) : 1;
  s.world_size = FromScript<std::int64_t>{per_node * n, nproc->from};
}

// Megatron: vpp = layers / (pp x layers per virtual stage).
Setting<std::int64_t> vpp_from_layers(const ScriptFlags& f) {
  const RawFlag* per = f.find("--num-layers-per-virtual-pipeline-stage");
  if (per == nullptr) return std::nullopt;
  const std::int64_t per_stage = to_int(per->value, f.field("--num-layers-per-virtual-pipeline-stage"));
  const RawFlag* pp_flag = f.find("--pipeline-model-parallel-size");
  const std::int64_t pp = pp_flag != nullptr ? to_int(pp_flag->value, f.field("--pipeline-model-parallel-size")) : 1;
  const auto layers = f.get_int("--num-layers");
  if (!layers || per_stage < 1 || pp < 1 || *layers % (pp * per_stage) != 0) {
    throw InputError(f.field("--num-layers-per-virtual-pipeline-stage"), std::to_string(per_stage),
                     "a count that divides --num-layers / --pipeline-model-parallel-size (and --num-layers given)");
  }
  return FromScript<std::int64_t>{*layers / (pp * per_stage), per->from};
}

// Values are read as moemem reads its own flags, with the same errors, naming the moemem flag.
std::int64_t flag_int(const std::string& text, const std::string& field) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ptr != end || ec == std::errc::invalid_argument) throw InputError(field, text, "an integer");
  if (ec == std::errc::result_out_of_range) throw InputError(field, text, "an integer that fits in 64 bits");
  return v;
}

double flag_number(const std::string& text, const std::string& field) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) {
    throw InputError(field, text, "a number");
  }
  return v;
}

// The typed value of a flag with one value, if given; `parse(text, moemem flag)`.
template <class T, class Parse>
Setting<T> typed(const ScriptFlags& f, const char* flag, Parse&& parse) {
  const RawFlag* r = f.find(flag);
  if (r == nullptr) return std::nullopt;
  return FromScript<T>{parse(r->value, kValueFlags.find(flag)->second), r->from};
}

using M = MegatronSettings;

// In the order moemem reads its own flags, so that the first bad value is the one named.
const std::pair<const char*, Setting<std::int64_t> M::*> kIntSettings[] = {
    {"--mtp-num-layers", &M::mtp},
    {"--tensor-model-parallel-size", &M::tp},
    {"--pipeline-model-parallel-size", &M::pp},
    {"--context-parallel-size", &M::cp},
    {"--expert-model-parallel-size", &M::ep},
    {"--expert-tensor-parallel-size", &M::etp},
    {"--num-virtual-stages-per-pipeline-rank", &M::vpp},
    {"--decoder-first-pipeline-num-layers", &M::first_stage_layers},
    {"--decoder-last-pipeline-num-layers", &M::last_stage_layers},
    {"--micro-batch-size", &M::micro_batch},
    {"--seq-length", &M::seq_len},
    {"--recompute-num-layers", &M::recompute_num_layers},
    {"--global-batch-size", &M::global_batch},
    {"--make-vocab-size-divisible-by", &M::vocab_multiple},
};

const std::pair<const char*, Setting<DType> M::*> kDTypeSettings[] = {
    {"--main-grads-dtype", &M::main_grads_dtype},
    {"--main-params-dtype", &M::main_params_dtype},
    {"--exp-avg-dtype", &M::exp_avg_dtype},
    {"--exp-avg-sq-dtype", &M::exp_avg_sq_dtype},
};

const std::pair<const char*, Setting<bool> M::*> kSwitchSettings[] = {
    {"--sequence-parallel", &M::sp},
    {"--use-distributed-optimizer", &M::distributed_optimizer},
    {"--account-for-embedding-in-pipeline-split", &M::account_for_embedding},
    {"--account-for-loss-in-pipeline-split", &M::account_for_loss},
    {"--moe-shared-expert-overlap", &M::shared_expert_overlap},
};

// FP8: --fp8-format (e4m3 or hybrid) turns it on, --fp8-recipe picks the scaling (Megatron's
// default: delayed).
Setting<Fp8Recipe> read_fp8(const ScriptFlags& f) {
  const RawFlag* format = f.find("--fp8-format");
  if (format == nullptr) return std::nullopt;
  const RawFlag* recipe = f.find("--fp8-recipe");
  if (recipe == nullptr) return FromScript<Fp8Recipe>{parse_fp8_recipe("delayed"), format->from};
  return FromScript<Fp8Recipe>{parse_fp8_recipe(recipe->value), recipe->from};
}

Setting<std::uint16_t> read_recompute_modules(const ScriptFlags& f) {
  if (!f.recompute_modules_from) return std::nullopt;
  std::string joined;
  for (const auto& name : f.recompute_modules) {
    if (!joined.empty()) joined += ',';
    joined += name;
  }
  return FromScript<std::uint16_t>{parse_recompute_modules(joined, "--recompute-modules"), *f.recompute_modules_from};
}

// The settings with their typed values, in the order moemem reads its own flags.
void read_settings(const ScriptFlags& f, MegatronSettings& s) {
  for (const auto& [flag, member] : kIntSettings) s.*member = typed<std::int64_t>(f, flag, flag_int);
  for (const auto& [flag, member] : kSwitchSettings) {
    if (const auto it = f.switches.find(flag); it != f.switches.end()) s.*member = FromScript<bool>{true, it->second};
  }
  s.pipeline_layout = typed<std::string>(f, "--pipeline-model-parallel-layout",
                                         [](const std::string& v, const std::string&) { return v; });
  s.fp8 = read_fp8(f);
  s.moe_capacity_factor = typed<double>(f, "--moe-expert-capacity-factor", flag_number);
  s.hidden_dropout = typed<double>(f, "--hidden-dropout", flag_number);
  s.attention_dropout = typed<double>(f, "--attention-dropout", flag_number);
  s.recompute = typed<Recompute>(f, "--recompute-granularity",
                                 [](const std::string& v, const std::string& field) { return parse_recompute(v, field); });
  s.recompute_modules = read_recompute_modules(f);
  s.recompute_method = typed<RecomputeMethod>(
      f, "--recompute-method", [](const std::string& v, const std::string& field) { return parse_recompute_method(v, field); });
  if (f.fp16) s.params_dtype = FromScript<DType>{DType::fp16, *f.fp16};
  for (const auto& [flag, member] : kDTypeSettings) {
    s.*member = typed<DType>(f, flag, [](const std::string& v, const std::string& field) { return parse_dtype(v, field); });
  }
}

}  // namespace

MegatronSettings parse_megatron_args(std::string_view text, const std::string& source) {
  const auto words = split_shell_words(text);
  const ScriptFlags f = scan(Words{words, word_lines(text, words.size())}, source);
  MegatronSettings s;
  read_attention(f, s);
  read_dispatcher(f, s);
  read_world_size(f, s);
  if (f.has("--num-layers") || f.has("--hidden-size")) s.model = detail::megatron_model(f);
  const Setting<std::int64_t> vpp = vpp_from_layers(f);
  read_settings(f, s);
  auto counts = f.counts;
  if (vpp) {
    s.vpp = vpp;  // a second vpp when --num-virtual-stages-per-pipeline-rank gives one too
    ++counts["--vpp"];
  }
  for (const auto& [flag, n] : counts) {
    if (n > 1) s.repeated[flag] = n;
  }
  s.ignored = f.ignored;
  return s;
}

}  // namespace moemem
