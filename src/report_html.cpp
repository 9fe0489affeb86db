// analyze's and explain's HTML page (report_html.hpp): per-stage stacked bars against the GPU's
// capacity, the uncertainty band, one stage itemised by module and tensor, the assumptions and
// the command. Every text from the report goes through html_escape.
#include "report_html.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "cli/table.hpp"

namespace moemem::cli {

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

std::string shell_quote(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || std::string_view("_./:=,+@%-").find(c) != std::string_view::npos;
  });
  if (plain) return word;
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

std::string command_line(const CLI::App& subcommand) {
  std::string text = "moemem " + subcommand.get_name();
  for (const CLI::Option* o : subcommand.get_options()) {
    if (o->count() == 0 || o->get_lnames().empty()) continue;
    const std::string flag = "--" + o->get_lnames().front();
    if (o->get_expected_max() == 0) {  // a flag: no value
      text += " " + flag;
      continue;
    }
    for (const auto& value : o->results()) text += " " + flag + " " + shell_quote(value);
  }
  return text;
}

namespace html {

void page_open(std::ostream& out, const std::string& title) {
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>" << html_escape(title)
      << "</title>\n<style>\n"
         "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}\n"
         "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}\n"
         "th,td{border:1px solid #ccc;padding:0.2em 0.5em;text-align:right}\n"
         "th{background:#f3f3f3}td.text{text-align:left}\n"
         "pre{background:#f6f6f6;padding:0.6em;white-space:pre-wrap;word-break:break-all}\n"
         "svg text{font-size:12px;font-family:system-ui,sans-serif}\n"
         ".no{color:#b00;font-weight:bold}\n"
         "</style>\n</head>\n<body>\n";
}

void page_close(std::ostream& out) { out << "<p>Drawn by moemem; no script, nothing fetched.</p>\n</body>\n</html>\n"; }

void command_block(std::ostream& out, const std::string& command) {
  out << "<h2>Command</h2>\n<pre><code>" << html_escape(command) << "</code></pre>\n";
}

void list_block(std::ostream& out, const char* heading, const nlohmann::json& strings) {
  if (!strings.is_array() || strings.empty()) return;
  out << "<h2>" << html_escape(heading) << "</h2>\n<ul>\n";
  for (const auto& s : strings) out << "<li>" << html_escape(s.get<std::string>()) << "</li>\n";
  out << "</ul>\n";
}

std::string gib(double bytes) { return fmt::format("{:.2f}", bytes / 1073741824.0); }

double axis_step(double max, int ticks) {
  if (!(max > 0)) return 1;
  const double raw = max / ticks;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (m * decade >= raw) return m * decade;
  }
  return 10 * decade;
}

}  // namespace html

namespace {

// The categories of a stage's device total, bottom to top, with their colours.
struct Category {
  const char* key;
  const char* colour;
};
constexpr std::array<Category, 7> kCategories{{{"weights", "#4e79a7"},
                                               {"gradients", "#f28e2b"},
                                               {"optimizer", "#e15759"},
                                               {"activations", "#76b7b2"},
                                               {"buffers", "#59a14f"},
                                               {"fragmentation", "#edc948"},
                                               {"runtime", "#b07aa1"}}};

double bytes_of(const nlohmann::json& stage, const char* key) { return stage.at("bytes").at(key).get<double>(); }

// The measured band (uncertainty.low_pct/high_pct), as factors on a predicted total.
struct BandFactors {
  double low = 1, high = 1;
  bool known = false;
};
BandFactors band_of(const nlohmann::json& report) {
  const auto it = report.find("uncertainty");
  if (it == report.end() || it->is_null()) return {};
  return {1 + it->at("low_pct").get<double>() / 100, 1 + it->at("high_pct").get<double>() / 100, true};
}

// The chart's frame: plot area and the value (GiB) at its top.
struct Frame {
  double left = 70, top = 20, width = 760, height = 300, max_gib = 1;
  [[nodiscard]] double y(double gib) const { return top + height * (1 - gib / max_gib); }
};

void axis(std::ostream& out, const Frame& f) {
  const double step = html::axis_step(f.max_gib, 6);
  for (double v = 0; v <= f.max_gib + 1e-9; v += step) {
    out << fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", f.left, f.y(v),
                       f.left + f.width, f.y(v));
    out << fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:g} GiB</text>\n", f.left - 6, f.y(v) + 4, v);
  }
}

void capacity_lines(std::ostream& out, const Frame& f, const nlohmann::json& gpu) {
  if (gpu.is_null()) return;
  const double cap = gpu.at("capacity_bytes").get<double>() / 1073741824.0;
  const double usable = gpu.at("usable_bytes").get<double>() / 1073741824.0;
  const std::string name = html_escape(gpu.at("name").get<std::string>());
  out << fmt::format("<line class=\"capacity\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#c00\" "
                     "stroke-width=\"2\"><title>{}: {:.2f} GiB</title></line>\n",
                     f.left, f.y(cap), f.left + f.width, f.y(cap), name, cap);
  out << fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#c00\">{} {:.2f} GiB</text>\n",
                     f.left + f.width, f.y(cap) - 4, name, cap);
  if (usable < cap) {
    out << fmt::format("<line class=\"usable\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#c00\" "
                       "stroke-dasharray=\"6 4\"><title>usable with the measured margin: {:.2f} GiB</title></line>\n",
                       f.left, f.y(usable), f.left + f.width, f.y(usable), usable);
  }
}

// One bar: the categories stacked, an outline of class "stage" (one per stage), and the band.
void stage_bar(std::ostream& out, const Frame& f, const nlohmann::json& stage, double x, double w, BandFactors band) {
  double base = 0;
  const auto id = stage.at("stage").get<std::int64_t>();
  for (const auto& c : kCategories) {
    const double v = bytes_of(stage, c.key) / 1073741824.0;
    if (v <= 0) continue;
    out << fmt::format("<rect class=\"seg {}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">"
                       "<title>stage {} {}: {:.2f} GiB</title></rect>\n",
                       c.key, x, f.y(base + v), w, f.y(base) - f.y(base + v), c.colour, id, c.key, v);
    base += v;
  }
  const double total = bytes_of(stage, "total") / 1073741824.0;
  out << fmt::format("<rect class=\"stage\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
                     "stroke=\"#333\"><title>stage {}: {:.2f} GiB</title></rect>\n",
                     x, f.y(total), w, f.y(0) - f.y(total), id, total);
  if (band.known) {
    const double mid = x + w / 2;
    out << fmt::format("<line class=\"band\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#000\" "
                       "stroke-width=\"2\"><title>measured band: {:.2f} to {:.2f} GiB</title></line>\n",
                       mid, f.y(total * band.low), mid, f.y(total * band.high), total * band.low, total * band.high);
  }
}

void stage_chart(std::ostream& out, const nlohmann::json& report) {
  const auto& stages = report.at("stages");
  const BandFactors band = band_of(report);
  Frame f;
  double max_gib = 0;
  for (const auto& s : stages) max_gib = std::max(max_gib, bytes_of(s, "total") / 1073741824.0 * std::max(1.0, band.high));
  if (!report.at("gpu").is_null()) max_gib = std::max(max_gib, report.at("gpu").at("capacity_bytes").get<double>() / 1073741824.0);
  f.max_gib = max_gib > 0 ? max_gib * 1.08 : 1;
  const double slot = f.width / static_cast<double>(std::max<std::size_t>(1, stages.size()));
  const std::size_t label_every = std::max<std::size_t>(1, stages.size() / 24 + 1);
  out << "<h2>Memory per device of each pipeline stage</h2>\n";
  out << fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                     "role=\"img\">\n<title>per-stage memory, stacked by category</title>\n",
                     f.left + f.width + 20, f.top + f.height + 70);
  axis(out, f);
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const double x = f.left + slot * static_cast<double>(i) + slot * 0.15;
    stage_bar(out, f, stages[i], x, slot * 0.7, band);
    if (i % label_every == 0) {
      out << fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", x + slot * 0.35,
                         f.top + f.height + 16, stages[i].at("stage").get<std::int64_t>());
    }
  }
  capacity_lines(out, f, report.at("gpu"));
  out << fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">pipeline stage</text>\n", f.left + f.width / 2,
                     f.top + f.height + 34);
  double lx = f.left;
  for (const auto& c : kCategories) {
    out << fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>", lx, f.top + f.height + 48, c.colour);
    out << fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", lx + 16, f.top + f.height + 58, c.key);
    lx += 105;
  }
  out << "</svg>\n";
}

void stage_table(std::ostream& out, const nlohmann::json& report) {
  out << "<table class=\"stages\">\n<tr><th>stage</th><th>layers</th>";
  for (const auto& c : kCategories) out << "<th>" << c.key << " GiB</th>";
  out << "<th>total GiB</th><th>total bytes</th>";
  const bool gpu = !report.at("gpu").is_null();
  if (gpu) out << "<th>fits</th>";
  out << "</tr>\n";
  for (const auto& s : report.at("stages")) {
    const auto first = s.at("first_layer").get<std::int64_t>();
    out << "<tr><td>" << s.at("stage").get<std::int64_t>() << "</td><td>"
        << (first < 0 ? std::string("-") : fmt::format("{}-{}", first, s.at("last_layer").get<std::int64_t>())) << "</td>";
    for (const auto& c : kCategories) out << "<td>" << html::gib(bytes_of(s, c.key)) << "</td>";
    out << "<td>" << html::gib(bytes_of(s, "total")) << "</td><td>"
        << group_thousands(s.at("bytes").at("total").get<std::uint64_t>()) << "</td>";
    if (gpu) {
      const bool fits = s.at("fits").get<bool>();
      out << (fits ? "<td>yes</td>" : "<td class=\"no\">no</td>");
    }
    out << "</tr>\n";
  }
  out << "</table>\n";
}

void summary(std::ostream& out, const nlohmann::json& report) {
  const auto& p = report.at("parallel");
  const auto& t = report.at("training");
  out << fmt::format("<p>Layout: tp {} pp {} dp {} cp {} ep {} etp {} (edp {}), sp {}, schedule {}, world size {}.<br/>"
                     "Training: micro-batch {}, sequence length {}, recompute {}, ZeRO {}.</p>\n",
                     p.at("tp").get<std::int64_t>(), p.at("pp").get<std::int64_t>(), p.at("dp").get<std::int64_t>(),
                     p.at("cp").get<std::int64_t>(), p.at("ep").get<std::int64_t>(), p.at("etp").get<std::int64_t>(),
                     p.at("edp").get<std::int64_t>(), p.at("sp").get<bool>() ? "on" : "off",
                     html_escape(p.at("schedule").get<std::string>()), p.at("world_size").get<std::int64_t>(),
                     t.at("micro_batch").get<std::int64_t>(), t.at("seq_len").get<std::int64_t>(),
                     html_escape(t.at("recompute").get<std::string>()), t.at("zero").get<std::int64_t>());
  const auto& peak = report.at("peak");
  const double peak_bytes = peak.at("total_bytes").get<double>();
  out << fmt::format("<p class=\"peak\">Peak: stage {}, {} GiB ({} bytes).</p>\n", peak.at("stage").get<std::int64_t>(),
                     html::gib(peak_bytes), group_thousands(peak.at("total_bytes").get<std::uint64_t>()));
  const auto it = report.find("uncertainty");
  if (it != report.end() && !it->is_null()) {
    const std::int64_t records = it->at("records").get<std::int64_t>();
    const std::int64_t own = it->value("own_records", std::int64_t{0});
    out << fmt::format("<p class=\"uncertainty\">Accuracy band: on {} {} runs measuring {} memory, the measurement "
                       "was {:+.1f}% to {:+.1f}% of moemem's prediction (moemem validate): the peak would read {} to {} GiB "
                       "(the black whiskers).</p>\n",
                       records, own == 0 ? "published" : fmt::format("measured ({} on a GPU by moemem's developers)", own),
                       html_escape(it->at("metric").get<std::string>()),
                       it->at("low_pct").get<double>(), it->at("high_pct").get<double>(),
                       html::gib(peak_bytes * (1 + it->at("low_pct").get<double>() / 100)),
                       html::gib(peak_bytes * (1 + it->at("high_pct").get<double>() / 100)));
  } else {
    out << "<p class=\"uncertainty\">Accuracy band: no published measurements of this profile to compare with.</p>\n";
  }
}

// The itemised stage: per module and category, then every item.
void breakdown(std::ostream& out, const nlohmann::json& itemised) {
  const auto stage = itemised.at("stage").get<std::int64_t>();
  out << fmt::format("<h2>Stage {} itemised, by module and tensor ({} GiB on the device)</h2>\n", stage,
                     html::gib(itemised.at("total_bytes").get<double>()));
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, double>> by_module;
  for (const auto& i : itemised.at("items")) {
    const auto module = i.at("module").get<std::string>();
    if (!by_module.contains(module)) order.push_back(module);
    by_module[module][i.at("category").get<std::string>()] += i.at("bytes").get<double>();
  }
  out << "<table class=\"modules\">\n<tr><th>module</th>";
  for (const auto& c : kCategories) out << "<th>" << c.key << " GiB</th>";
  out << "<th>host GiB</th></tr>\n";
  for (const auto& m : order) {
    out << "<tr><td class=\"text\">" << html_escape(m) << "</td>";
    for (const char* key : {"weights", "gradients", "optimizer", "activations", "buffers", "fragmentation", "runtime", "host"}) {
      const auto it = by_module[m].find(key);
      out << "<td>" << (it == by_module[m].end() ? std::string() : html::gib(it->second)) << "</td>";
    }
    out << "</tr>\n";
  }
  out << "</table>\n<table class=\"items\">\n<tr><th>category</th><th>module</th><th>item</th><th>how</th><th>GiB</th>"
         "<th>bytes</th></tr>\n";
  for (const auto& i : itemised.at("items")) {
    out << "<tr>";
    for (const char* key : {"category", "module", "item", "detail"}) {
      out << "<td class=\"text\">" << html_escape(i.at(key).get<std::string>()) << "</td>";
    }
    out << "<td>" << html::gib(i.at("bytes").get<double>()) << "</td><td>" << group_thousands(i.at("bytes").get<std::uint64_t>())
        << "</td></tr>\n";
  }
  out << "</table>\n";
}

}  // namespace

void write_report_html(const nlohmann::json& report, const nlohmann::json& itemised, const std::string& command,
                       std::ostream& out) {
  const auto& model = report.at("model");
  const std::string title = fmt::format("moemem: {} ({} parameters), profile {}", model.at("name").get<std::string>(),
                                        group_thousands(model.at("total_params").get<std::uint64_t>()),
                                        report.at("profile").get<std::string>());
  html::page_open(out, title);
  out << "<h1>" << html_escape(title) << "</h1>\n";
  summary(out, report);
  stage_chart(out, report);
  stage_table(out, report);
  breakdown(out, itemised);
  html::list_block(out, "Warnings", report.value("warnings", nlohmann::json()));
  html::list_block(out, "Assumptions", report.at("assumptions"));
  html::command_block(out, command);
  html::page_close(out);
}

}  // namespace moemem::cli
