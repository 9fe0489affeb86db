#include "moemem/validate.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "moemem/analyze.hpp"
#include "moemem/errors.hpp"

namespace moemem {

namespace {

using nlohmann::json;

// One line of the set as a record of the schema; throws InputError naming the line.
json parse_record(std::string_view line, const std::string& source, std::size_t line_no) {
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

// The ordinary path: make_scenario, analyze, then the measured quantity on the measured rank.
void predict(const RecordRequest& rr, ValidationResult& v) {
  const Scenario s = make_scenario(rr.request);
  const MemoryReport rep = analyze(s.model, s.inventory, *s.profile, s.layout, s.training);
  const std::size_t stage = rr.last_rank ? rep.stages.size() - 1 : static_cast<std::size_t>(rep.peak_stage);
  const StageBytes& b = rep.stages[stage].bytes;
  v.predicted = rr.metric == "allocated" ? b.allocated() : rr.metric == "reserved" ? b.reserved() : b.total();
  v.error_pct = 100.0 * (static_cast<double>(v.predicted->value()) - static_cast<double>(v.measured.value())) /
                static_cast<double>(v.measured.value());
  v.dominant = dominant_terms(b, stage);
  v.reason = rr.notes;
}

// A record's result: the measurement, then a prediction or the reason there is none.
ValidationResult evaluate(const json& r, ValidationResult v) {
  v.family = record_family(r);
  v.metric = record_metric(r);
  const auto& gib = r.at("measured_gib_normalized");
  if (!gib.is_number()) {
    v.reason = "no measured value in the record";
    return v;
  }
  v.measured = Bytes(static_cast<std::uint64_t>(std::llround(gib.get<double>() * kBytesPerGiB)));
  const auto request = record_request(r);
  if (const auto* why = std::get_if<std::string>(&request)) {
    v.reason = *why;
    return v;
  }
  try {
    predict(std::get<RecordRequest>(request), v);
  } catch (const InputError& e) {
    v.reason = fmt::format("configuration not representable: {}", e.what());
  }
  return v;
}

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
    const json r = parse_record(line, source, line_no);
    ValidationResult v;
    v.id = record_text(r, "id");
    v.confidence = record_text(r, "confidence");
    const Confidence c = v.confidence.empty() ? Confidence::low : parse_confidence(v.confidence, "confidence");
    if (c < min) continue;
    out.push_back(evaluate(r, std::move(v)));
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
