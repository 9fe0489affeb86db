// `moemem validate --throughput`: the step-time model against published training throughput
// (tests/data/validation/throughput.jsonl). Each record's analyze arguments take the ordinary path
// (record_request_of, make_scenario); the prediction is the step-time model's tokens/s per GPU.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "moemem/errors.hpp"
#include "moemem/step_time.hpp"

namespace moemem::cli {

namespace {

struct ThroughputResult {
  std::string id, source, gpu;
  double measured = 0, predicted = 0, error_pct = 0, mfu = 0;
};

// One record: its fields checked (errors name the line and the field), then predicted.
ThroughputResult evaluate_record(const nlohmann::json& r, std::size_t line, const std::string& set_dir) {
  const auto field = [&](const char* name) { return fmt::format("line {} {}", line, name); };
  if (!r.is_object()) throw InputError(field("record"), r.dump().substr(0, 80), "a JSON object");
  ThroughputResult out;
  const auto text = [&](const nlohmann::json& o, const char* name) {
    if (!o.contains(name) || !o.at(name).is_string()) throw InputError(field(name), "missing", "a string");
    return o.at(name).get<std::string>();
  };
  out.id = text(r, "id");
  out.source = text(r, "source");
  const auto m = r.find("measured_tokens_per_second_per_gpu");
  if (m == r.end() || !m->is_number() || !(m->get<double>() > 0)) {
    throw InputError(field("measured_tokens_per_second_per_gpu"), m == r.end() ? "missing" : m->dump(), "a positive number");
  }
  out.measured = m->get<double>();
  if (!r.contains("moemem") || !r.at("moemem").is_object()) throw InputError(field("moemem"), "missing", "an object with model, gpu, args");
  const auto& mm = r.at("moemem");
  RecordSpec spec;
  spec.model = text(mm, "model");
  out.gpu = text(mm, "gpu");
  if (!mm.contains("args") || !mm.at("args").is_array()) throw InputError(field("moemem.args"), "missing", "a list of strings");
  for (const auto& a : mm.at("args")) {
    if (!a.is_string()) throw InputError(field("moemem.args"), a.dump(), "strings");
    spec.args.push_back(a.get<std::string>());
  }
  const Scenario sc = make_scenario(record_request_of(spec, set_dir));
  const CompiledModel cm = compile_model(sc.model, sc.inventory, *sc.profile);
  const StepTime st = estimate_step_time(make_step_time_model(cm), sc.layout, sc.training, lookup_gpu_perf(out.gpu));
  out.predicted = st.tokens_per_second_per_gpu;
  out.mfu = st.mfu;
  out.error_pct = 100 * (out.predicted - out.measured) / out.measured;
  return out;
}

double median_abs(std::vector<double> v) {
  if (v.empty()) return 0;
  for (auto& x : v) x = std::abs(x);
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int validate_throughput(const ValidateCommand& c, std::ostream& out, std::ostream& err) {
  if (c.format != "table" && c.format != "json" && c.format != "markdown") {
    throw InputError("--format", c.format, "table, json or markdown");
  }
  // Issue 16's thresholds unless given: median <= 15%, max <= 30%.
  const bool given_median = c.app != nullptr && c.app->count("--max-median-error") > 0;
  const bool given_max = c.app != nullptr && c.app->count("--max-error") > 0;
  const double max_median = given_median ? parse_double(c.max_median_error, "--max-median-error") : 15.0;
  const double max_error = given_max ? parse_double(c.max_error, "--max-error") : 30.0;
  if (max_median < 0) throw InputError("--max-median-error", fmt::format("{}", max_median), "a percentage >= 0");
  if (max_error < 0) throw InputError("--max-error", fmt::format("{}", max_error), "a percentage >= 0");
  std::string text, set_dir, source = "the published throughput set (tests/data/validation/throughput.jsonl)";
  if (c.set.empty()) {
    text = std::string(public_throughput_set());
  } else {
    text = read_text_file(c.set, "--set");
    source = c.set;
    set_dir = std::filesystem::path(c.set).parent_path().string();
    if (set_dir.empty()) set_dir = ".";
  }
  std::vector<ThroughputResult> results;
  std::istringstream lines(text);
  std::string line;
  for (std::size_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) throw InputError(fmt::format("line {}", n), line.substr(0, 80), "one JSON object per line");
    results.push_back(evaluate_record(j, n, set_dir));
  }
  std::vector<double> errors;
  for (const auto& r : results) errors.push_back(r.error_pct);
  const double median = median_abs(errors);
  double max = 0;
  for (const auto e : errors) max = std::max(max, std::abs(e));
  const bool pass = !results.empty() && median <= max_median && max <= max_error;
  if (c.format == "json") {
    nlohmann::json records = nlohmann::json::array();
    for (const auto& r : results) {
      records.push_back({{"id", r.id}, {"source", r.source}, {"gpu", r.gpu}, {"measured_tokens_per_second_per_gpu", r.measured},
                         {"predicted_tokens_per_second_per_gpu", r.predicted}, {"error_pct", r.error_pct}, {"mfu", r.mfu}});
    }
    out << json_text({{"schema", "moemem.validate-throughput/1"}, {"source", source}, {"records", records},
                      {"summary", {{"records", results.size()}, {"median_abs_error_pct", median}, {"max_abs_error_pct", max},
                                   {"max_median_error_pct", max_median}, {"max_error_pct", max_error}, {"pass", pass}}}},
                     2)
        << "\n";
  } else {
    Table t;
    t.title = fmt::format("Step-time model against {}", source);
    t.columns = {"id", "gpu", "measured tok/s/GPU", "predicted", "error %", "MFU"};
    for (const auto& r : results) {
      std::vector<Cell> row;
      row.emplace_back(r.id);
      row.emplace_back(r.gpu);
      row.emplace_back(fmt::format("{:.0f}", r.measured));
      row.emplace_back(fmt::format("{:.0f}", r.predicted));
      row.emplace_back(fmt::format("{:+.1f}", r.error_pct));
      row.emplace_back(fmt::format("{:.1f}%", 100 * r.mfu));
      t.rows.push_back(std::move(row));
    }
    render(t, c.format == "markdown" ? Format::markdown : Format::table, out);
    out << fmt::format("{} records: median |error| {:.1f}%, max {:.1f}%; thresholds median <= {}%, max <= {}% -> {}\n",
                       results.size(), median, max, max_median, max_error, pass ? "PASS" : "FAIL");
  }
  if (!pass) err << "moemem validate --throughput: the predictions exceed the thresholds (or there are none)\n";
  return pass ? 0 : 4;
}

}  // namespace moemem::cli
