// A measurement record (the schema of tests/data/validation/measured-public.jsonl) read as a
// Request: the model (a preset, or the record's model_arch), the parallel degrees and the
// training settings the record states, each as the CLI would set it from flags.
#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/validate.hpp"

namespace moemem {

namespace {

using nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::int64_t int_of(const json& r, const char* key, std::int64_t fallback) {
  const auto it = r.find(key);
  if (it == r.end() || it->is_null() || !it->is_number_integer()) return fallback;
  return it->get<std::int64_t>();
}

bool flag_of(const json& r, const char* key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_boolean() && it->get<bool>();
}

bool contains(const std::string& haystack, std::string_view needle) { return haystack.find(needle) != std::string::npos; }

bool stated(const json& r, const char* key) { return r.contains(key) && !r[key].is_null(); }

enum class Framework : std::uint8_t { megatron, torchtitan, other };

Framework framework_of(const json& r) {
  const std::string f = lower(record_text(r, "framework"));
  return contains(f, "megatron") ? Framework::megatron : contains(f, "torchtitan") ? Framework::torchtitan : Framework::other;
}

std::string activation_of(const json& arch) { return lower(record_text(arch, "activation") + record_text(arch, "act")); }

// The date of the framework version a record ran: the "(YYYY-MM-DD)" in framework_version when
// given, else the record's date (YYYY-MM or YYYY-MM-DD).
std::string version_date(const json& r) {
  const std::string v = record_text(r, "framework_version");
  for (std::size_t i = 0; i + 12 <= v.size(); ++i) {
    if (v[i] == '(' && v[i + 11] == ')' && v[i + 5] == '-' && v[i + 8] == '-') return v.substr(i + 1, 10);
  }
  return record_text(r, "date");
}

// torchtitan compiles the loss with the model when training.compile is set, except between
// commits e8977b0 (2024-12-18, "turning off compile on loss function") and bbb1b616e
// (2025-04-02, build_loss_fn compiles it again).
bool torchtitan_compiles_loss(const std::string& date) { return date < "2024-12-18" || date >= "2025-04-02"; }

// Letters, digits and dots, lower case: "Llama 3.1 8B" and "llama-3.1-8b" both read llama3.18b.
std::string name_key(const std::string& name) {
  std::string out;
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '.') out.push_back(static_cast<char>(std::tolower(c)));
  }
  return out;
}

// The preset the record's model (or its model_arch's name) names, if any.
std::optional<std::string> preset_named(const json& r) {
  const std::vector<std::string> presets = preset_names();
  for (const std::string& name : {record_text(r, "model"), record_text(r.value("model_arch", json::object()), "name")}) {
    if (name.empty()) continue;
    const auto it = std::find_if(presets.begin(), presets.end(),
                                 [&](const std::string& p) { return name_key(p) == name_key(name); });
    if (it != presets.end()) return *it;
  }
  return std::nullopt;
}

// The recomputation a record states: "full ...", "selective ..." or "none ..."; nothing when the
// record does not say or says something else.
std::optional<Recompute> recompute_of(const json& r) {
  const std::string rc = lower(record_text(r, "recompute"));
  if (rc.rfind("full", 0) == 0) return Recompute::full;
  if (rc.rfind("selective", 0) == 0) return Recompute::selective;
  if (rc.rfind("none", 0) == 0) return Recompute::none;
  return std::nullopt;
}

// What a record's framework, model and settings need that moemem does not model; empty when it
// can be represented. `approx` collects approximations made.
std::string unsupported(const json& r, std::string& approx) {
  const Framework fw = framework_of(r);
  if (fw == Framework::other) return "framework has no moemem profile";
  const json arch = r.value("model_arch", json::object());
  if (!arch.contains("layers") || !arch.contains("ffn")) return "model architecture not given layer by layer";
  const std::optional<std::string> preset = preset_named(r);
  if (contains(lower(record_text(r, "model")), "deepseek") || !arch.value("experts", json()).is_null() ||
      (preset && load_model(*preset).is_moe())) {
    return "mixture-of-experts models are not modelled by the torchtitan profile yet";
  }
  if (fw == Framework::megatron) {
    const std::string act = activation_of(arch);
    if (!contains(act, "swiglu") && !contains(act, "gelu")) return "activation function not stated";
    if (contains(lower(record_text(arch, "pos")), "learned")) approx = "learned position table of seq_len rows assumed";
  }
  if (fw == Framework::torchtitan && int_of(r, "pp", 1) > 1) {
    if (r.value("vpp", json()).is_string()) return "virtual stages per rank not stated";
    if (!r.value("global_batch_size", json()).is_number_integer()) return "global batch (hence micro-batches) not stated";
  }
  if (!recompute_of(r)) {
    return stated(r, "recompute") ? fmt::format("recomputation '{}' not understood", record_text(r, "recompute"))
                                  : "recomputation not stated";
  }
  return "";
}

// The model as the record describes it, a GQA decoder (the records' model_arch), with the
// record's head_dim where it gives one.
// The record's vocabulary: an integer, or a text that starts with one and may go on after a space
// ("128256 (Llama3 tokenizer)"); "128K" is refused, not read as 128.
std::int64_t vocab_of(const json& r, const json& arch) {
  const auto it = arch.find("vocab");
  if (it != arch.end() && it->is_number_integer()) return it->get<std::int64_t>();
  const std::string v = record_text(arch, "vocab");
  const std::size_t digits = std::min(v.find_first_not_of("0123456789"), v.size());
  if (digits == 0 || digits > 12 || (digits < v.size() && v[digits] != ' ')) {
    throw InputError(record_text(r, "id") + ": model_arch.vocab", v,
                     "the vocabulary size as a whole number, optionally followed by a space and a remark");
  }
  return std::stoll(v.substr(0, digits));
}

ModelSpec spec_of(const json& r, Framework fw) {
  const json arch = r.value("model_arch", json::object());
  ModelSpec m;
  m.name = record_text(r, "model");
  m.model_type = "llama";
  m.naming = NamingStyle::llama;
  m.num_layers = int_of(arch, "layers", 0);
  m.hidden = int_of(arch, "hidden", 0);
  m.dense_ffn = int_of(arch, "ffn", 0);
  m.num_heads = int_of(arch, "heads", 0);
  m.num_kv_heads = int_of(arch, "kv_heads", m.num_heads);
  m.vocab = vocab_of(r, arch);
  // Sizes of real models, bounded so that no product of two overflows and no layer list is huge.
  constexpr std::int64_t kMaxSize = std::int64_t{1} << 31, kMaxLayers = std::int64_t{1} << 16;
  if (m.num_layers < 1 || m.hidden < 1 || m.num_heads < 1 || m.vocab < 1 || m.dense_ffn < 1 || m.num_kv_heads < 1 ||
      m.num_layers > kMaxLayers || m.hidden > kMaxSize || m.num_heads > kMaxSize || m.vocab > kMaxSize ||
      m.dense_ffn > kMaxSize || m.num_kv_heads > m.num_heads) {
    throw InputError(record_text(r, "id") + ": model_arch", arch.dump(),
                     "layers (1 to 65536), hidden, ffn, heads and vocab (1 to 2^31), kv_heads (1 to heads)");
  }
  m.head_dim = int_of(arch, "head_dim", m.hidden / m.num_heads);
  if (m.head_dim < 1 || m.head_dim > kMaxSize) {
    throw InputError(record_text(r, "id") + ": model_arch.head_dim", std::to_string(m.head_dim), "1 to 2^31");
  }
  m.tie_embeddings = lower(record_text(arch, "tied_embeddings")).rfind("true", 0) == 0;
  const std::string act = activation_of(arch);
  // "GeLU (no --swiglu)" is GeLU; torchtitan's Llama is SwiGLU.
  m.gated_mlp = fw == Framework::torchtitan || (contains(act, "swiglu") && !contains(act, "gelu"));
  m.norm_bias = contains(lower(record_text(arch, "norm")), "layernorm");
  m.qkv_bias = m.o_bias = m.mlp_bias = contains(lower(record_text(arch, "bias")), "on");
  if (contains(lower(record_text(arch, "pos")), "learned")) m.learned_positions = int_of(r, "seq_len", 0);
  m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::dense);
  validate_model(m);
  return m;
}

// The architecture fields the record states that `preset` contradicts.
std::vector<std::string> disagreements(const json& r, Framework fw, const ModelSpec& rec, const ModelSpec& preset) {
  const json& arch = r["model_arch"];
  std::vector<std::string> out;
  const auto check = [&](const char* field, bool given, bool differ) {
    if (given && differ) out.emplace_back(field);
  };
  check("layers", true, rec.num_layers != preset.num_layers);
  check("hidden", true, rec.hidden != preset.hidden);
  check("ffn", true, rec.dense_ffn != preset.dense_ffn);
  check("heads", true, rec.num_heads != preset.num_heads);
  check("vocab", true, rec.vocab != preset.vocab);
  check("kv_heads", stated(arch, "kv_heads"), rec.num_kv_heads != preset.num_kv_heads);
  check("head_dim", stated(arch, "head_dim"), rec.head_dim != preset.head_dim);
  check("tied_embeddings", stated(arch, "tied_embeddings"), rec.tie_embeddings != preset.tie_embeddings);
  check("act", fw == Framework::torchtitan || !activation_of(arch).empty(), rec.gated_mlp != preset.gated_mlp);
  check("norm", stated(arch, "norm"), rec.norm_bias != preset.norm_bias);
  check("bias", stated(arch, "bias"),
        rec.qkv_bias != preset.qkv_bias || rec.o_bias != preset.o_bias || rec.mlp_bias != preset.mlp_bias);
  check("pos", stated(arch, "pos"), (rec.learned_positions > 0) != (preset.learned_positions > 0));
  check("attention", true, preset.attention != AttentionKind::gqa);
  return out;
}

// The model: the preset the record names when its stated architecture agrees, else the record's
// own fields. `notes` says which.
ModelRequest model_request(const json& r, Framework fw, std::string& notes) {
  ModelRequest out;
  out.spec = spec_of(r, fw);
  const std::optional<std::string> preset = preset_named(r);
  if (!preset) {
    notes = "model from the record's model_arch (no preset of that name)";
    return out;
  }
  const std::vector<std::string> differ = disagreements(r, fw, *out.spec, load_model(*preset));
  if (!differ.empty()) {
    notes = fmt::format("model from the record's model_arch (its {} disagree with preset {})", fmt::join(differ, ", "), *preset);
    return out;
  }
  notes = fmt::format("preset {}", *preset);
  out.source = *preset;
  out.spec.reset();
  return out;
}

ParallelConfig parallel_of(const json& r, Framework fw) {
  ParallelConfig p;
  p.tp = int_of(r, "tp", 1);
  p.pp = int_of(r, "pp", 1);
  p.dp = int_of(r, "dp", 1);
  p.cp = int_of(r, "cp", 1);
  // torchtitan's TP is always sequence-parallel; Megatron's only with --sequence-parallel.
  p.sp = p.tp > 1 && (fw == Framework::torchtitan || flag_of(r, "sp"));
  p.vpp = int_of(r, "vpp", 1);
  if (p.vpp > 1) p.schedule = Schedule::interleaved;
  return p;
}

// torchtitan's settings: batch split over the pipeline, HSDP, torch.compile, float8, the loss
// and the FSDP reshard policy.
void torchtitan_settings(const json& r, const ParallelConfig& p, TrainingRequest& t) {
  // torchtitan's pipeline splits the local batch into as many micro-batches as stages.
  if (p.pp > 1 && !stated(r, "micro_batch_size") && t.global_batch) t.micro_batch = *t.global_batch / p.dp / p.pp;
  const json settings = r.value("other_settings", json::object());
  t.fsdp.dp_replicate = std::max<std::int64_t>(1, int_of(r, "dp_replicate", 1));
  t.fsdp.compile = flag_of(settings, "torch_compile");
  const std::string fp8 = lower(record_text(settings, "float8"));
  if (!fp8.empty() && fp8 != "false") t.fp8 = Fp8Recipe::tensorwise;  // rowwise keeps the same saved tensors
  t.fsdp.fsdp_float8_all_gather =
      t.fp8.has_value() && (contains(fp8, "fsdp_float8_all_gather") || contains(fp8, "fsdp float8 all-gather"));
  const std::string loss = lower(record_text(settings, "loss"));
  if (contains(loss, "chunked")) t.fsdp.loss = LossImpl::chunked;
  else t.fsdp.loss = t.fsdp.compile && torchtitan_compiles_loss(version_date(r)) ? LossImpl::fused : LossImpl::upcast;
  const std::string reshard = lower(record_text(r, "fsdp_reshard_after_forward"));
  t.fsdp.reshard = contains(reshard, "always") ? ReshardPolicy::always
                   : contains(reshard, "never") ? ReshardPolicy::never : ReshardPolicy::standard;
}

TrainingRequest training_of(const json& r, Framework fw, const ParallelConfig& p) {
  TrainingRequest t;
  t.micro_batch = int_of(r, "micro_batch_size", 1);
  t.seq_len = int_of(r, "seq_len", 4096);
  if (const auto g = int_of(r, "global_batch_size", 0); g > 0) t.global_batch = g;
  t.recompute = recompute_of(r);
  if (fw == Framework::torchtitan) {
    torchtitan_settings(r, p, t);
  } else {
    t.distributed_optimizer = contains(lower(record_text(r, "zero_or_dist_opt")), "distributed optimizer");
  }
  return t;
}

}  // namespace

std::string record_metric(const json& record) {
  const std::string kind = lower(record_text(record, "metric_kind"));
  return contains(kind, "allocated") ? "allocated" : contains(kind, "nvidia-smi") ? "device-used" : "reserved";
}

std::string record_family(const json& record) {
  const std::string framework = record_text(record, "framework");
  return contains(framework, "FlagPerf") ? "FlagPerf (Megatron)"
         : contains(lower(framework), "megatron") ? "Megatron-LM"
         : contains(lower(framework), "torchtitan") ? "torchtitan" : framework;
}

std::variant<RecordRequest, std::string> record_request(const json& record) {
  std::string approx;
  if (std::string why = unsupported(record, approx); !why.empty()) return why;
  const Framework fw = framework_of(record);
  RecordRequest out;
  out.metric = record_metric(record);
  out.last_rank = contains(lower(record_text(record, "measured_rank")), "last");
  try {
    out.request.model = model_request(record, fw, out.notes);
  } catch (const InputError& e) {
    return fmt::format("configuration not representable: {}", e.what());
  }
  if (!approx.empty()) out.notes += "; " + approx;
  out.request.parallel = parallel_of(record, fw);
  out.request.training = training_of(record, fw, out.request.parallel);
  out.request.profile = fw == Framework::torchtitan ? "torchtitan" : "megatron";
  return out;
}

std::string record_text(const json& record, const char* key) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

}  // namespace moemem
