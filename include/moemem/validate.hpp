// Predictions against published per-GPU memory measurements. Each record (one JSON object per
// line, the schema of tests/data/validation/measured-public.jsonl) carries a `moemem` object: the
// model, the analyze arguments that represent the run, the metric (peak allocated, peak reserved
// or device memory in use), the stage measured and the unit. The caller turns model and arguments
// into a Request as the CLI does (RequestBuilder), and the record takes the ordinary path:
// make_scenario, analyze. A record that cannot be represented says why.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "moemem/scenario.hpp"
#include "moemem/units.hpp"

namespace moemem {

enum class Confidence : std::uint8_t { low, medium, high };
[[nodiscard]] Confidence parse_confidence(std::string_view text, std::string_view field);

struct ValidationResult {
  std::string id, family, metric, confidence;
  std::string profile;  // the accounting profile the prediction used
  Bytes measured;
  std::optional<Bytes> predicted;   // absent when not representable
  std::optional<double> error_pct;  // signed, (predicted - measured) / measured
  std::string reason;               // why not representable, or the model used and assumptions made
  std::string dominant;             // the largest terms of the predicted stage
  std::optional<bool> oom_consistent;  // a run that ran out of memory: does the prediction exceed the GPU?
};

// Errors of the predicted records of one family or one metric, percent.
struct ValidationSummary {
  std::string group;  // a family ("torchtitan", ...), a metric ("metric allocated", ...) or "all"
  std::int64_t records = 0, predicted = 0;
  std::int64_t oom_checks = 0, oom_missed = 0;  // out-of-memory runs, and those predicted to fit
  double median_abs_error = 0, max_abs_error = 0, mean_signed_error = 0;
  double min_signed_error = 0, max_signed_error = 0;
};

// One quantity a record measured; `label` is empty for the record's main measurement and names a
// companion (e.g. "reserved") otherwise.
struct Measurement {
  std::string metric;  // allocated | reserved | device-used | out-of-memory (bytes: the GPU's memory)
  Bytes bytes;
  std::string label;
};

// A record's `moemem` object.
struct RecordSpec {
  std::string model;              // a preset name, or models/<file>: .json a config.json, .args Megatron flags
  std::vector<std::string> args;  // analyze's arguments for the run
  std::string stage = "peak";     // peak | last | a stage number
  std::vector<Measurement> measurements;
  std::string assumptions;        // settings the source leaves unstated, and what was taken
};

// The record's moemem object, or the reason it cannot be represented. Throws InputError naming
// the record and field when the object is malformed.
[[nodiscard]] std::variant<RecordSpec, std::string> record_spec(const nlohmann::json& record);
// A record's field as text: a string as it is, another value as JSON, "" when absent or null.
[[nodiscard]] std::string record_text(const nlohmann::json& record, const char* key);
// The family a record is summarised under: Megatron-LM, FlagPerf (Megatron), torchtitan, or its framework.
[[nodiscard]] std::string record_family(const nlohmann::json& record);

// Builds the request a spec describes (the CLI parses its arguments as analyze would); throws
// InputError when the arguments are not accepted.
using RequestBuilder = std::function<Request(const RecordSpec&)>;

// The measurement set compiled into the library (tests/data/validation/measured-public.jsonl).
[[nodiscard]] std::string_view public_measurement_set();
// tests/data/validation/measured-device.jsonl, compiled in: training steps measured on a GPU by
// moemem's developers with scripts/measure/hf_step_memory.py (the records' model files are the
// public set's).
[[nodiscard]] std::string_view device_measurement_set();
// A model file the public set's records name ("models/<file>"), compiled in with it.
[[nodiscard]] std::optional<std::string_view> public_set_model(std::string_view name);

// Evaluates every record of `jsonl` with confidence >= `min`: one result per measurement (a
// companion's id is "<id>#<metric>"). Throws InputError on a malformed line (naming the line
// number and the field).
[[nodiscard]] std::vector<ValidationResult> validate_records(std::string_view jsonl, const std::string& source,
                                                             Confidence min, const RequestBuilder& build);
// Per family, per metric ("metric allocated", ...) and overall ("all").
[[nodiscard]] std::vector<ValidationSummary> summarize(const std::vector<ValidationResult>& results);

}  // namespace moemem
