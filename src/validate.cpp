#include "moemem/validate.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "moemem/analyze.hpp"
#include "moemem/errors.hpp"
#include "moemem/json_limits.hpp"

namespace moemem {

namespace {

using nlohmann::json;

// One line of the set as a record of the schema; throws InputError naming the line.
json parse_record(std::string_view line, const std::string& source, std::size_t line_no) {
  check_json_limits(line, kRecordJsonLimits, fmt::format("{} line {}", source, line_no));
  json r;
  try {
    r = json::parse(line);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{} line {}", source, line_no), fmt::format("malformed JSON at byte {}", e.byte),
                     "one JSON object per line");
  } catch (const json::out_of_range&) {
    // nlohmann's number overflow (e.g. 1e400) is an out_of_range, not a parse_error.
    throw InputError(fmt::format("{} line {}", source, line_no), "a number beyond a 64-bit float",
                     "one JSON object per line with finite numbers");
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{} line {}", source, line_no), e.what(), "one JSON object per line");
  }
  if (!r.is_object() || !r.contains("id") || !r.contains("measured_gib_normalized") || !r.contains("metric_kind")) {
    throw InputError(fmt::format("{} line {}", source, line_no), "a record without id, metric_kind or measured_gib_normalized",
                     "records of the measured-public.jsonl schema");
  }
  // A measurement is a positive size (or null: none published); a negative one used to wrap to
  // 2^64 bytes, zero gave null errors.
  const json& gib = r.at("measured_gib_normalized");
  if (!gib.is_null() && (!gib.is_number() || !(gib.get<double>() > 0.0) || gib.get<double>() > 1e6)) {
    throw InputError(fmt::format("{} line {}: measured_gib_normalized", source, line_no), gib.dump(),
                     "a positive size in GiB below 1,000,000, or null when none was published");
  }
  return r;
}

// The three largest terms of a stage, e.g. "stage 0: activations 54.8, fragmentation 12.1, ...".
std::string dominant_terms(const StageBytes& b, std::size_t stage) {
  std::vector<std::pair<Bytes, const char*>> terms = {{b.weights, "weights"},     {b.gradients, "gradients"},
                                                      {b.optimizer, "optimizer"}, {b.activations, "activations"},
                                                      {b.fragmentation, "fragmentation"}, {b.runtime, "runtime"}};
  std::sort(terms.begin(), terms.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  return fmt::format("stage {}: {} {:.1f}, {} {:.1f}, {} {:.1f} GiB", stage, terms[0].second, terms[0].first.gib(),
                     terms[1].second, terms[1].first.gib(), terms[2].second, terms[2].first.gib());
}

// The quantity measured on the stage measured.
Bytes predicted_of(const MemoryReport& rep, const RecordSpec& spec, const std::string& id, const std::string& metric,
                   std::size_t& stage) {
  stage = spec.stage == "peak" ? static_cast<std::size_t>(rep.peak_stage)
          : spec.stage == "last" ? rep.stages.size() - 1 : static_cast<std::size_t>(std::stoul(spec.stage));
  if (stage >= rep.stages.size()) {
    throw InputError(fmt::format("{}: moemem.stage", id), spec.stage, fmt::format("a stage below {}", rep.stages.size()));
  }
  const StageBytes& b = rep.stages[stage].bytes;
  return metric == "allocated" ? b.allocated() : metric == "reserved" ? b.reserved() : b.total();
}

// The record's results, one per measurement: the ordinary path (the builder's Request,
// make_scenario, analyze), or the reason there is no prediction.
void evaluate(const json& r, const ValidationResult& base, const RequestBuilder& build, std::vector<ValidationResult>& out) {
  const auto spec = record_spec(r);
  if (const auto* why = std::get_if<std::string>(&spec)) {
    ValidationResult v = base;
    v.metric.assign(1, '-');
    v.reason = *why;
    out.push_back(std::move(v));
    return;
  }
  const RecordSpec& s = std::get<RecordSpec>(spec);
  // Arguments analyze would refuse are a malformed record; a layout or setting moemem cannot
  // evaluate is a record without a prediction, with the reason.
  Request request;
  try {
    request = build(s);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", base.id, e.field()), e.value(), e.accepted());
  }
  std::optional<MemoryReport> rep;
  std::string failure;
  try {
    const Scenario sc = make_scenario(request);
    rep = analyze(sc.model, sc.inventory, *sc.profile, sc.layout, sc.training);
  } catch (const InputError& e) {
    failure = fmt::format("configuration not representable: {}", e.what());
  }
  for (const Measurement& m : s.measurements) {
    // A run that ran out of memory (its bytes the GPU's memory): the device total must exceed it.
    const bool oom = m.metric == "out-of-memory";
    ValidationResult v = base;
    v.profile = request.profile;
    if (!m.label.empty()) v.id.append("#").append(m.label);
    v.metric = m.metric;
    v.measured = m.bytes;
    v.reason = !rep ? failure
               : oom ? fmt::format("model {}; ran out of memory on {:.2f} GiB", s.model, m.bytes.gib())
                     : fmt::format("model {}{}", s.model, s.assumptions.empty() ? "" : "; " + s.assumptions);
    if (rep) {
      std::size_t stage = 0;
      v.predicted = predicted_of(*rep, s, base.id, m.metric, stage);  // device total for out-of-memory
      if (oom) {
        v.oom_consistent = v.predicted->value() > m.bytes.value();
      } else {
        v.error_pct = 100.0 * (static_cast<double>(v.predicted->value()) - static_cast<double>(m.bytes.value())) /
                      static_cast<double>(m.bytes.value());
      }
      v.dominant = dominant_terms(rep->stages[stage].bytes, stage);
    }
    out.push_back(std::move(v));
  }
}

}  // namespace

Confidence parse_confidence(std::string_view text, std::string_view field) {
  if (text == "high") return Confidence::high;
  if (text == "medium") return Confidence::medium;
  if (text == "low") return Confidence::low;
  throw InputError(std::string(field), std::string(text), "high, medium or low");
}

std::vector<ValidationResult> validate_records(std::string_view jsonl, const std::string& source, Confidence min,
                                               const RequestBuilder& build) {
  std::vector<ValidationResult> out;
  std::size_t line_no = 0, start = 0;
  while (start < jsonl.size()) {
    std::size_t end = jsonl.find('\n', start);
    if (end == std::string_view::npos) end = jsonl.size();
    const std::string_view line = jsonl.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const json r = parse_record(line, source, line_no);
    ValidationResult v;
    v.id = record_text(r, "id");
    v.confidence = record_text(r, "confidence");
    v.family = record_family(r);
    const Confidence c = v.confidence.empty() ? Confidence::low
                                              : parse_confidence(v.confidence, fmt::format("{} line {}: confidence", source, line_no));
    if (c < min) continue;
    try {
      evaluate(r, v, build, out);
    } catch (const json::exception& e) {
      // Every field is read with its type checked first; this is the net under that rule.
      throw InputError(fmt::format("{} line {} ({})", source, line_no, v.id), e.what(), "a record of the set's schema");
    }
  }
  return out;
}

std::vector<ValidationSummary> summarize(const std::vector<ValidationResult>& results) {
  std::map<std::string, std::vector<double>> errors;
  std::map<std::string, std::int64_t> counts, ooms, missed;
  std::vector<std::string> order;
  for (const auto& r : results) {
    // Out-of-memory checks have no error to summarise under a metric; family and all count them.
    const std::string metric = r.metric == "-" || r.metric == "out-of-memory" ? "" : "metric " + r.metric;
    // allocated and reserved share thresholds (issue 12); device totals have their own.
    const std::string pooled = r.metric == "allocated" || r.metric == "reserved" ? "metric allocated+reserved" : "";
    for (const std::string& g : {r.family, metric, pooled, std::string("all")}) {
      if (g.empty()) continue;
      if (!counts.contains(g)) order.push_back(g);
      ++counts[g];
      if (r.error_pct) errors[g].push_back(*r.error_pct);
      if (r.oom_consistent) {
        ++ooms[g];
        if (!*r.oom_consistent) ++missed[g];
      }
    }
  }
  // Families in the set's order, then metrics, then all.
  const auto rank = [](const std::string& g) { return g == "all" ? 2 : g.rfind("metric ", 0) == 0 ? 1 : 0; };
  std::stable_sort(order.begin(), order.end(), [&](const std::string& x, const std::string& y) { return rank(x) < rank(y); });
  std::vector<ValidationSummary> out;
  for (const auto& g : order) {
    ValidationSummary s;
    s.group = g;
    s.records = counts[g];
    s.oom_checks = ooms[g];
    s.oom_missed = missed[g];
    const auto& e = errors[g];
    s.predicted = static_cast<std::int64_t>(e.size());
    if (!e.empty()) {
      std::vector<double> abs;
      for (const double x : e) abs.push_back(std::fabs(x));
      std::sort(abs.begin(), abs.end());
      s.median_abs_error = abs.size() % 2 == 1 ? abs[abs.size() / 2] : (abs[abs.size() / 2 - 1] + abs[abs.size() / 2]) / 2;
      s.max_abs_error = abs.back();
      s.mean_signed_error = std::accumulate(e.begin(), e.end(), 0.0) / static_cast<double>(e.size());
      s.min_signed_error = *std::min_element(e.begin(), e.end());
      s.max_signed_error = *std::max_element(e.begin(), e.end());
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace moemem
