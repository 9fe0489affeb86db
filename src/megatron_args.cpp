#include "moemem/megatron_args.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "megatron_internal.hpp"
#include "shell_internal.hpp"
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
    {"--cpu-offloading-num-layers", "--cpu-offloading-num-layers"},
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
    {"--optimizer-offload-fraction", "--optimizer-offload-fraction"},
    {"--cuda-graph-impl", "--cuda-graph-impl"},
};

// Switches understood: those that are settings (kSwitchSettings) and those that shape the model
// or change nothing moemem models.
const std::set<std::string, std::less<>> kSwitches = {
    "--sequence-parallel", "--use-distributed-optimizer", "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split", "--bf16", "--use-precision-aware-optimizer", "--use-flash-attn", "--swiglu", "--quick-geglu",
    "--moe-layer-recompute",
    "--disable-bias-linear", "--multi-latent-attention", "--group-query-attention",
    "--untie-embeddings-and-output-weights", "--moe-router-enable-expert-bias", "--qk-layernorm", "--add-qkv-bias",
    "--moe-grouped-gemm", "--moe-enable-deepep", "--moe-shared-expert-overlap", "--recompute-activations",
    "--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute", "--tp-comm-overlap", "--no-rope-fusion",
    "--no-gradient-accumulation-fusion", "--no-create-attention-mask-in-dataloader",
    "--grad-reduce-in-bf16", "--cross-entropy-loss-fusion", "--enable-shared-expert", "--no-position-embedding",
    "--use-rotary-position-embeddings", "--optimizer-cpu-offload", "--enable-cuda-graph", "--external-cuda-graph",
    "--accumulate-allreduce-grads-in-fp32",
};

// Flags whose value may depend on the launch environment: the world size (then --dp is needed)
// and the tokenizer (then --vocab-size or --model is).
const std::set<std::string, std::less<>> kTolerant = {"--nproc-per-node", "--nproc_per_node", "--nnodes", "--nodes",
                                                      "--ntasks-per-node", "--tokenizer-model", "--tokenizer-type",
                                                      "--patch-tokenizer-type", "--load"};

// Architecture flags with one integer or text value.
const std::set<std::string, std::less<>> kArchValueFlags = {
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups",
    "--kv-channels", "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
    "--qk-pos-emb-head-dim", "--v-head-dim", "--vocab-size", "--num-layers-per-virtual-pipeline-stage",
    "--normalization", "--attention-backend", "--nnodes", "--nproc-per-node", "--nproc_per_node", "--fp8-format",
    "--fp8-recipe", "--moe-token-dispatcher-type", "--position-embedding-type", "--max-position-embeddings",
    "--moe-flex-dispatcher-backend", "--cross-entropy-fusion-impl", "--tokenizer-model", "--tokenizer-type",
    "--patch-tokenizer-type", "--extra-vocab-size", "--optimizer", "--nodes", "--ntasks-per-node",
    "--encoder-seq-length", "--transformer-impl",
    // Pai-Megatron-Patch's spellings for its DeepSeek models (megatron_patch/arguments.py).
    "--qk-nope-head-dim", "--qk-rope-head-dim", "--num-shared-experts", "--load"};

}  // namespace

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
    if (items.empty()) fail();  // "[]*2147483648" would repeat nothing two billion times
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

// The words the script's launch commands receive, "--flag=value" as "--flag value".
struct Words {
  std::vector<detail::ShellWord> words;
  [[nodiscard]] const std::string& at(std::size_t i) const { return words[i].text; }
  [[nodiscard]] bool is_value(std::size_t i) const {
    return i < words.size() && !is_flag(words[i].text) && words[i].text != ")";
  }
};

Words launch_words(std::vector<detail::ShellWord> shell) {
  Words w;
  for (auto& word : shell) {
    const std::size_t eq = word.text.find('=');
    if (is_flag(word.text) && eq != std::string::npos) {
      w.words.push_back(detail::ShellWord{word.text.substr(0, eq), word.line, word.depends_on});
      w.words.push_back(detail::ShellWord{word.text.substr(eq + 1), word.line, word.depends_on});
    } else {
      w.words.push_back(std::move(word));
    }
  }
  return w;
}

// A flag that changes memory may not depend on what the script leaves to its environment.
void refuse_unknown(const Words& w, std::size_t flag, std::size_t last, const ScriptFlags& f) {
  for (std::size_t k = flag; k <= last && k < w.words.size(); ++k) {
    const auto& d = w.words[k].depends_on;
    if (d.empty()) continue;
    throw InputError(f.field(w.at(flag)), k == flag ? std::string("given") : w.at(k),
                     fmt::format("a setting the script fixes itself: it depends on {}", d));
  }
}

// The value after the flag at i (i moves onto it), with where the flag was given.
RawFlag take_value(const Words& w, std::size_t& i, const ScriptFlags& f) {
  const std::size_t at = i;
  if (!w.is_value(i + 1)) throw InputError(f.field(w.at(at)), "missing", "a value after the flag");
  ++i;
  refuse_unknown(w, at, i, f);
  return RawFlag{w.at(i), Provenance{w.words[at].line, w.at(at) + " " + w.at(i)}};
}

// --recompute-modules takes one or more names; several of them add up.
void take_modules(const Words& w, std::size_t& i, ScriptFlags& f) {
  const std::size_t at = i;
  std::string text = w.at(at);
  while (w.is_value(i + 1)) {
    f.recompute_modules.push_back(w.at(++i));
    text += " " + w.at(i);
  }
  refuse_unknown(w, at, i, f);
  if (f.recompute_modules.empty()) throw InputError(f.field(w.at(at)), "missing", "one or more module names");
  if (!f.recompute_modules_from) f.recompute_modules_from = Provenance{w.words[at].line, text};
}

// A flag not understood, with the values that follow it, as the notes show it.
std::string take_unknown(const Words& w, std::size_t& i) {
  std::string shown = w.at(i);
  while (w.is_value(i + 1)) shown += " " + w.at(++i);
  return shown;
}

// Every flag in the words, by kind; refuses flags that change memory unmodelled and flags
// missing their value.
ScriptFlags scan(const Words& w, const std::string& source) {
  ScriptFlags f;
  f.source = source;
  bool past_first_flag = false;
  // What the last flag's value depended on: the other words of that value's unknown `$(...)`
  // (`--nproc_per_node $(python -c "...")` leaves `-c` and the rest behind it) are not flags.
  std::string value_depends_on;
  for (std::size_t i = 0; i < w.words.size(); ++i) {
    const std::string& flag = w.at(i);
    if (!is_flag(flag)) {
      // A variable a `read`, `mapfile` or `printf -v` set (shell_builtins.cpp), or among the
      // arguments the output of a command moemem does not run (`$(cat extra_args.txt)`): its
      // flags are unknown, and a launch run without them would be costed silently wrong. (Before
      // the first flag such a word is the launcher or the program: `$(which python)`.)
      const auto& word = w.words[i];
      const bool unread = word.depends_on.find("(its input is not read)") != std::string::npos;
      const bool command_output = past_first_flag && word.depends_on.rfind("the output of `", 0) == 0 &&
                                  word.depends_on != value_depends_on;
      if (unread || command_output) {
        throw InputError(fmt::format("{}: line {}", source, word.line), word.text,
                         fmt::format("words the script gives directly: this one comes from {}, which moemem does not "
                                     "evaluate (write the flags into the variable, e.g. VAR=(--flag value ...), or "
                                     "pass them inline)",
                                     word.depends_on));
      }
      continue;
    }
    past_first_flag = true;
    const std::string value = w.is_value(i + 1) ? w.at(i + 1) : "";
    if (const auto why = detail::unmodelled(flag, value)) {
      refuse_unknown(w, i, w.is_value(i + 1) ? i + 1 : i, f);
      f.unmodelled.push_back({flag, value.empty() ? "on" : value, *why, Provenance{w.words[i].line, flag}});
      (void)take_unknown(w, i);
    } else if (const auto v = kValueFlags.find(flag); v != kValueFlags.end()) {
      f.values[flag] = take_value(w, i, f);
      ++f.counts[v->second];
    } else if (kSwitches.contains(flag)) {
      refuse_unknown(w, i, i, f);
      f.switches.try_emplace(flag, Provenance{w.words[i].line, flag});
    } else if (flag == "--recompute-modules") {
      take_modules(w, i, f);
    } else if (flag == "--cuda-graph-scope" || flag == "--cuda-graph-modules") {
      const std::size_t at = i;
      f.cuda_graph_modules_from.try_emplace(flag, Provenance{w.words[at].line, take_unknown(w, i)});
      refuse_unknown(w, at, i, f);
      for (std::size_t k = at + 1; k <= i; ++k) f.cuda_graph_modules.push_back(w.at(k));
    } else if (kTolerant.contains(flag) && (!w.is_value(i + 1) || !w.words[i + 1].depends_on.empty())) {
      // A world size or tokenizer the environment decides: not read, and said so.
      f.notes.push_back(w.is_value(i + 1) ? fmt::format("{} {} not read: it depends on {}", flag, w.at(i + 1),
                                                        w.words[i + 1].depends_on)
                                          : fmt::format("{} given without a value: not read", flag));
      if (w.is_value(i + 1)) ++i;
    } else if (kArchValueFlags.contains(flag)) {
      f.values[flag] = take_value(w, i, f);
    } else if (flag == "--fp16") {
      refuse_unknown(w, i, i, f);
      f.fp16 = Provenance{w.words[i].line, flag};
      ++f.counts["--params-dtype"];
    } else if (detail::ignored_flag(flag)) {
      f.ignored.push_back(take_unknown(w, i));
    } else {
      if (!f.slime && (flag == "--rollout-batch-size" || flag == "--actor-num-nodes" || flag == "--actor-num-gpus-per-node")) {
        f.slime = Provenance{w.words[i].line, flag};
      }
      f.unrecognised.push_back(take_unknown(w, i));
    }
    value_depends_on = w.words[i].depends_on;
  }
  return f;
}

// --attention-backend: unfused and local keep the score matrices (eager), the others do not.
void read_attention(const ScriptFlags& f, MegatronSettings& s) {
  // --transformer-impl local builds get_gpt_layer_local_spec (gpt_builders.py), whose core
  // attention is Megatron's own DotProductAttention: the unfused path, whatever the backend flag.
  if (const RawFlag* impl = f.find("--transformer-impl")) {
    if (impl->value == "local") {
      s.attention = FromScript<AttentionKernel>{AttentionKernel::eager, impl->from};
      s.notes.push_back("--transformer-impl local: Megatron's local layer spec, whose DotProductAttention keeps the "
                        "softmax output (costed as --attention eager); its apex/torch norms and linears are costed as "
                        "Transformer Engine's");
      return;
    }
    if (impl->value != "transformer_engine") {
      throw InputError(f.field("--transformer-impl"), impl->value, "transformer_engine or local");
    }
  }
  const RawFlag* b = f.find("--attention-backend");
  if (b == nullptr) return;
  const std::string& v = b->value;
  if (v == "unfused" || v == "local") s.attention = FromScript<AttentionKernel>{AttentionKernel::eager, b->from};
  else if (v == "flash" || v == "fused" || v == "auto") s.attention = FromScript<AttentionKernel>{AttentionKernel::flash, b->from};
  else throw InputError(f.field("--attention-backend"), v, "flash, fused, unfused, local or auto");
}

// The flex dispatcher runs DeepEP (--moe-flex-dispatcher-backend deepep, its default, or the
// older --moe-enable-deepep) or HybridEP; both keep a resident buffer, modelled as DeepEP's.
void read_dispatcher(const ScriptFlags& f, MegatronSettings& s) {
  const RawFlag* d = f.find("--moe-token-dispatcher-type");
  // allgather is Megatron's default (TransformerConfig.moe_token_dispatcher_type): an MoE launch
  // that names no dispatcher runs it, and is costed so (said among the notes).
  if (d == nullptr) {
    if (const RawFlag* experts = f.find("--num-experts"); experts != nullptr) {
      s.dispatcher = FromScript<Dispatcher>{Dispatcher::allgather, experts->from};
      s.notes.push_back("no --moe-token-dispatcher-type: Megatron's default, the allgather dispatcher");
    }
    return;
  }
  if (d->value == "allgather") {
    s.dispatcher = FromScript<Dispatcher>{Dispatcher::allgather, d->from};
    return;
  }
  if (d->value == "flex") {
    const RawFlag* backend = f.find("--moe-flex-dispatcher-backend");
    const std::string b = backend != nullptr ? backend->value : "deepep";
    if (b != "deepep" && b != "hybridep") {
      throw InputError(f.field("--moe-flex-dispatcher-backend"), b,
                       b == "ncclep" ? "deepep or hybridep (Megatron's ncclep backend keeps buffers moemem does not model yet)"
                                     : "deepep or hybridep (or ncclep, which moemem does not model yet)");
    }
    s.dispatcher = FromScript<Dispatcher>{Dispatcher::deepep, d->from};
    if (b == "hybridep") s.notes.push_back("--moe-flex-dispatcher-backend hybridep: its buffer is modelled as DeepEP's");
  } else if (d->value != "alltoall" && d->value != "allgather") {
    throw InputError(f.field("--moe-token-dispatcher-type"), d->value, "alltoall, allgather or flex");
  }
}

// torchrun's --nproc-per-node (or --nproc_per_node) x --nnodes, or srun's --ntasks-per-node x
// --nodes.
void read_world_size(const ScriptFlags& f, MegatronSettings& s) {
  const bool slurm = f.find("--ntasks-per-node") != nullptr && f.find("--nproc-per-node") == nullptr &&
                     f.find("--nproc_per_node") == nullptr;
  const RawFlag* nproc = slurm ? f.find("--ntasks-per-node") : f.find("--nproc-per-node");
  if (nproc == nullptr) nproc = f.find("--nproc_per_node");
  if (nproc == nullptr) return;
  const std::int64_t per_node = to_int(nproc->value, f.field(slurm ? "--ntasks-per-node" : "--nproc-per-node"));
  const RawFlag* nodes = f.find(slurm ? "--nodes" : "--nnodes");
  const std::int64_t n =
      nodes != nullptr ? std::max<std::int64_t>(1, to_int(nodes->value, f.field(slurm ? "--nodes" : "--nnodes"))) : 1;
  s.world_size = FromScript<std::int64_t>{per_node * n, nproc->from};
}

// Megatron: vpp = layers / (pp x layers per virtual stage).
Setting<std::int64_t> vpp_from_layers(const ScriptFlags& f) {
  const RawFlag* per = f.find("--num-layers-per-virtual-pipeline-stage");
  if (per == nullptr) return std::nullopt;
  const std::int64_t per_stage = to_int(per->value, f.field("--num-layers-per-virtual-pipeline-stage"));
  const RawFlag* pp_flag = f.find("--pipeline-model-parallel-size");
  const std::int64_t pp = pp_flag != nullptr ? to_int(pp_flag->value, f.field("--pipeline-model-parallel-size")) : 1;
  // megatron/training/arguments.py: the embedding and the loss count as a layer each when the
  // split accounts for them, then vpp = (layers / pp) / layers-per-virtual-stage.
  auto layers = f.get_int("--num-layers");
  if (layers && f.switches.contains("--account-for-embedding-in-pipeline-split")) ++*layers;
  if (layers && f.switches.contains("--account-for-loss-in-pipeline-split")) ++*layers;
  if (!layers || per_stage < 1 || pp < 1 || *layers % (pp * per_stage) != 0) {
    throw InputError(f.field("--num-layers-per-virtual-pipeline-stage"), std::to_string(per_stage),
                     "a count that divides --num-layers (+1 for each --account-for-embedding/loss-in-pipeline-split) / "
                     "--pipeline-model-parallel-size (and --num-layers given)");
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
    {"--cpu-offloading-num-layers", &M::cpu_offload_layers},
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
    {"--overlap-moe-expert-parallel-comm", &M::ep_overlap},
    {"--delay-wgrad-compute", &M::delay_wgrad},
    {"--tp-comm-overlap", &M::tp_comm_overlap},
    {"--no-rope-fusion", &M::no_rope_fusion},
    {"--no-gradient-accumulation-fusion", &M::no_grad_accum_fusion},
    {"--no-create-attention-mask-in-dataloader", &M::no_attention_mask},
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

// Flags modelled through settings moemem already has.
void read_mapped(const ScriptFlags& f, MegatronSettings& s) {
  // Megatron's validate_args: --recompute-activations sets the granularity to selective, whose
  // default module is core_attn.
  if (const auto it = f.switches.find("--recompute-activations"); it != f.switches.end()) {
    s.recompute = FromScript<Recompute>{Recompute::selective, it->second};
    if (!s.recompute_modules) s.recompute_modules = FromScript<std::uint16_t>{kRecomputeCoreAttn, it->second};
  }
  // --moe-layer-recompute (TransformerConfig.__post_init__, d98e8a64): selective granularity with
  // "moe" added to the modules (core_attn, TransformerConfig's default, when none are given);
  // Megatron raises with full granularity.
  if (const auto it = f.switches.find("--moe-layer-recompute"); it != f.switches.end()) {
    if (s.recompute && s.recompute->value == Recompute::full) {
      throw InputError(f.field("--moe-layer-recompute"), "with --recompute-granularity full",
                       "selective granularity (TransformerConfig raises: \"Do not set --moe-layer-recompute with full "
                       "recompute granularity\")");
    }
    s.recompute = FromScript<Recompute>{Recompute::selective, it->second};
    const std::uint16_t given = s.recompute_modules ? s.recompute_modules->value : std::uint16_t{kRecomputeCoreAttn};
    s.recompute_modules = FromScript<std::uint16_t>{static_cast<std::uint16_t>(given | kRecomputeMoe), it->second};
  }
  // A slime launch (THUDM/slime train.py, known by its rollout and actor flags): slime's
  // _set_default_megatron_args (slime/backends/megatron_utils/arguments.py) turns the distributed
  // optimizer on whatever the script says.
  if (f.slime && !s.distributed_optimizer) {
    s.distributed_optimizer = FromScript<bool>{true, *f.slime};
    s.notes.push_back(fmt::format("line {}: {} marks a slime launch: the distributed optimizer is on, as slime's "
                                  "_set_default_megatron_args sets it", f.slime->line, f.slime->text));
  }
  // --grad-reduce-in-bf16: the gradient buffers (main grads) in bf16.
  if (const auto it = f.switches.find("--grad-reduce-in-bf16"); it != f.switches.end() && !s.main_grads_dtype) {
    s.main_grads_dtype = FromScript<DType>{DType::bf16, it->second};
  }
  // Megatron's validate_args: params_dtype is torch.float unless --fp16 or --bf16; only --bf16
  // turns on accumulate_allreduce_grads_in_fp32, so under --fp16 the DDP gradient buffers are fp16
  // unless the script asks for fp32 (--accumulate-allreduce-grads-in-fp32).
  // Asked of a launch (a script that sets its batch or length of training), not of an argument
  // file that gives a model's architecture only (validation's models/*.args).
  const bool launch = f.has("--micro-batch-size") || f.has("--global-batch-size") || f.has("--train-iters") ||
                      f.has("--train-samples");
  if (launch && !f.fp16 && !f.switches.contains("--bf16")) {
    s.notes.push_back("neither --bf16 nor --fp16: Megatron would train this launch in fp32 (validate_args sets params_dtype "
                      "torch.float), which moemem does not model; costed as bf16 mixed precision (add --bf16 or --fp16 "
                      "to the script)");
  }
  if (f.fp16 && !s.main_grads_dtype && !f.switches.contains("--accumulate-allreduce-grads-in-fp32")) {
    s.main_grads_dtype = FromScript<DType>{DType::fp16, *f.fp16};
  }
  if (f.switches.contains("--cross-entropy-loss-fusion")) {
    const RawFlag* impl = f.find("--cross-entropy-fusion-impl");
    const std::string v = impl != nullptr ? impl->value : "native";
    if (v != "native" && v != "te") throw InputError(f.field("--cross-entropy-fusion-impl"), v, "native or te");
    s.notes.push_back(fmt::format(
        "--cross-entropy-loss-fusion ({}): the loss keeps an fp32 gradient of the logits, as unfused{}", v,
        v == "te" ? " (Transformer Engine 2.18 and later; --logits-dtype bf16 models earlier releases)" : ""));
  }
}

// The settings with their typed values, in the order moemem reads its own flags.
void read_settings(const ScriptFlags& f, MegatronSettings& s) {
  for (const auto& [flag, member] : kIntSettings) s.*member = typed<std::int64_t>(f, flag, flag_int);
  // validate_args: without --seq-length the length is --encoder-seq-length's.
  if (!s.seq_len) s.seq_len = typed<std::int64_t>(f, "--encoder-seq-length", flag_int);
  if (s.micro_batch && !s.global_batch) {
    s.notes.push_back("no --global-batch-size: Megatron sets it to --micro-batch-size x the data-parallel size "
                      "(validate_args), one micro-batch per step, and so does moemem unless --global-batch is given");
  }
  for (const auto& [flag, member] : kSwitchSettings) {
    if (const auto it = f.switches.find(flag); it != f.switches.end()) s.*member = FromScript<bool>{true, it->second};
  }
  s.pipeline_layout = typed<std::string>(f, "--pipeline-model-parallel-layout",
                                         [](const std::string& v, const std::string&) { return v; });
  s.fp8 = read_fp8(f);
  s.moe_capacity_factor = typed<double>(f, "--moe-expert-capacity-factor", flag_number);
  s.hidden_dropout = typed<double>(f, "--hidden-dropout", flag_number);
  s.attention_dropout = typed<double>(f, "--attention-dropout", flag_number);
  // HybridDeviceOptimizer (megatron/core/optimizer/cpu_offloading): --optimizer-offload-fraction
  // (default 1.0) of the optimizer states on the host; the fraction alone offloads nothing.
  if (const auto it = f.switches.find("--optimizer-cpu-offload"); it != f.switches.end()) {
    const auto fraction = typed<double>(f, "--optimizer-offload-fraction", flag_number);
    s.optimizer_offload = FromScript<double>{fraction ? fraction->value : 1.0, it->second};
  }
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

// Launches Megatron itself refuses at start-up: an estimate of a run that cannot start would
// mislead, so each is an error naming the flag and Megatron's check.
void refuse_invalid_launch(const ScriptFlags& f) {
  if (f.fp16 && f.switches.contains("--bf16")) {
    throw InputError(f.field("--fp16"), "with --bf16", "one of --fp16 and --bf16 (arguments.py validate_args: assert not args.bf16)");
  }
  if (const RawFlag* format = f.find("--fp8-format"); format != nullptr && format->value != "e4m3" && format->value != "hybrid") {
    throw InputError(f.field("--fp8-format"), format->value, "e4m3 or hybrid (TransformerConfig.fp8)");
  }
  if (const RawFlag* g = f.find("--recompute-granularity"); g != nullptr && g->value == "full") {
    for (const char* flag : {"--recompute-method", "--recompute-num-layers"}) {
      if (f.find(flag) == nullptr) {
        throw InputError(f.field(flag), "missing",
                         "uniform or block, and a layer count, with --recompute-granularity full (TransformerConfig "
                         "raises without them)");
      }
    }
  }
  if (!f.switches.contains("--use-precision-aware-optimizer")) {
    for (const char* flag : {"--main-grads-dtype", "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype"}) {
      const RawFlag* d = f.find(flag);
      if (d != nullptr && d->value != "fp32") {
        throw InputError(f.field(flag), d->value,
                         "fp32 without --use-precision-aware-optimizer (OptimizerConfig asserts it; add the flag for "
                         "lower-precision states)");
      }
    }
    if (f.switches.contains("--optimizer-cpu-offload")) {
      throw InputError(f.field("--optimizer-cpu-offload"), "without --use-precision-aware-optimizer",
                       "--use-precision-aware-optimizer with it (validate_args: the hybrid device optimizer reuses "
                       "that path)");
    }
  } else if (!f.switches.contains("--use-distributed-optimizer") && !f.switches.contains("--use-megatron-fsdp") &&
             !f.switches.contains("--use-torch-fsdp2") && !f.slime) {
    // megatron/core/optimizer/__init__.py get_megatron_optimizer (d98e8a64): "--use-precision-aware-optimizer
    // only supported with distributed optimizer".
    throw InputError(f.field("--use-precision-aware-optimizer"), "without --use-distributed-optimizer",
                     "--use-distributed-optimizer with it (get_megatron_optimizer raises otherwise; frameworks that "
                     "force it on, such as slime, need it written in the script moemem reads)");
  }
}

}  // namespace

MegatronSettings parse_megatron_args(std::string_view text, const std::string& source) {
  const std::optional<std::string> yaml = detail::modelzoo_yaml_args(text, source);
  detail::ShellRun run = detail::run_shell(yaml ? std::string_view(*yaml) : text, source);
  std::vector<std::string> shell_notes = run.notes;
  const ScriptFlags f = scan(launch_words(std::move(run.words)), source);
  // Not one Megatron flag: the script stopped before its launch (an exit on a variable its
  // environment sets) or launches through something moemem does not read. Never a default layout.
  if (f.values.empty() && f.switches.empty()) {
    std::string why;
    for (const auto& n : shell_notes) why += "; " + n;
    throw InputError(fmt::format("--megatron-args {}", source), "no Megatron flags",
                     "a script whose launch command moemem reaches, with Megatron-LM's flags" + why);
  }
  refuse_invalid_launch(f);
  MegatronSettings s;
  s.source = source;
  read_attention(f, s);
  read_dispatcher(f, s);
  read_world_size(f, s);
  // A layer pattern replaces the layers Megatron builds (and derives --num-layers): refused before
  // the model is read as a GPT stack.
  for (const auto& u : f.unmodelled) {
    if (detail::replaces_layers(u.flag)) {
      throw InputError(fmt::format("{}: {}", source, u.flag), u.value,
                       fmt::format("a launch without it: {} changes memory and is not modelled yet", u.what));
    }
  }
  if (f.has("--num-layers") || f.has("--hidden-size")) s.model = detail::megatron_model(f, s.vocab_missing, s.notes);
  const Setting<std::int64_t> vpp = vpp_from_layers(f);
  read_settings(f, s);
  read_mapped(f, s);
  detail::read_cuda_graphs(f, s);
  s.unmodelled = f.unmodelled;
  for (const auto& n : f.notes) s.notes.push_back(n);
  s.unrecognised = f.unrecognised;
  for (auto& n : run.notes) s.notes.push_back(std::move(n));
  auto counts = f.counts;
  if (vpp) {
    s.vpp = vpp;  // a second vpp when --num-virtual-stages-per-pipeline-rank gives one too
    ++counts["--vpp"];
  }
  for (const auto& [flag, n] : counts) {
    if (n > 1) s.repeated[flag] = n;
  }
  s.ignored = f.ignored;
  // Without a recompute granularity Megatron reads neither the method nor the group size.
  if (!s.recompute && (s.recompute_method || s.recompute_num_layers)) {
    s.notes.push_back(fmt::format("{}{}{} read by Megatron only with --recompute-granularity full, which the script does not "
                                  "give: no recomputation (pass --recompute full to apply {})",
                                  s.recompute_method ? s.recompute_method->from.describe() : "",
                                  s.recompute_method && s.recompute_num_layers ? "; " : "",
                                  s.recompute_num_layers ? s.recompute_num_layers->from.describe() : "",
                                  s.recompute_method && s.recompute_num_layers ? "them" : "it"));
  }
  return s;
}

}  // namespace moemem
