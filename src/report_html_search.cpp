// search's HTML page (report_html.hpp): peak memory against estimated cost for the layouts that
// fit (and the nearest that do not), the Pareto front joined, the usable memory as a line, and
// the best layouts as a table.
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
double cost(const nlohmann::json& e) { return e.at("cost").at("total").get<double>(); }

struct Plot {
  double left = 70, top = 20, width = 760, height = 340, x_max = 1, y_max = 1;
  [[nodiscard]] double x(double gib) const { return left + width * gib / x_max; }
  [[nodiscard]] double y(double c) const { return top + height * (1 - c / y_max); }
};

void axes(std::ostream& out, const Plot& p) {
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
  out << fmt::format("<text x=\"14\" y=\"{:.1f}\" transform=\"rotate(-90 14 {:.1f})\" text-anchor=\"middle\">estimated "
                     "overhead (fraction of compute)</text>\n",
                     p.top + p.height / 2, p.top + p.height / 2);
}

void points(std::ostream& out, const Plot& p, const nlohmann::json& entries, const char* cls, const char* fill, double r) {
  for (const auto& e : entries) {
    out << fmt::format("<circle class=\"{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\"><title>{}: {:.2f} GiB, "
                       "cost {:.3f}</title></circle>\n",
                       cls, p.x(peak_gib(e)), p.y(cost(e)), r, fill, html_escape(layout_text(e)), peak_gib(e), cost(e));
  }
}

void scatter(std::ostream& out, const nlohmann::json& s) {
  const auto& layouts = s.at("layouts");
  const auto& pareto = s.at("pareto");
  const auto& misses = s.at("nearest_infeasible");
  const double usable = s.at("usable_bytes").get<double>() / kGiB;
  Plot p;
  double x_max = usable, y_max = 0;
  for (const auto* list : {&layouts, &pareto, &misses}) {
    for (const auto& e : *list) {
      x_max = std::max(x_max, peak_gib(e));
      y_max = std::max(y_max, cost(e));
    }
  }
  p.x_max = x_max > 0 ? x_max * 1.05 : 1;
  p.y_max = y_max > 0 ? y_max * 1.1 : 1;
  out << "<h2>Peak memory against estimated overhead</h2>\n";
  out << fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                     "role=\"img\">\n<title>layouts: peak memory against estimated overhead</title>\n",
                     p.left + p.width + 20, p.top + p.height + 50);
  axes(out, p);
  out << fmt::format("<line class=\"usable\" x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#c00\" "
                     "stroke-width=\"2\"><title>usable: {3:.2f} GiB</title></line>\n",
                     p.x(usable), p.top, p.top + p.height, usable);
  std::vector<std::pair<double, double>> front;
  for (const auto& e : pareto) front.emplace_back(p.x(peak_gib(e)), p.y(cost(e)));
  std::sort(front.begin(), front.end());
  if (front.size() > 1) {
    out << "<polyline class=\"front\" fill=\"none\" stroke=\"#e15759\" stroke-width=\"1.5\" points=\"";
    for (const auto& [x, y] : front) out << fmt::format("{:.1f},{:.1f} ", x, y);
    out << "\"/>\n";
  }
  points(out, p, misses, "miss", "#bbb", 3);
  points(out, p, layouts, "point", "#4e79a7", 3.5);
  points(out, p, pareto, "pareto", "#e15759", 5);
  out << "</svg>\n<p>Blue: the best layouts that fit; red: the Pareto front (no layout is both smaller and cheaper); "
         "grey: the nearest that do not fit; red line: the usable memory.</p>\n";
}

void layouts_table(std::ostream& out, const nlohmann::json& layouts) {
  out << "<h2>Best layouts that fit</h2>\n<table class=\"layouts\">\n<tr><th>#</th><th>layout</th><th>schedule</th>"
         "<th>split</th><th>micro-batch</th><th>ZeRO</th><th>recompute</th><th>peak GiB</th><th>peak stage</th>"
         "<th>cost</th><th>bubble</th><th>recompute cost</th><th>communication</th></tr>\n";
  for (const auto& e : layouts) {
    const auto& c = e.at("cost");
    out << fmt::format("<tr><td>{}</td><td class=\"text\">{}</td><td class=\"text\">{}</td><td class=\"text\">{}</td>"
                       "<td>{}</td><td>{}</td><td class=\"text\">{}</td><td>{:.2f}</td><td>{}</td><td>{:.3f}</td>"
                       "<td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td></tr>\n",
                       e.at("rank").get<std::int64_t>(), html_escape(layout_text(e)),
                       html_escape(e.at("schedule").get<std::string>()), html_escape(e.at("split").get<std::string>()),
                       e.at("micro_batch").get<std::int64_t>(), e.at("zero").get<std::int64_t>(),
                       html_escape(e.at("recompute").get<std::string>()), peak_gib(e), e.at("peak_stage").get<std::int64_t>(),
                       c.at("total").get<double>(), c.at("bubble").get<double>(), c.at("recompute").get<double>(),
                       c.at("communication").get<double>());
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
  else layouts_table(out, search.at("layouts"));
  html::list_block(out, "Warnings", search.value("warnings", nlohmann::json()));
  html::command_block(out, command);
  html::page_close(out);
}

}  // namespace moemem::cli
