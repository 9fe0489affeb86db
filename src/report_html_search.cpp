// search's HTML page (report_html.hpp): peak memory against what the search ranked by (estimated
// tokens/s per GPU with a named GPU's step-time model, else the overhead cost) for the layouts that
// fit (and, for the cost, the nearest that do not), the Pareto front joined, the usable memory as a
// line, and the best layouts as a table.
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "cli/table.hpp"
#include "report_html.hpp"

namespace moemem::cli {

namespace {

constexpr double kGiB = 1073741824.0;

std::string layout_text(const nlohmann::json& e) {
  const auto vpp = e.at("vpp").get<std::int64_t>();
  return fmt::format("tp{} pp{}{} cp{} ep{} etp{} dp{}{}", e.at("tp").get<std::int64_t>(), e.at("pp").get<std::int64_t>(),
                     vpp > 1 ? fmt::format("x{}", vpp) : "", e.at("cp").get<std::int64_t>(), e.at("ep").get<std::int64_t>(),
                     e.at("etp").get<std::int64_t>(), e.at("dp").get<std::int64_t>(), e.at("sp").get<bool>() ? " sp" : "");
}

double peak_gib(const nlohmann::json& e) { return e.at("peak_bytes").get<double>() / kGiB; }

// The ranking's measure: tokens/s per GPU when the search was timed, else the overhead cost.
struct Measure {
  bool timed = false;
  [[nodiscard]] double of(const nlohmann::json& e) const {
    if (timed) return e.at("time").is_null() ? 0.0 : e.at("time").at("tokens_per_second_per_gpu").get<double>();
    return e.at("cost").at("total").get<double>();
  }
  [[nodiscard]] const char* name() const { return timed ? "estimated tokens/s per GPU" : "estimated overhead (fraction of compute)"; }
  [[nodiscard]] std::string value_text(const nlohmann::json& e) const {
    return timed ? fmt::format("{:.0f} tokens/s per GPU", of(e)) : fmt::format("cost {:.3f}", of(e));
  }
};

Measure measure_of(const nlohmann::json& s) {
  Measure m;
  for (const auto& e : s.at("layouts")) m.timed = m.timed || !e.at("time").is_null();
  return m;
}

struct Plot {
  double left = 70, top = 20, width = 760, height = 340, x_max = 1, y_max = 1;
  [[nodiscard]] double x(double gib) const { return left + width * gib / x_max; }
  [[nodiscard]] double y(double c) const { return top + height * (1 - c / y_max); }
};

void axes(std::ostream& out, const Plot& p, const Measure& m) {
  const double xs = html::axis_step(p.x_max, 8), ys = html::axis_step(p.y_max, 6);
  for (double v = 0; v <= p.x_max + 1e-9; v += xs) {
    out << fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4:g}</text>\n",
                       p.x(v), p.top, p.top + p.height, p.top + p.height + 16, v);
  }
  for (double v = 0; v <= p.y_max + 1e-9; v += ys) {
    out << fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#eee\"/>"
                       "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
                       p.left, p.y(v), p.left + p.width, p.left - 6, p.y(v) + 4, v);
  }
  out << fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">peak memory per device (GiB)</text>\n",
                     p.left + p.width / 2, p.top + p.height + 34);
  out << fmt::format("<text x=\"14\" y=\"{:.1f}\" transform=\"rotate(-90 14 {:.1f})\" text-anchor=\"middle\">{}</text>\n",
                     p.top + p.height / 2, p.top + p.height / 2, m.name());
}

void points(std::ostream& out, const Plot& p, const Measure& m, const nlohmann::json& entries, const char* cls,
            const char* fill, double r) {
  for (const auto& e : entries) {
    out << fmt::format("<circle class=\"{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\"><title>{}: {:.2f} GiB, "
                       "{}</title></circle>\n",
                       cls, p.x(peak_gib(e)), p.y(m.of(e)), r, fill, html_escape(layout_text(e)), peak_gib(e), m.value_text(e));
  }
}

void scatter(std::ostream& out, const nlohmann::json& s) {
  const auto& layouts = s.at("layouts");
  const auto& pareto = s.at("pareto");
  // Misses are not timed (the step-time model runs on what fits): plotted against the cost only.
  const Measure m = measure_of(s);
  const nlohmann::json misses = m.timed ? nlohmann::json::array() : s.at("nearest_infeasible");
  const double usable = s.at("usable_bytes").get<double>() / kGiB;
  Plot p;
  double x_max = usable, y_max = 0;
  for (const auto* list : {&layouts, &pareto, &misses}) {
    for (const auto& e : *list) {
      x_max = std::max(x_max, peak_gib(e));
      y_max = std::max(y_max, m.of(e));
    }
  }
  p.x_max = x_max > 0 ? x_max * 1.05 : 1;
  p.y_max = y_max > 0 ? y_max * 1.1 : 1;
  out << fmt::format("<h2>Peak memory against {}</h2>\n", m.name());
  out << fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                     "role=\"img\">\n<title>layouts: peak memory against {2}</title>\n",
                     p.left + p.width + 20, p.top + p.height + 50, m.name());
  axes(out, p, m);
  out << fmt::format("<line class=\"usable\" x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#c00\" "
                     "stroke-width=\"2\"><title>usable: {3:.2f} GiB</title></line>\n",
                     p.x(usable), p.top, p.top + p.height, usable);
  std::vector<std::pair<double, double>> front;
  for (const auto& e : pareto) front.emplace_back(p.x(peak_gib(e)), p.y(m.of(e)));
  std::sort(front.begin(), front.end());
  if (front.size() > 1) {
    out << "<polyline class=\"front\" fill=\"none\" stroke=\"#e15759\" stroke-width=\"1.5\" points=\"";
    for (const auto& [x, y] : front) out << fmt::format("{:.1f},{:.1f} ", x, y);
    out << "\"/>\n";
  }
  points(out, p, m, misses, "miss", "#bbb", 3);
  points(out, p, m, layouts, "point", "#4e79a7", 3.5);
  points(out, p, m, pareto, "pareto", "#e15759", 5);
  out << (m.timed ? "</svg>\n<p>Blue: the best layouts that fit; red: the Pareto front (no layout is both smaller and "
                    "faster); red line: the usable memory.</p>\n"
                  : "</svg>\n<p>Blue: the best layouts that fit; red: the Pareto front (no layout is both smaller and "
                    "cheaper); grey: the nearest that do not fit; red line: the usable memory.</p>\n");
}

// The layouts in their ranking order, with what they were ranked by and the analyze flags that
// reproduce each (as the text table prints for the first).
void layouts_table(std::ostream& out, const nlohmann::json& layouts, const Measure& m) {
  out << "<h2>Best layouts that fit</h2>\n<table class=\"layouts\">\n<tr><th>#</th><th>layout</th><th>schedule</th>"
         "<th>split</th><th>micro-batch</th><th>ZeRO</th><th>recompute</th><th>peak GiB</th><th>peak stage</th>"
      << (m.timed ? "<th>tokens/s per GPU</th><th>MFU</th>" : "<th>cost</th><th>bubble</th><th>recompute cost</th><th>communication</th>")
      << "<th class=\"text\">moemem analyze</th></tr>\n";
  for (const auto& e : layouts) {
    const auto& c = e.at("cost");
    const std::string ranked =
        m.timed ? fmt::format("<td>{:.0f}</td><td>{:.1f}%</td>", m.of(e),
                              e.at("time").is_null() ? 0.0 : 100 * e.at("time").at("mfu").get<double>())
                : fmt::format("<td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td>", c.at("total").get<double>(),
                              c.at("bubble").get<double>(), c.at("recompute").get<double>(), c.at("communication").get<double>());
    out << fmt::format("<tr><td>{}</td><td class=\"text\">{}</td><td class=\"text\">{}</td><td class=\"text\">{}</td>"
                       "<td>{}</td><td>{}</td><td class=\"text\">{}</td><td>{:.2f}</td><td>{}</td>{}<td class=\"text\"><code>{}</code></td></tr>\n",
                       e.at("rank").get<std::int64_t>(), html_escape(layout_text(e)),
                       html_escape(e.at("schedule").get<std::string>()), html_escape(e.at("split").get<std::string>()),
                       e.at("micro_batch").get<std::int64_t>(), e.at("zero").get<std::int64_t>(),
                       html_escape(e.at("recompute").get<std::string>()), peak_gib(e), e.at("peak_stage").get<std::int64_t>(),
                       ranked, html_escape(e.at("command").get<std::string>()));
  }
  out << "</table>\n";
}

}  // namespace

void write_search_html(const nlohmann::json& search, const std::string& command, std::ostream& out) {
  const std::string title = fmt::format("moemem search: {} on {} x {}", search.at("model").get<std::string>(),
                                        search.at("gpus").get<std::int64_t>(), search.at("gpu").get<std::string>());
  html::page_open(out, title);
  out << "<h1>" << html_escape(title) << "</h1>\n";
  out << fmt::format("<p>{} candidates, {} evaluated, {} fit in {} GiB.</p>\n", search.at("candidates").get<std::int64_t>(),
                     search.at("evaluated").get<std::int64_t>(), search.at("feasible").get<std::int64_t>(),
                     html::gib(search.at("usable_bytes").get<double>()));
  scatter(out, search);
  if (search.at("layouts").empty()) out << "<p class=\"no\">No layout fits.</p>\n";
  else layouts_table(out, search.at("layouts"), measure_of(search));
  html::list_block(out, "Warnings", search.value("warnings", nlohmann::json()));
  html::command_block(out, command);
  html::page_close(out);
}

}  // namespace moemem::cli
