// `moemem validate`: predictions against published measurements, failing past thresholds. Each
// record's moemem object (model and analyze arguments) is parsed exactly as `moemem analyze`
// parses its command line, so a record takes the ordinary path.
#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/validate.hpp"

namespace moemem::cli {

namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The text of a record's model file: compiled in for the public set, else beside the set's file.
std::string model_text(const std::string& model, const std::string& set_dir) {
  if (set_dir.empty()) {
    if (const auto text = public_set_model(model)) return std::string(*text);
    throw InputError("moemem.model", model, "a preset or a file in tests/data/validation/models/");
  }
  return read_text_file((std::filesystem::path(set_dir) / model).string(), "moemem.model");
}

}  // namespace

// The arguments parsed as analyze's command line; the model a preset, a config.json (.json) or a
// Megatron argument file (.args, read as --megatron-args reads one).
Request record_request_of(const RecordSpec& spec, const std::string& set_dir) {
  CLI::App root;
  AnalyzeCommand cmd;
  cmd.setup(root);
  std::vector<std::string> argv = {"analyze"};
  argv.insert(argv.end(), spec.args.begin(), spec.args.end());
  std::reverse(argv.begin(), argv.end());  // CLI11 parses a vector from its back
  try {
    root.parse(argv);
  } catch (const CLI::ParseError& e) {
    throw InputError("moemem.args", fmt::format("{}", fmt::join(spec.args, " ")), fmt::format("analyze's arguments ({})", e.what()));
  }
  if (cmd.app->count("--model") > 0 || cmd.app->count("--megatron-args") > 0) {
    throw InputError("moemem.args", "--model/--megatron-args", "the model in moemem.model only");
  }
  const std::vector<std::string> presets = preset_names();
  const bool preset = std::find(presets.begin(), presets.end(), spec.model) != presets.end();
  if (preset) {
    cmd.model.model = spec.model;
  } else if (ends_with(spec.model, ".json")) {
    cmd.model.spec = parse_hf_config(model_text(spec.model, set_dir), spec.model);
  } else if (ends_with(spec.model, ".args")) {
    cmd.megatron.path = spec.model;
    std::ostringstream notes;  // the script's notes: flags it ignores (the record's model files have none)
    read_megatron_text(cmd, model_text(spec.model, set_dir), notes);
  } else {
    throw InputError("moemem.model", spec.model, "a preset name, or models/<file>.json or models/<file>.args");
  }
  return to_request(cmd.model, cmd.layout, cmd.training, cmd.megatron);
}

std::optional<Band> measured_band(const std::string& profile, const std::string& metric) {
  static const std::map<std::pair<std::string, std::string>, Band> bands = [] {
    std::map<std::pair<std::string, std::string>, Band> out;
    const RequestBuilder build = [](const RecordSpec& spec) { return record_request_of(spec, ""); };
    const auto add = [&](const ValidationResult& r, bool own) {
      if (!r.error_pct) return;
      // measured / predicted - 1, from (predicted - measured) / measured = e: 1 / (1 + e) - 1.
      const double off = 100.0 * (1.0 / (1.0 + *r.error_pct / 100.0) - 1.0);
      Band& b = out[{r.profile, r.metric}];
      b.low_pct = b.records == 0 ? off : std::min(b.low_pct, off);
      b.high_pct = b.records == 0 ? off : std::max(b.high_pct, off);
      ++b.records;
      b.own += own ? 1 : 0;
    };
    for (const auto& r : validate_records(public_measurement_set(), "public set", Confidence::medium, build)) add(r, false);
    for (const auto& r : validate_records(device_measurement_set(), "device set", Confidence::high, build)) add(r, true);
    return out;
  }();
  const auto it = bands.find({profile, metric});
  if (it == bands.end()) return std::nullopt;
  return it->second;
}

namespace {

const ValidationSummary* group(const std::vector<ValidationSummary>& summary, const std::string& name) {
  for (const auto& s : summary) {
    if (s.group == name) return &s;
  }
  return nullptr;
}

}  // namespace

void ValidateCommand::setup(CLI::App& root) {
  app = root.add_subcommand("validate", "Predictions against published per-GPU memory measurements");
  app->add_option("--set", set, "A measurement file (JSON lines, the schema of the public set; default: the public set)");
  app->add_option("--min-confidence", min_confidence, "Records to include: high|medium|low")->capture_default_str();
  app->add_option("--max-median-error", max_median_error, "Largest median absolute error of allocated and reserved records, percent")
      ->capture_default_str();
  app->add_option("--max-error", max_error, "Largest absolute error of any allocated or reserved record, percent")->capture_default_str();
  app->add_option("--max-device-median-error", max_device_median_error, "Largest median absolute error of device totals, percent")
      ->capture_default_str();
  app->add_option("--min-mean-error", min_mean_error, "Smallest mean signed error of all records, percent (negative: predictions low)")
      ->capture_default_str();
  app->add_option("--format", format, "table|json|markdown")->capture_default_str();
  app->add_flag("--throughput", throughput, "The step-time model against published throughput (tokens/s per GPU); "
                                            "thresholds median 15%, max 30% unless given");
}

namespace {

struct Thresholds {
  double median = 0, max = 0, device_median = 0, min_mean = 0;
};

// Within the thresholds: allocated and reserved records by median and max, device totals by
// median, and all together by mean signed error (predictions may not lean low).
bool passes(const std::vector<ValidationSummary>& summary, const Thresholds& t) {
  const ValidationSummary* all = group(summary, "all");
  const ValidationSummary* pooled = group(summary, "metric allocated+reserved");
  const ValidationSummary* device = group(summary, "metric device-used");
  if (all == nullptr || (all->predicted == 0 && all->oom_checks == 0)) return false;
  if (pooled && pooled->predicted > 0 && (pooled->median_abs_error > t.median || pooled->max_abs_error > t.max)) return false;
  if (device && device->predicted > 0 && device->median_abs_error > t.device_median) return false;
  // A run that ran out of memory and is predicted to fit is a miss, whatever the thresholds.
  return all->oom_missed == 0 && all->mean_signed_error >= t.min_mean;
}

nlohmann::json json_of(const std::vector<ValidationResult>& results, const std::vector<ValidationSummary>& summary,
                       const Thresholds& t, const std::string& source, bool pass) {
  nlohmann::json records = nlohmann::json::array(), groups = nlohmann::json::array();
  const auto or_null = [](const auto& o) { return o ? nlohmann::json(*o) : nlohmann::json(); };
  for (const auto& r : results) {
    records.push_back({{"id", r.id},
                       {"family", r.family},
                       {"confidence", r.confidence},
                       {"metric", r.metric},
                       {"measured_bytes", r.predicted || r.measured.value() > 0 ? nlohmann::json(r.measured.value()) : nlohmann::json()},
                       {"predicted_bytes", r.predicted ? nlohmann::json(r.predicted->value()) : nlohmann::json()},
                       {"error_pct", or_null(r.error_pct)},
                       {"reason", r.reason.empty() ? nlohmann::json() : nlohmann::json(r.reason)},
                       {"oom_consistent", or_null(r.oom_consistent)},
                       {"dominant", r.dominant}});
  }
  for (const auto& s : summary) {
    groups.push_back({{"group", s.group}, {"records", s.records}, {"predicted", s.predicted},
                      {"median_abs_error_pct", s.median_abs_error}, {"max_abs_error_pct", s.max_abs_error},
                      {"mean_signed_error_pct", s.mean_signed_error}, {"min_signed_error_pct", s.min_signed_error},
                      {"max_signed_error_pct", s.max_signed_error}, {"oom_checks", s.oom_checks},
                      {"oom_missed", s.oom_missed}});
  }
  return {{"schema", "moemem.validate/2"},
          {"source", source},
          {"records", records},
          {"summary", {{"groups", groups}, {"max_median_error_pct", t.median}, {"max_error_pct", t.max},
                       {"max_device_median_error_pct", t.device_median}, {"min_mean_error_pct", t.min_mean}, {"pass", pass}}}};
}

void print_tables(const std::vector<ValidationResult>& results, const std::vector<ValidationSummary>& summary,
                  const std::string& title, Format f, std::ostream& out) {
  Table t;
  t.title = title;
  t.columns = {"id", "family", "metric", "measured", "predicted", "error %", "largest terms / reason"};
  for (const auto& r : results) {
    std::vector<Cell> row;
    row.emplace_back(r.id);
    row.emplace_back(r.family);
    row.emplace_back(r.metric);
    row.emplace_back(r.measured.value() > 0 ? fmt::format("{:.2f}", r.measured.gib()) : std::string("-"));
    row.emplace_back(r.predicted ? fmt::format("{:.2f}", r.predicted->gib()) : std::string("-"));
    row.emplace_back(r.error_pct ? fmt::format("{:+.1f}", *r.error_pct)
                     : r.oom_consistent ? std::string(*r.oom_consistent ? "OOM ok" : "OOM MISSED")
                                        : std::string("-"));
    row.emplace_back(r.predicted ? r.dominant + (r.reason.empty() ? "" : " (" + r.reason + ")") : "not representable: " + r.reason);
    t.rows.push_back(std::move(row));
  }
  render(t, f, out);
  Table s;
  s.title = "Summary: error of the predicted records, percent (per family, per metric, all)";
  s.columns = {"group", "records", "predicted", "median |e|", "max |e|", "mean signed", "signed range"};
  for (const auto& x : summary) {
    std::vector<Cell> row;
    row.emplace_back(x.group);
    row.emplace_back(x.records);
    row.emplace_back(x.predicted);
    row.emplace_back(fmt::format("{:.1f}", x.median_abs_error));
    row.emplace_back(fmt::format("{:.1f}", x.max_abs_error));
    row.emplace_back(fmt::format("{:+.1f}", x.mean_signed_error));
    row.emplace_back(fmt::format("{:+.1f} .. {:+.1f}", x.min_signed_error, x.max_signed_error));
    s.rows.push_back(std::move(row));
  }
  render(s, f, out);
}

}  // namespace

int ValidateCommand::run(std::ostream& out, std::ostream& err) const {
  if (throughput) return validate_throughput(*this, out, err);
  if (format != "table" && format != "json" && format != "markdown") throw InputError("--format", format, "table, json or markdown");
  const Confidence min = parse_confidence(min_confidence, "--min-confidence");
  const Thresholds t{parse_double(max_median_error, "--max-median-error"), parse_double(max_error, "--max-error"),
                     parse_double(max_device_median_error, "--max-device-median-error"),
                     parse_double(min_mean_error, "--min-mean-error")};
  for (const auto& [v, flag] : {std::pair{t.median, "--max-median-error"}, std::pair{t.max, "--max-error"},
                                 std::pair{t.device_median, "--max-device-median-error"}}) {
    if (v < 0) throw InputError(flag, fmt::format("{}", v), "a percentage >= 0");
  }
  std::string text, set_dir;
  std::string source = "the public set (tests/data/validation/measured-public.jsonl)";
  if (set.empty()) {
    text = std::string(public_measurement_set());
  } else {
    text = read_text_file(set, "--set");
    source = set;
    set_dir = std::filesystem::path(set).parent_path().string();
    if (set_dir.empty()) set_dir = ".";
  }
  const RequestBuilder build = [&](const RecordSpec& spec) { return record_request_of(spec, set_dir); };
  const auto results = validate_records(text, set.empty() ? "public set" : set, min, build);
  const auto summary = summarize(results);
  const bool pass = passes(summary, t);
  if (format == "json") {
    out << json_text(json_of(results, summary, t, source, pass), 2) << "\n";
  } else {
    print_tables(results, summary, fmt::format("Predictions against {} (confidence >= {}), GiB = 2^30 bytes", source, min_confidence),
                 format == "markdown" ? Format::markdown : Format::table, out);
    if (const ValidationSummary* all = group(summary, "all"); all != nullptr && all->oom_checks > 0) {
      out << fmt::format("runs that ran out of memory: {}, predicted to fit anyway: {}\n", all->oom_checks, all->oom_missed);
    }
    out << fmt::format("thresholds: allocated and reserved median <= {}%, max <= {}%; device totals median <= {}%; mean signed >= {}% -> {}\n",
                       t.median, t.max, t.device_median, t.min_mean, pass ? "PASS" : "FAIL");
  }
  if (!pass) err << "moemem validate: the predictions exceed the thresholds (or none could be made)\n";
  return pass ? 0 : 4;
}

}  // namespace moemem::cli
