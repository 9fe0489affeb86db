// --format html (issue 17): analyze's, explain's and search's pages. One stacked bar per stage
// whose height follows the stage's total, the GPU line where a GPU is given, the itemised stage,
// the band, the command (which reproduces the run), well-formed markup, no script, and every
// text escaped (a hostile model file name). Counts are compared with the same run's JSON.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"
#include "report_html.hpp"

namespace {

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::joined;
using moemem::test::run_cli;
using nlohmann::json;

const Args kDsv3 = {"--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--dp", "32", "--ep", "8", "--sp",
                    "--distributed-optimizer", "--recompute", "full"};

std::string page_of(const std::string& command, const Args& args) {
  const auto r = run_cli(concat(concat({command}, args), {"--format", "html"}));
  EXPECT_TRUE(r.code == 0 || r.code == 1) << joined(args) << "\n" << r.err;
  return r.out;
}

json json_of(const std::string& command, const Args& args) {
  const auto r = run_cli(concat(concat({command}, args), {"--format", "json"}));
  EXPECT_TRUE(r.code == 0 || r.code == 1) << joined(args) << "\n" << r.err;
  return json::parse(r.out);
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// Every element opened is closed, in order (self-closing ones, <meta .../>, close themselves);
// returns the first problem, or "" when balanced.
std::string unbalanced(const std::string& page) {
  static const std::regex tag(R"(<(/?)([a-zA-Z][a-zA-Z0-9]*)[^>]*?(/?)>)");
  std::vector<std::string> open;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), tag); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    const std::string name = m[2];
    if (m[3] == "/") continue;
    if (m[1] == "/") {
      if (open.empty() || open.back() != name) return fmt::format("</{}> closes <{}>", name, open.empty() ? "" : open.back());
      open.pop_back();
    } else {
      open.push_back(name);
    }
  }
  return open.empty() ? "" : "<" + open.back() + "> never closed";
}

// The heights of the stage outlines, in order.
std::vector<double> stage_heights(const std::string& page) {
  static const std::regex outline(R"re(<rect class="stage" [^>]*height="([0-9.]+)")re");
  std::vector<double> out;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), outline); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stod((*it)[1]));
  }
  return out;
}

TEST(HtmlReport, EscapesEveryMarkupCharacter) {
  EXPECT_EQ(moemem::cli::html_escape(R"(a<b>&"c"'d')"), "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;");
  EXPECT_EQ(moemem::cli::html_escape("plain text"), "plain text");
}

TEST(HtmlReport, AnalyzeHasOneBarPerStageScaledToItsTotal) {
  const Args args = concat(kDsv3, {"--gpu", "h800-80g"});
  const std::string page = page_of("analyze", args);
  const json j = json_of("analyze", args);
  const auto& stages = j.at("stages");
  ASSERT_EQ(stages.size(), 16u);
  const auto heights = stage_heights(page);
  ASSERT_EQ(heights.size(), stages.size());
  // Heights are in proportion to the totals (to the 0.1 px they are printed with).
  const double px_per_byte = heights[0] / stages[0].at("bytes").at("total").get<double>();
  for (std::size_t i = 0; i < stages.size(); ++i) {
    EXPECT_NEAR(heights[i], stages[i].at("bytes").at("total").get<double>() * px_per_byte, 0.15) << "stage " << i;
  }
  EXPECT_EQ(occurrences(page, "<line class=\"capacity\""), 1u);
  EXPECT_EQ(occurrences(page, "<line class=\"band\""), stages.size());  // megatron has a measured band
  const auto& u = j.at("uncertainty");
  EXPECT_NE(page.find(fmt::format("{:+.1f}% to {:+.1f}%", u.at("low_pct").get<double>(), u.at("high_pct").get<double>())),
            std::string::npos);
  EXPECT_EQ(unbalanced(page), "");
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(occurrences(page, "http"), occurrences(page, "xmlns=\"http://www.w3.org/2000/svg\"")) << "no address but SVG's namespace";
}

TEST(HtmlReport, NoGpuNoCapacityLine) {
  const std::string page = page_of("analyze", {"--model", "llama-3.1-8b", "--pp", "2"});
  EXPECT_EQ(stage_heights(page).size(), 2u);
  EXPECT_EQ(occurrences(page, "class=\"capacity\""), 0u);
  EXPECT_EQ(unbalanced(page), "");
}

TEST(HtmlReport, ItemisesThePeakStageOrExplainsStage) {
  const json j = json_of("analyze", kDsv3);
  const auto peak = j.at("peak").at("stage").get<std::int64_t>();
  const std::string analyze_page = page_of("analyze", kDsv3);
  EXPECT_NE(analyze_page.find(fmt::format("<h2>Stage {} itemised", peak)), std::string::npos);

  const Args stage3 = concat({"--stage", "3"}, kDsv3);
  const std::string page = page_of("explain", stage3);
  const json items = json_of("explain", stage3).at("items");
  EXPECT_NE(page.find("<h2>Stage 3 itemised"), std::string::npos);
  // The items table: a header row and one row per item.
  const auto table = page.substr(page.find("<table class=\"items\">"));
  EXPECT_EQ(occurrences(table.substr(0, table.find("</table>")), "<tr>"), items.size() + 1);
  EXPECT_EQ(stage_heights(page).size(), 16u);
  EXPECT_EQ(unbalanced(page), "");
}

TEST(HtmlReport, CommandReproducesTheRun) {
  const Args args = concat(kDsv3, {"--gpu", "h800-80g", "--layers-per-stage", "4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,1"});
  const std::string page = page_of("analyze", args);
  const std::smatch m = [&] {
    std::smatch s;
    std::regex_search(page, s, std::regex("<pre><code>moemem (analyze[^<]*)</code></pre>"));
    return s;
  }();
  ASSERT_FALSE(m.empty());
  std::istringstream words(m[1].str());
  Args again;
  for (std::string w; words >> w;) again.push_back(w);
  ASSERT_EQ(again.back(), "html");
  again.back() = "json";
  const auto r = run_cli(again);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), json_of("analyze", args));
}

TEST(HtmlReport, HostileModelNameIsEscaped) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("moemem-html-{}", ::testing::UnitTest::GetInstance()->random_seed());
  std::filesystem::create_directories(dir);
  // The name holds a '/': the file sits in a directory named "<script>alert("x")<".
  const auto path = dir / R"(<script>alert("x")</script>&'.json)";
  std::filesystem::create_directories(path.parent_path());
  std::filesystem::copy_file(std::filesystem::path(MOEMEM_SHARED_MODELS_DIR) / "llama-3.1-8b.json", path,
                             std::filesystem::copy_options::overwrite_existing);
  const std::string page = page_of("analyze", {"--model", path.string()});
  std::filesystem::remove_all(dir);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;.json"), std::string::npos);
  EXPECT_EQ(unbalanced(page), "");
}

TEST(HtmlReport, SearchPlotsEveryLayoutAndThePareto) {
  const Args args = {"--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100-80g", "--global-batch", "512", "--top", "8"};
  const std::string page = page_of("search", args);
  const json j = json_of("search", args);
  ASSERT_GT(j.at("layouts").size(), 0u);
  EXPECT_EQ(occurrences(page, "<circle class=\"point\""), j.at("layouts").size());
  EXPECT_EQ(occurrences(page, "<circle class=\"pareto\""), j.at("pareto").size());
  EXPECT_EQ(occurrences(page, "<polyline class=\"front\""), j.at("pareto").size() > 1 ? 1u : 0u);
  const auto table = page.substr(page.find("<table class=\"layouts\">"));
  EXPECT_EQ(occurrences(table.substr(0, table.find("</table>")), "<tr>"), j.at("layouts").size() + 1);
  EXPECT_EQ(unbalanced(page), "");
  // Timed with a named GPU, the page plots and tabulates what the search ranked by, tokens/s per
  // GPU, the first layout's figure and analyze flags among them; misses (untimed) are not plotted.
  EXPECT_NE(page.find("Peak memory against estimated tokens/s per GPU"), std::string::npos);
  const auto& first = j.at("layouts").at(0);
  EXPECT_NE(page.find(fmt::format("{:.0f} tokens/s per GPU", first.at("time").at("tokens_per_second_per_gpu").get<double>())),
            std::string::npos);
  EXPECT_NE(page.find(moemem::cli::html_escape(first.at("command").get<std::string>())), std::string::npos);
  EXPECT_EQ(occurrences(page, "<circle class=\"miss\""), 0u);
  // Without a named GPU it ranks by the overhead cost, and plots that, misses included.
  const Args untimed = {"--model", "mixtral-8x7b", "--gpus", "64", "--gpu-memory", "80GiB", "--global-batch", "512", "--top", "8"};
  const std::string cost_page = page_of("search", untimed);
  EXPECT_NE(cost_page.find("Peak memory against estimated overhead"), std::string::npos);
  EXPECT_EQ(occurrences(cost_page, "<circle class=\"miss\""), json_of("search", untimed).at("nearest_infeasible").size());
}

TEST(HtmlReport, OtherCommandsRefuseHtml) {
  const auto r = run_cli({"count", "--format", "html"});
  EXPECT_EQ(r.code, 2);
}

}  // namespace
