// `moemem validate`: predictions against published measurements, failing past thresholds.
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "moemem/errors.hpp"
#include "moemem/validate.hpp"

namespace moemem::cli {

void ValidateCommand::setup(CLI::App& root) {
  app = root.add_subcommand("validate", "Predictions against published per-GPU memory measurements");
  app->add_option("--set", set, "A measurement file (JSON lines, the schema of the public set; default: the public set)");
  app->add_option("--min-confidence", min_confidence, "Records to include: high|medium|low")->capture_default_str();
  app->add_option("--max-median-error", max_median_error, "Largest median absolute error, percent")->capture_default_str();
  app->add_option("--max-error", max_error, "Largest absolute error of any record, percent")->capture_default_str();
  app->add_option("--format", format, "table|json")->capture_default_str();
}

int ValidateCommand::run(std::ostream& out, std::ostream& err) const {
  if (format != "table" && format != "json") throw InputError("--format", format, "table or json");
  const Confidence min = parse_confidence(min_confidence, "--min-confidence");
  const double max_median = parse_double(max_median_error, "--max-median-error");
  const double max_any = parse_double(max_error, "--max-error");
  if (max_median < 0 || max_any < 0) throw InputError("--max-median-error/--max-error", "negative", "percentages >= 0");
  std::string text;
  std::string source = "the public set (tests/data/validation/measured-public.jsonl)";
  if (set.empty()) {
    text = std::string(public_measurement_set());
  } else {
    std::ifstream in(set, std::ios::binary);
    if (!in) throw InputError("--set", set, "a readable measurement file");
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    source = set;
  }
  const auto results = validate_records(text, set.empty() ? "public set" : set, min);
  const auto summary = summarize(results);
  const ValidationSummary* all = nullptr;
  for (const auto& s : summary) {
    if (s.family == "all") all = &s;
  }
  const bool pass = all != nullptr && all->predicted > 0 && all->median_abs_error <= max_median && all->max_abs_error <= max_any;

  if (format == "json") {
    nlohmann::json records = nlohmann::json::array(), sums = nlohmann::json::array();
    for (const auto& r : results) {
      records.push_back({{"id", r.id},
                         {"family", r.family},
                         {"confidence", r.confidence},
                         {"metric", r.metric},
                         {"measured_bytes", r.measured.value()},
                         {"predicted_bytes", r.predicted ? nlohmann::json(r.predicted->value()) : nlohmann::json()},
                         {"error_pct", r.error_pct ? nlohmann::json(*r.error_pct) : nlohmann::json()},
                         {"reason", r.reason.empty() ? nlohmann::json() : nlohmann::json(r.reason)},
                         {"dominant", r.dominant}});
    }
    for (const auto& s : summary) {
      sums.push_back({{"family", s.family}, {"records", s.records}, {"predicted", s.predicted},
                      {"median_abs_error_pct", s.median_abs_error}, {"max_abs_error_pct", s.max_abs_error}});
    }
    out << nlohmann::json{{"schema", "moemem.validate/1"},
                          {"source", source},
                          {"records", records},
                          {"summary", {{"families", sums}, {"max_median_error_pct", max_median},
                                       {"max_error_pct", max_any}, {"pass", pass}}}}
               .dump(2)
        << "\n";
  } else {
    Table t;
    t.title = fmt::format("Predictions against {} (confidence >= {}), GiB = 2^30 bytes", source, min_confidence);
    t.columns = {"id", "family", "metric", "measured", "predicted", "error %", "largest terms / reason"};
    for (const auto& r : results) {
      std::vector<Cell> row;
      row.emplace_back(r.id);
      row.emplace_back(r.family);
      row.emplace_back(r.metric);
      row.emplace_back(GibBytes{r.measured.value()});
      row.emplace_back(r.predicted ? fmt::format("{:.2f}", r.predicted->gib()) : std::string("-"));
      row.emplace_back(r.error_pct ? fmt::format("{:+.1f}", *r.error_pct) : std::string("-"));
      row.emplace_back(r.predicted ? r.dominant + (r.reason.empty() ? "" : " (" + r.reason + ")") : "not representable: " + r.reason);
      t.rows.push_back(std::move(row));
    }
    render(t, Format::table, out);
    Table s;
    s.title = "Summary: absolute error of the predicted records, percent";
    s.columns = {"family", "records", "predicted", "median", "max"};
    for (const auto& x : summary) {
      std::vector<Cell> row;
      row.emplace_back(x.family);
      row.emplace_back(x.records);
      row.emplace_back(x.predicted);
      row.emplace_back(fmt::format("{:.1f}", x.median_abs_error));
      row.emplace_back(fmt::format("{:.1f}", x.max_abs_error));
      s.rows.push_back(std::move(row));
    }
    render(s, Format::table, out);
    out << fmt::format("thresholds: median <= {}%, max <= {}% -> {}\n", max_median, max_any, pass ? "PASS" : "FAIL");
  }
  if (!pass) err << "moemem validate: the predictions exceed the thresholds (or none could be made)\n";
  return pass ? 0 : 4;
}

}  // namespace moemem::cli
