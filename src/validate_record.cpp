// A measurement record's `moemem` object (the schema of tests/data/validation/README.md): the
// model, the analyze arguments that represent the run, and what was measured where, in which
// unit. The arguments become a Request the way the CLI's flags do (the caller's RequestBuilder),
// so a record takes the ordinary analyze path; nothing here guesses from the human-readable fields.
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "moemem/errors.hpp"
#include "moemem/validate.hpp"

namespace moemem {

namespace {

using nlohmann::json;

bool contains(const std::string& haystack, std::string_view needle) { return haystack.find(needle) != std::string::npos; }

// Bytes per unit the measurement is stated in: GiB/MiB are 2^30/2^20 (Megatron's "MB" is MiB),
// GB is 1e9 bytes, bytes are bytes.
std::optional<double> bytes_per_unit(const std::string& unit) {
  if (unit == "GiB") return 1073741824.0;
  if (unit == "MiB") return 1048576.0;
  if (unit == "GB") return 1e9;
  if (unit == "bytes") return 1.0;
  return std::nullopt;
}

std::string field(const json& r, const char* key) { return fmt::format("{}: moemem.{}", record_text(r, "id"), key); }

// One measured quantity: a metric, a positive value and its unit.
Measurement measurement_of(const json& r, const json& m, const std::string& label) {
  const std::string metric = m.value("metric", "");
  if (metric != "allocated" && metric != "reserved" && metric != "device-used") {
    throw InputError(field(r, "metric"), metric, "allocated, reserved or device-used");
  }
  const std::string unit = m.value("unit", "");
  const auto per = bytes_per_unit(unit);
  if (!per) throw InputError(field(r, "unit"), unit, "GiB, MiB, GB or bytes");
  const json& v = m.contains("value") ? m.at("value") : r.value("measured_value", json());
  if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() * *per > 1e18) {
    throw InputError(field(r, "value"), v.dump(), "a positive measured size (below 1e18 bytes)");
  }
  return Measurement{metric, Bytes(static_cast<std::uint64_t>(std::llround(v.get<double>() * *per))), label};
}

std::vector<std::string> args_of(const json& r, const json& m) {
  const json& a = m.value("args", json::array());
  if (!a.is_array()) throw InputError(field(r, "args"), a.dump(), "a list of analyze's arguments (strings)");
  std::vector<std::string> out;
  for (const json& x : a) {
    if (!x.is_string()) throw InputError(field(r, "args"), x.dump(), "strings");
    out.push_back(x.get<std::string>());
  }
  return out;
}

// The stage measured: "peak" (the largest stage: the maximum over ranks, or a rank the source
// does not name, where the largest is the safe reading), "last", or a stage number.
std::string stage_of(const json& r, const json& m) {
  const std::string s = m.value("stage", "peak");
  if (s == "peak" || s == "last") return s;
  if (!s.empty() && s.size() < 6 && s.find_first_not_of("0123456789") == std::string::npos) return s;
  throw InputError(field(r, "stage"), s, "peak, last or a stage number");
}

}  // namespace

std::string record_family(const json& record) {
  const std::string framework = record_text(record, "framework");
  std::string lower = framework;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return contains(framework, "FlagPerf") ? "FlagPerf (Megatron)"
         : contains(lower, "megatron") ? "Megatron-LM"
         : contains(lower, "torchtitan") ? "torchtitan" : framework;
}

std::variant<RecordSpec, std::string> record_spec(const json& record) {
  const auto it = record.find("moemem");
  if (it == record.end() || it->is_null()) return "the record has no moemem object (model and analyze arguments)";
  const json& m = *it;
  if (!m.is_object()) throw InputError(field(record, ""), m.dump().substr(0, 80), "an object");
  if (m.contains("not_representable")) return record_text(m, "not_representable");
  RecordSpec s;
  s.model = m.value("model", "");
  if (s.model.empty()) throw InputError(field(record, "model"), "missing", "a preset name or models/<file>");
  s.args = args_of(record, m);
  s.stage = stage_of(record, m);
  s.assumptions = record_text(m, "assumptions");
  // A run that ran out of memory: no measurement, but the prediction must exceed the GPU's memory.
  if (m.value("expect", "") == "out-of-memory") {
    const json& cap = record.value("gpu_capacity_gib", json());
    if (!cap.is_number() || !(cap.get<double>() > 0) || cap.get<double>() > 1e6) {
      throw InputError(fmt::format("{}: gpu_capacity_gib", record_text(record, "id")), cap.dump(),
                       "the GPU's memory in GiB, for a run that ran out of memory");
    }
    s.measurements.push_back(
        {"out-of-memory", Bytes(static_cast<std::uint64_t>(std::llround(cap.get<double>() * 1073741824.0))), ""});
    return s;
  }
  s.measurements.push_back(measurement_of(record, m, ""));
  for (const json& c : m.value("companions", json::array())) {
    s.measurements.push_back(measurement_of(record, c, c.value("metric", "")));
  }
  // The record's own normalised figure must agree with value x unit: a unit slip is an error.
  const json& gib = record.value("measured_gib_normalized", json());
  if (gib.is_number()) {
    const double stated = gib.get<double>() * 1073741824.0, derived = static_cast<double>(s.measurements[0].bytes.value());
    if (std::fabs(stated - derived) > 0.01 * derived) {
      throw InputError(field(record, "unit"), m.value("unit", ""),
                       fmt::format("a unit in which measured_value is measured_gib_normalized ({} GiB)", gib.get<double>()));
    }
  }
  return s;
}

std::string record_text(const json& record, const char* key) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

}  // namespace moemem
