// `moemem compare A.json B.json`: two analyze --format json reports side by side, stage by stage:
// each category's bytes in B minus A, and the peaks. Stages one report has and the other lacks
// (different pp) are listed with the missing side empty.
#include "cli/compare.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "moemem/units.hpp"
#include "moemem/errors.hpp"
#include "moemem/json_limits.hpp"

namespace moemem::cli {

namespace {

// The device categories and their total, then host memory (offloaded states, outside the total;
// 0 in a report from before it had the key).
constexpr std::array<const char*, 9> kKeys{"weights", "gradients", "optimizer", "activations", "buffers",
                                           "fragmentation", "runtime", "total", "host"};
constexpr std::size_t kTotal = 7, kHost = 8;

// One report's per-stage bytes (kKeys order), model, profile and peak.
struct Side {
  std::string path, model, profile;
  std::vector<std::array<std::int64_t, kKeys.size()>> stages;
  std::int64_t peak_stage = 0, peak_bytes = 0;
};

Side read_report(const std::string& path) {
  const std::string text = read_text_file(path, "compare");
  // A report is a few hundred KB and 5 levels deep; the limits keep a hostile file from the stack.
  check_json_limits(text, JsonLimits{std::size_t{64} << 20, 16}, path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw InputError(path, "not JSON", "the output of moemem analyze --format json");
  }
  if (!j.is_object() || j.value("schema", nlohmann::json()) != "moemem.report/1") {
    throw InputError(path, j.is_object() ? j.value("schema", nlohmann::json()).dump() : "not an object",
                     "an analyze --format json report (schema \"moemem.report/1\")");
  }
  const auto text_of = [&](const nlohmann::json& v, const std::string& field) {
    if (!v.is_string()) throw InputError(path, fmt::format("{} = {}", field, v.dump()), "a string");
    return v.get<std::string>();
  };
  // Byte counts and stage numbers are exact non-negative integers; a float, a negative number or
  // one past 2^62 bytes (4 EiB, more than any report holds) is a corrupt report, never wrapped.
  const auto count_of = [&](const nlohmann::json& v, const std::string& field) {
    constexpr std::uint64_t kMost = std::uint64_t{1} << 62;
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > kMost) {
      throw InputError(path, fmt::format("{} = {}", field, v.dump()),
                       "a non-negative integer up to 2^62 (a byte count or stage number from analyze --format json)");
    }
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  };
  const auto member = [&](const nlohmann::json& parent, const char* key, const std::string& field) -> const nlohmann::json& {
    if (!parent.is_object() || !parent.contains(key)) {
      throw InputError(path, fmt::format("{} missing", field), "an analyze --format json report with its stages' bytes and peak");
    }
    return parent.at(key);
  };
  Side s{path, text_of(member(member(j, "model", "model"), "name", "model.name"), "model.name"),
         text_of(member(j, "profile", "profile"), "profile"), {}, 0, 0};
  const nlohmann::json& stages = member(j, "stages", "stages");
  if (!stages.is_array() || stages.empty()) {
    throw InputError(path, fmt::format("stages = {}", stages.is_array() ? "[]" : stages.dump()), "a non-empty list of stages");
  }
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::string at = fmt::format("stages[{}].bytes", i);
    const nlohmann::json& bytes = member(stages[i], "bytes", at);
    auto& row = s.stages.emplace_back();
    for (std::size_t k = 0; k < kKeys.size(); ++k) {
      const std::string field = fmt::format("{}.{}", at, kKeys[k]);
      if (std::string_view(kKeys[k]) == "host" && bytes.is_object() && !bytes.contains("host")) {
        row[k] = 0;
        continue;
      }
      row[k] = count_of(member(bytes, kKeys[k], field), field);
    }
  }
  const nlohmann::json& peak = member(j, "peak", "peak");
  s.peak_stage = count_of(member(peak, "stage", "peak.stage"), "peak.stage");
  s.peak_bytes = count_of(member(peak, "total_bytes", "peak.total_bytes"), "peak.total_bytes");
  if (static_cast<std::size_t>(s.peak_stage) >= s.stages.size()) {
    throw InputError(path, fmt::format("peak.stage = {}", s.peak_stage),
                     fmt::format("a stage of the report (0 to {})", s.stages.size() - 1));
  }
  return s;
}

nlohmann::json side_json(const Side& s) {
  return {{"path", s.path}, {"model", s.model}, {"profile", s.profile}, {"stages", s.stages.size()},
          {"peak_stage", s.peak_stage}, {"peak_bytes", s.peak_bytes}};
}

nlohmann::json bytes_json(const std::array<std::int64_t, kKeys.size()>& row) {
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t k = 0; k < kKeys.size(); ++k) j[kKeys[k]] = row[k];
  return j;
}

nlohmann::json compare_json(const Side& a, const Side& b) {
  nlohmann::json stages = nlohmann::json::array();
  const std::size_t n = std::max(a.stages.size(), b.stages.size());
  for (std::size_t i = 0; i < n; ++i) {
    const bool in_a = i < a.stages.size(), in_b = i < b.stages.size();
    nlohmann::json row = {{"stage", i}, {"a", in_a ? bytes_json(a.stages[i]) : nlohmann::json()},
                          {"b", in_b ? bytes_json(b.stages[i]) : nlohmann::json()}, {"diff", nlohmann::json()}};
    if (in_a && in_b) {
      std::array<std::int64_t, kKeys.size()> diff{};
      for (std::size_t k = 0; k < kKeys.size(); ++k) diff[k] = b.stages[i][k] - a.stages[i][k];
      row["diff"] = bytes_json(diff);
    }
    stages.push_back(row);
  }
  return {{"schema", "moemem.compare/1"}, {"a", side_json(a)}, {"b", side_json(b)}, {"stages", stages},
          {"peak_diff_bytes", b.peak_bytes - a.peak_bytes}};
}

std::string signed_gib(std::int64_t bytes) { return fmt::format("{:+.2f}", static_cast<double>(bytes) / kBytesPerGiB); }

Table compare_table(const Side& a, const Side& b) {
  Table t;
  t.title = fmt::format("B - A per stage, GiB (2^30 bytes); A = {} ({}), B = {} ({})", a.path, a.model, b.path, b.model);
  t.columns = {"stage", "A total", "B total", "B - A"};
  for (std::size_t k = 0; k < kTotal; ++k) t.columns.emplace_back(kKeys[k]);
  t.columns.emplace_back("host (not in total)");
  const std::size_t n = std::max(a.stages.size(), b.stages.size());
  for (std::size_t i = 0; i < n; ++i) {
    const bool in_a = i < a.stages.size(), in_b = i < b.stages.size();
    std::vector<Cell> row;
    row.emplace_back(static_cast<std::int64_t>(i));
    const auto total = [](const auto& side, std::size_t s) { return GibBytes{static_cast<std::uint64_t>(side.stages[s][kTotal])}; };
    row.emplace_back(in_a ? Cell(total(a, i)) : Cell(std::string("-")));
    row.emplace_back(in_b ? Cell(total(b, i)) : Cell(std::string("-")));
    // The total's difference, then each category's, then the host's.
    for (const std::size_t key : {kTotal, 0ul, 1ul, 2ul, 3ul, 4ul, 5ul, 6ul, kHost}) {
      row.emplace_back(in_a && in_b ? signed_gib(b.stages[i][key] - a.stages[i][key]) : std::string("-"));
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

}  // namespace

void CompareCommand::setup(CLI::App& root) {
  app = root.add_subcommand("compare", "Per-stage differences between two analyze --format json reports (B - A)");
  // Not required() by CLI11, whose error would say only "b is required": run() names both.
  app->add_option("a", a, "The first report (analyze --format json output)");
  app->add_option("b", b, "The second report");
  add_format_option(*app, format);
}

void CompareCommand::run(std::ostream& out, std::ostream&) const {
  if (a.empty() || b.empty()) {
    throw InputError("compare", a.empty() ? "no report" : fmt::format("one report ({})", a),
                     "two reports, A.json B.json, each the output of moemem analyze --format json (compare prints B - A)");
  }
  const Format f = parse_format(format);
  const Side sa = read_report(a), sb = read_report(b);
  if (f == Format::json) {
    out << json_text(compare_json(sa, sb), 2) << "\n";
    return;
  }
  if (f == Format::csv) {
    // Exact bytes: B - A of each category, both totals.
    Table t;
    t.columns = {"stage", "a_total_bytes", "b_total_bytes"};
    for (const char* k : kKeys) t.columns.push_back(fmt::format("diff_{}_bytes", k));
    const auto j = compare_json(sa, sb);
    for (const auto& s : j.at("stages")) {
      std::vector<Cell> row{Cell(s.at("stage").get<std::int64_t>())};
      for (const char* side : {"a", "b"}) {
        row.emplace_back(s.at(side).is_null() ? Cell(std::string()) : Cell(s.at(side).at("total").get<std::int64_t>()));
      }
      for (const char* k : kKeys) {
        row.emplace_back(s.at("diff").is_null() ? Cell(std::string()) : Cell(s.at("diff").at(k).get<std::int64_t>()));
      }
      t.rows.push_back(std::move(row));
    }
    render(t, f, out);
    return;
  }
  render(compare_table(sa, sb), f, out);
  out << fmt::format("peak: A stage {} {:.2f} GiB, B stage {} {:.2f} GiB, B - A {} GiB\n", sa.peak_stage,
                     static_cast<double>(sa.peak_bytes) / kBytesPerGiB, sb.peak_stage,
                     static_cast<double>(sb.peak_bytes) / kBytesPerGiB, signed_gib(sb.peak_bytes - sa.peak_bytes));
}

}  // namespace moemem::cli
