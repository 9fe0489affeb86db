// HTML pages of moemem's reports (--format html of analyze, explain and search): one
// self-contained file with its charts as inline SVG, no script and nothing fetched when viewed.
// Each page is drawn from the JSON document that --format json prints, so it shows those numbers.
#pragma once

#include <ostream>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace moemem::cli {

// Text made safe for HTML element content and quoted attribute values: & < > " ' escaped.
[[nodiscard]] std::string html_escape(std::string_view text);

// The command line a parsed subcommand stands for ("moemem analyze --tp 2 ..."), its options in
// the order they are registered, values quoted for a POSIX shell where needed.
[[nodiscard]] std::string command_line(const CLI::App& subcommand);

// analyze and explain: `report` is analyze's JSON (schema moemem.report/1, with its uncertainty),
// `itemised` explain's JSON (moemem.explain/1) of the stage to break down by module and tensor.
void write_report_html(const nlohmann::json& report, const nlohmann::json& itemised, const std::string& command,
                       std::ostream& out);

// search: its JSON (schema moemem.search/1): memory against estimated cost, the Pareto front and
// the best layouts.
void write_search_html(const nlohmann::json& search, const std::string& command, std::ostream& out);

// The parts both pages share (report_html.cpp).
namespace html {
void page_open(std::ostream& out, const std::string& title);
void page_close(std::ostream& out);
void command_block(std::ostream& out, const std::string& command);
void list_block(std::ostream& out, const char* heading, const nlohmann::json& strings);
// Bytes as GiB (2^30) with two decimals.
[[nodiscard]] std::string gib(double bytes);
// A "nice" axis step (1, 2 or 5 times a power of ten) for about `ticks` ticks up to `max`.
[[nodiscard]] double axis_step(double max, int ticks);
}  // namespace html

}  // namespace moemem::cli
