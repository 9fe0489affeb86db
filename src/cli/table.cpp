#include "cli/table.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "moemem/units.hpp"

namespace moemem::cli {

Format parse_format(const std::string& text) {
  if (text == "table") return Format::table;
  if (text == "json") return Format::json;
  if (text == "csv") return Format::csv;
  if (text == "markdown") return Format::markdown;
  throw InputError("--format", text, "one of table, json, csv, markdown");
}

std::string group_thousands(std::uint64_t v) {
  std::string digits = std::to_string(v), out;
  const std::size_t n = digits.size();
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[i];
    if ((n - i - 1) % 3 == 0 && i + 1 < n) out += ',';
  }
  return out;
}

namespace {

std::string text_of(const Cell& c, bool grouped) {
  return std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) return v;
        else if constexpr (std::is_same_v<T, std::uint64_t>) return grouped ? group_thousands(v) : std::to_string(v);
        else if constexpr (std::is_same_v<T, std::int64_t>) return std::to_string(v);
        else if (grouped) return fmt::format("{:.2f}", static_cast<double>(v.bytes) / kBytesPerGiB);
        else return std::to_string(v.bytes);
      },
      c);
}

bool is_text(const Cell& c) { return std::holds_alternative<std::string>(c); }

// A pipe ends a Markdown table cell; a pipeline layout ('Ettt|tttt|ttmL') or a command holds them.
std::string markdown_cell(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    if (ch == '|') out += '\\';
    out += ch;
  }
  return out;
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

void render(const Table& t, Format f, std::ostream& out) {
  switch (f) {
    case Format::json: out << json_text(to_json(t), 2) << "\n"; return;
    case Format::csv: {
      // CSV carries GiB cells as exact bytes: a "GiB" header says "bytes" instead, and a column
      // that would then repeat another (explain's "GiB" beside its "bytes") is left out.
      std::vector<std::string> header = t.columns;
      std::vector<bool> keep(header.size(), true);
      for (std::size_t i = 0; i < header.size(); ++i) {
        const bool gib = !t.rows.empty() && i < t.rows[0].size() && std::holds_alternative<GibBytes>(t.rows[0][i]);
        const auto at = header[i].find("GiB");
        if (!gib || at == std::string::npos) continue;
        header[i].replace(at, 3, "bytes");
        keep[i] = std::find(t.columns.begin(), t.columns.end(), header[i]) == t.columns.end();
      }
      const auto write = [&](const std::vector<std::string>& cells) {
        bool first = true;
        for (std::size_t i = 0; i < cells.size(); ++i) {
          if (i < keep.size() && !keep[i]) continue;
          out << (first ? "" : ",") << csv_escape(cells[i]);
          first = false;
        }
        out << "\n";
      };
      write(header);
      for (const auto& row : t.rows) {
        std::vector<std::string> cells;
        for (const auto& c : row) cells.push_back(text_of(c, false));
        write(cells);
      }
      return;
    }
    case Format::markdown: {
      if (!t.title.empty()) out << "### " << t.title << "\n\n";
      out << "|";
      for (const auto& c : t.columns) out << " " << markdown_cell(c) << " |";
      out << "\n|";
      for (std::size_t i = 0; i < t.columns.size(); ++i) {
        const bool left = !t.rows.empty() && i < t.rows[0].size() && is_text(t.rows[0][i]);
        out << (left ? "---|" : "---:|");
      }
      out << "\n";
      for (const auto& row : t.rows) {
        out << "|";
        for (const auto& c : row) out << " " << markdown_cell(text_of(c, true)) << " |";
        out << "\n";
      }
      out << "\n";
      return;
    }
    case Format::table: {
      std::vector<std::size_t> width(t.columns.size(), 0);
      for (std::size_t i = 0; i < t.columns.size(); ++i) width[i] = t.columns[i].size();
      for (const auto& row : t.rows) {
        for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) {
          width[i] = std::max(width[i], text_of(row[i], true).size());
        }
      }
      if (!t.title.empty()) out << t.title << "\n";
      auto line = [&](const std::vector<std::string>& cells, const std::vector<bool>& left) {
        std::string s;
        for (std::size_t i = 0; i < cells.size(); ++i) {
          if (i) s += "  ";
          s += left[i] ? fmt::format("{:<{}}", cells[i], width[i]) : fmt::format("{:>{}}", cells[i], width[i]);
        }
        while (!s.empty() && s.back() == ' ') s.pop_back();
        out << s << "\n";
      };
      std::vector<bool> left(t.columns.size(), true);
      if (!t.rows.empty()) {
        for (std::size_t i = 0; i < left.size() && i < t.rows[0].size(); ++i) left[i] = is_text(t.rows[0][i]);
      }
      line(t.columns, left);
      std::vector<std::string> rule;
      for (const auto w : width) rule.emplace_back(w, '-');
      line(rule, left);
      for (const auto& row : t.rows) {
        std::vector<std::string> cells;
        for (const auto& c : row) cells.push_back(text_of(c, true));
        line(cells, left);
      }
      out << "\n";
      return;
    }
  }
}

nlohmann::json to_json(const Table& t) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : t.rows) {
    nlohmann::json r = nlohmann::json::object();
    for (std::size_t i = 0; i < row.size() && i < t.columns.size(); ++i) {
      std::visit([&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, GibBytes>) r[t.columns[i]] = v.bytes;
        else r[t.columns[i]] = v;
      }, row[i]);
    }
    rows.push_back(std::move(r));
  }
  return {{"title", t.title}, {"rows", rows}};
}

}  // namespace moemem::cli
