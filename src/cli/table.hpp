// A titled table of text, integer and byte cells, rendered as aligned text, CSV, Markdown or a
// JSON array of row objects. Integers are exact (thousands separators only in text tables);
// byte cells read in GiB in text and Markdown, and as exact bytes in CSV and JSON.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace moemem::cli {

enum class Format { table, json, csv, markdown };

// JSON text for output: bytes that are not UTF-8 (a file name is any bytes on Linux) become
// U+FFFD rather than an exception (nlohmann's dump() throws on them by default).
// Adds `warnings` (a list of strings: config keys not understood, ...) to a JSON document when
// there are any; documents without warnings stay as they were.
inline void add_warnings(nlohmann::json& j, const std::vector<std::string>& warnings) {
  if (!warnings.empty()) j["warnings"] = warnings;
}

inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}
Format parse_format(const std::string& text);

// A byte count: shown in GiB with two decimals in text tables, exact in JSON and CSV.
struct GibBytes {
  std::uint64_t bytes;
};
using Cell = std::variant<std::string, std::uint64_t, std::int64_t, GibBytes>;

struct Table {
  std::string title;
  std::vector<std::string> columns;
  std::vector<std::vector<Cell>> rows;
};

std::string group_thousands(std::uint64_t v);
void render(const Table& t, Format f, std::ostream& out);
nlohmann::json to_json(const Table& t);

}  // namespace moemem::cli
