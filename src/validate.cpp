#include "moemem/validate.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "moemem/errors.hpp"
#include "moemem/analyze.hpp"

namespace moemem {

namespace {

using nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string text_of(const json& r, const char* key) {
  const auto it = r.find(key);
  if (it == r.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::int64_t int_of(const json& r, const char* key, std::int64_t fallback) {
  const auto it = r.find(key);
  if (it == r.end() || it->is_null() || !it->is_number_integer()) return fallback;
  return it->get<std::int64_t>();
}

bool contains(const std::string& haystack, std::string_view needle) { return haystack.find(needle) != std::string::npos; }

enum class Framework : std::uint8_t { megatron, torchtitan, other };

Framework framework_of(const json& r) {
  const std::string f = lower(text_of(r, "framework"));
  return contains(f, "megatron") ? Framework::megatron : contains(f, "torchtitan") ? Framework::torchtitan : Framework::other;
}

// The date of the framework version a record ran: the "(YYYY-MM-DD)" in framework_version when
// given, else the record's date (YYYY-MM or YYYY-MM-DD).
std::string version_date(const json& r) {
  const std::string v = text_of(r, "framework_version");
  for (std::size_t i = 0; i + 12 <= v.size(); ++i) {
    if (v[i] == '(' && v[i + 11] == ')' && v[i + 5] == '-' && v[i + 8] == '-') return v.substr(i + 1, 10);
  }
  return text_of(r, "date");
}

// What a record's framework, model and settings need that moemem does not model; empty when it
// can be represented. `approx` collects approximations made.
std::string unsupported(const json& r, std::string& approx) {
  const Framework fw = framework_of(r);
  if (fw == Framework::other) return "framework has no moemem profile";
  const json arch = r.value("model_arch", json::object());
  if (!arch.contains("layers") || !arch.contains("ffn")) return "model architecture not given layer by layer";
  if (contains(lower(text_of(r, "model")), "deepseek") || !arch.value("experts", json()).is_null()) {
    return "mixture-of-experts models are not modelled by the torchtitan profile yet";
  }
  const std::string act = lower(text_of(arch, "activation") + text_of(arch, "act"));
  if (fw == Framework::megatron) {
    if (!contains(act, "swiglu") && !contains(act, "gelu")) return "activation function not stated";
    if (contains(lower(text_of(arch, "pos")), "learned")) approx = "learned position table of seq_len rows assumed";
  }
  if (fw == Framework::torchtitan && r.value("pp", json(1)).is_number_integer() && r["pp"].get<int>() > 1) {
    if (r.value("vpp", json()).is_string()) return "virtual stages per rank not stated";
    if (!r.value("global_batch_size", json()).is_number_integer()) return "global batch (hence micro-batches) not stated";
  }
  return "";
}

// torchtitan compiles the loss with the model when training.compile is set, except between
// commits e8977b0 (2024-12-18, "turning off compile on loss function") and bbb1b616e
// (2025-04-02, build_loss_fn compiles it again).
bool torchtitan_compiles_loss(const std::string& date) { return date < "2024-12-18" || date >= "2025-04-02"; }

}  // namespace

Confidence parse_confidence(std::string_view text, std::string_view field) {
  if (text == "high") return Confidence::high;
  if (text == "medium") return Confidence::medium;
  if (text == "low") return Confidence::low;
  throw InputError(std::string(field), std::string(text), "high, medium or low");
}

std::vector<ValidationResult> validate_records(std::string_view jsonl, const std::string& source, Confidence min) {
  std::vector<ValidationResult> out;
  std::size_t line_no = 0, start = 0;
  while (start < jsonl.size()) {
    std::size_t end = jsonl.find('\n', start);
    if (end == std::string_view::npos) end = jsonl.size();
    const std::string_view line = jsonl.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json r;
    try {
      r = json::parse(line);
    } catch (const json::parse_error& e) {
      throw InputError(fmt::format("{} line {}", source, line_no), fmt::format("malformed JSON at byte {}", e.byte),
                       "one JSON object per line");
    }
    if (!r.is_object() || !r.contains("id") || !r.contains("measured_gib_normalized") || !r.contains("metric_kind")) {
      throw InputError(fmt::format("{} line {}", source, line_no), "a record without id, metric_kind or measured_gib_normalized",
                       "records of the measured-public.jsonl schema");
    }
    ValidationResult v;
    v.id = text_of(r, "id");
    v.confidence = text_of(r, "confidence");
    const Confidence c = v.confidence.empty() ? Confidence::low : parse_confidence(v.confidence, "confidence");
    if (c < min) continue;
    const std::string framework = text_of(r, "framework");
    v.family = framework.find("FlagPerf") != std::string::npos ? "FlagPerf (Megatron)"
               : lower(framework).find("megatron") != std::string::npos ? "Megatron-LM"
               : lower(framework).find("torchtitan") != std::string::npos ? "torchtitan" : framework;
    const std::string kind = lower(text_of(r, "metric_kind"));
    v.metric = kind.find("allocated") != std::string::npos ? "allocated"
               : kind.find("nvidia-smi") != std::string::npos ? "device-used" : "reserved";
    const auto& gib = r["measured_gib_normalized"];
    if (!gib.is_number()) {
      v.reason = "no measured value in the record";
      out.push_back(std::move(v));
      continue;
    }
    v.measured = Bytes(static_cast<std::uint64_t>(std::llround(gib.get<double>() * 1073741824.0)));
    std::string approx;
    if (const std::string why = unsupported(r, approx); !why.empty()) {
      v.reason = why;
      out.push_back(std::move(v));
      continue;
    }
    try {
      // The model, as a GQA decoder (the records' model_arch).
      const Framework fw = framework_of(r);
      const json arch = r["model_arch"];
      ModelSpec m;
      m.name = text_of(r, "model");
      m.model_type = "llama";
      m.naming = NamingStyle::llama;
      m.num_layers = int_of(arch, "layers", 0);
      m.hidden = int_of(arch, "hidden", 0);
      m.dense_ffn = int_of(arch, "ffn", 0);
      m.num_heads = int_of(arch, "heads", 0);
      m.num_kv_heads = int_of(arch, "kv_heads", m.num_heads);
      std::string vocab_text = text_of(arch, "vocab");
      m.vocab = std::atoll(vocab_text.c_str());
      if (m.num_layers < 1 || m.hidden < 1 || m.num_heads < 1 || m.vocab < 1 || m.dense_ffn < 1) {
        throw InputError(v.id + ": model_arch", arch.dump(), "layers, hidden, ffn, heads and vocab");
      }
      m.head_dim = m.hidden / m.num_heads;
      m.tie_embeddings = lower(text_of(arch, "tied_embeddings")).rfind("true", 0) == 0;
      const std::string act = lower(text_of(arch, "activation") + text_of(arch, "act"));
      // "GeLU (no --swiglu)" is GeLU; torchtitan's Llama is SwiGLU.
      m.gated_mlp = fw == Framework::torchtitan || (contains(act, "swiglu") && !contains(act, "gelu"));
      m.norm_bias = contains(lower(text_of(arch, "norm")), "layernorm");
      m.qkv_bias = m.o_bias = m.mlp_bias = contains(lower(text_of(arch, "bias")), "on");
      if (contains(lower(text_of(arch, "pos")), "learned")) m.learned_positions = int_of(r, "seq_len", 0);
      m.layer_kinds.assign(static_cast<std::size_t>(m.num_layers), LayerKind::dense);
      validate_model(m);
      const Inventory inv = build_inventory(m);
      const Profile& profile = fw == Framework::torchtitan ? torchtitan_profile() : megatron_profile();

      ParallelConfig p;
      p.tp = int_of(r, "tp", 1);
      p.pp = int_of(r, "pp", 1);
      p.dp = int_of(r, "dp", 1);
      p.cp = int_of(r, "cp", 1);
      p.sp = fw == Framework::torchtitan ? p.tp > 1 : (r.value("sp", json(false)).is_boolean() && r["sp"].get<bool>() && p.tp > 1);
      p.vpp = int_of(r, "vpp", 1);
      if (p.vpp > 1) p.schedule = Schedule::interleaved;
      const Layout layout = resolve_layout(m, p);

      TrainingConfig t;
      t.precision = profile.default_precision;
      t.micro_batch = int_of(r, "micro_batch_size", 1);
      t.seq_len = int_of(r, "seq_len", 4096);
      if (const auto g = int_of(r, "global_batch_size", 0); g > 0) t.global_batch = g;
      const std::string rc = lower(text_of(r, "recompute"));
      if (rc.rfind("full", 0) == 0) t.recompute = Recompute::full;
      else if (rc.rfind("selective", 0) == 0) t.recompute = Recompute::selective;
      const json settings = r.value("other_settings", json::object());
      if (fw == Framework::torchtitan) {
        // torchtitan's pipeline splits the local batch into as many micro-batches as stages.
        if (p.pp > 1 && r.value("micro_batch_size", json()).is_null() && t.global_batch) {
          t.micro_batch = *t.global_batch / p.dp / p.pp;
        }
        t.dp_replicate = std::max<std::int64_t>(1, int_of(r, "dp_replicate", 1));
        t.compile = settings.value("torch_compile", json(false)).is_boolean() && settings["torch_compile"].get<bool>();
        const std::string fp8 = lower(text_of(settings, "float8"));
        if (!fp8.empty() && fp8 != "false") t.fp8 = Fp8Recipe::tensorwise;  // rowwise keeps the same saved tensors
        t.fsdp_float8_all_gather = t.fp8 != Fp8Recipe::none && (contains(fp8, "fsdp_float8_all_gather") ||
                                                                contains(fp8, "fsdp float8 all-gather"));
        const std::string loss = lower(text_of(settings, "loss"));
        if (contains(loss, "chunked")) t.loss = LossImpl::chunked;
        else t.loss = t.compile && torchtitan_compiles_loss(version_date(r)) ? LossImpl::fused : LossImpl::upcast;
        const std::string reshard = lower(text_of(r, "fsdp_reshard_after_forward"));
        t.reshard = contains(reshard, "always") ? ReshardPolicy::always
                    : contains(reshard, "never") ? ReshardPolicy::never : ReshardPolicy::standard;
      } else if (contains(lower(text_of(r, "zero_or_dist_opt")), "distributed optimizer")) {
        t.zero = 1;
      }

      const MemoryReport rep = analyze(m, inv, profile, layout, t);
      const bool last_rank = lower(text_of(r, "measured_rank")).find("last") != std::string::npos;
      const std::size_t s = last_rank ? rep.stages.size() - 1 : static_cast<std::size_t>(rep.peak_stage);
      const auto& b = rep.stages[s].bytes;
      v.predicted = v.metric == "allocated" ? b.allocated() : v.metric == "reserved" ? b.reserved() : b.total();
      v.error_pct = 100.0 * (static_cast<double>(v.predicted->value()) - static_cast<double>(v.measured.value())) /
                    static_cast<double>(v.measured.value());
      std::vector<std::pair<Bytes, const char*>> terms = {{b.weights, "weights"},     {b.gradients, "gradients"},
                                                          {b.optimizer, "optimizer"}, {b.activations, "activations"},
                                                          {b.fragmentation, "fragmentation"}, {b.runtime, "runtime"}};
      std::sort(terms.begin(), terms.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
      v.dominant = fmt::format("stage {}: {} {:.1f}, {} {:.1f}, {} {:.1f} GiB", s, terms[0].second, terms[0].first.gib(),
                               terms[1].second, terms[1].first.gib(), terms[2].second, terms[2].first.gib());
      v.reason = approx;
    } catch (const InputError& e) {
      v.reason = fmt::format("configuration not representable: {}", e.what());
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<ValidationSummary> summarize(const std::vector<ValidationResult>& results) {
  std::map<std::string, std::vector<double>> errors;
  std::map<std::string, std::int64_t> counts;
  std::vector<std::string> order;
  for (const auto& r : results) {
    for (const std::string& f : {r.family, std::string("all")}) {
      if (!counts.contains(f)) order.push_back(f);
      ++counts[f];
      if (r.error_pct) errors[f].push_back(std::fabs(*r.error_pct));
    }
  }
  std::vector<ValidationSummary> out;
  for (const auto& f : order) {
    ValidationSummary s;
    s.family = f;
    s.records = counts[f];
    auto e = errors[f];
    s.predicted = static_cast<std::int64_t>(e.size());
    if (!e.empty()) {
      std::sort(e.begin(), e.end());
      s.median_abs_error = e.size() % 2 == 1 ? e[e.size() / 2] : (e[e.size() / 2 - 1] + e[e.size() / 2]) / 2;
      s.max_abs_error = e.back();
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace moemem
