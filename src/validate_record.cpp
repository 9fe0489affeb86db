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

// The value shown in an error: JSON, cut short (a record is at most 1 MB, but a message should be a line).
std::string shown(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// A text field of `obj` (a record's moemem object or a companion): `fallback` when absent or
// null, an error naming the field, the value and `accepted` when it is not a string.
std::string text_of(const json& r, const json& obj, const char* key, const char* fallback, const std::string& accepted) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw InputError(field(r, key), shown(*it), accepted);
  return it->get<std::string>();
}

// One measured quantity: a metric, a positive value and its unit.
Measurement measurement_of(const json& r, const json& m, const std::string& label) {
  if (!m.is_object()) throw InputError(field(r, "companions"), shown(m), "objects {metric, value, unit}");
  const std::string metrics = "allocated, reserved or device-used";
  const std::string metric = text_of(r, m, "metric", "", metrics);
  if (metric != "allocated" && metric != "reserved" && metric != "device-used") {
    throw InputError(field(r, "metric"), metric, metrics);
  }
  const std::string units = "GiB, MiB, GB or bytes";
  const std::string unit = text_of(r, m, "unit", "", units);
  const auto per = bytes_per_unit(unit);
  if (!per) throw InputError(field(r, "unit"), unit, units);
  const auto value = m.find("value");
  const auto record_value = r.find("measured_value");
  const json v = value != m.end() ? *value : record_value != r.end() ? *record_value : json();
  if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() * *per > 1e18) {
    throw InputError(field(r, "value"), shown(v), "a positive measured size (below 1e18 bytes)");
  }
  return Measurement{metric, Bytes(static_cast<std::uint64_t>(std::llround(v.get<double>() * *per))), label};
}

std::vector<std::string> args_of(const json& r, const json& m) {
  const auto it = m.find("args");
  if (it == m.end() || it->is_null()) return {};
  const json& a = *it;
  if (!a.is_array()) throw InputError(field(r, "args"), shown(a), "a list of analyze's arguments (strings)");
  std::vector<std::string> out;
  for (const json& x : a) {
    if (!x.is_string()) throw InputError(field(r, "args"), shown(x), "strings");
    out.push_back(x.get<std::string>());
  }
  return out;
}

// The stage measured: "peak" (the largest stage: the maximum over ranks, or a rank the source
// does not name, where the largest is the safe reading), "last", or a stage number.
std::string stage_of(const json& r, const json& m) {
  const auto it = m.find("stage");
  // A stage number may be written as a number.
  if (it != m.end() && it->is_number_unsigned() && it->get<std::uint64_t>() < 100000) return std::to_string(it->get<std::uint64_t>());
  const std::string s = text_of(r, m, "stage", "peak", "peak, last or a stage number");
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
         : contains(lower, "torchtitan") ? "torchtitan"
         // Hugging Face modeling code (Trainer, TRL, PEFT, accelerate, ms-swift's transformers path):
         // the hf profile's runs, one family whatever launcher the source names.
         : contains(lower, "transformers") ? "transformers (hf)" : framework;
}

std::variant<RecordSpec, std::string> record_spec(const json& record) {
  const auto it = record.find("moemem");
  if (it == record.end() || it->is_null()) return "the record has no moemem object (model and analyze arguments)";
  const json& m = *it;
  if (!m.is_object()) throw InputError(field(record, ""), shown(m), "an object");
  if (m.contains("not_representable")) return record_text(m, "not_representable");
  RecordSpec s;
  s.model = text_of(record, m, "model", "", "a preset name or models/<file>");
  if (s.model.empty()) throw InputError(field(record, "model"), "missing", "a preset name or models/<file>");
  s.args = args_of(record, m);
  s.stage = stage_of(record, m);
  s.assumptions = record_text(m, "assumptions");
  // A run that ran out of memory: no measurement, but the prediction must exceed the GPU's memory.
  const std::string expect = text_of(record, m, "expect", "", "out-of-memory (or no expect field)");
  if (!expect.empty() && expect != "out-of-memory") {
    throw InputError(field(record, "expect"), expect, "out-of-memory (or no expect field)");
  }
  if (expect == "out-of-memory") {
    const auto cap_it = record.find("gpu_capacity_gib");
    const json cap = cap_it != record.end() ? *cap_it : json();
    if (!cap.is_number() || !(cap.get<double>() > 0) || cap.get<double>() > 1e6) {
      throw InputError(fmt::format("{}: gpu_capacity_gib", record_text(record, "id")), shown(cap),
                       "the GPU's memory in GiB, for a run that ran out of memory");
    }
    s.measurements.push_back(
        {"out-of-memory", Bytes(static_cast<std::uint64_t>(std::llround(cap.get<double>() * 1073741824.0))), ""});
    return s;
  }
  s.measurements.push_back(measurement_of(record, m, ""));
  if (const auto companions = m.find("companions"); companions != m.end() && !companions->is_null()) {
    if (!companions->is_array()) throw InputError(field(record, "companions"), shown(*companions), "a list of {metric, value, unit}");
    for (const json& c : *companions) {
      const Measurement companion = measurement_of(record, c, "");
      s.measurements.push_back(Measurement{companion.metric, companion.bytes, companion.metric});
    }
  }
  // The record's own normalised figure must agree with value x unit: a unit slip is an error.
  const auto gib_it = record.find("measured_gib_normalized");
  if (gib_it != record.end() && gib_it->is_number()) {
    const json& gib = *gib_it;
    const double stated = gib.get<double>() * 1073741824.0, derived = static_cast<double>(s.measurements[0].bytes.value());
    if (std::fabs(stated - derived) > 0.01 * derived) {
      throw InputError(field(record, "unit"), text_of(record, m, "unit", "", "GiB, MiB, GB or bytes"),
                       fmt::format("a unit in which measured_value is measured_gib_normalized ({} GiB)", gib.get<double>()));
    }
  }
  return s;
}

std::string record_text(const json& record, const char* key) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : shown(*it);
}

}  // namespace moemem
