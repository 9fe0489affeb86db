// Predictions against published per-GPU memory measurements. Each record (one JSON object per
// line, the schema of tests/data/validation/measured-public.jsonl) becomes a Request, as the
// CLI's flags do (record_request), and takes the ordinary path: make_scenario, analyze; the
// quantity it measured (peak allocated, peak reserved, or device memory in use) is predicted on
// the rank it was measured on. Records moemem cannot represent yet are kept with the reason.
#pragma once

#include <cstdint>
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
  Bytes measured;
  std::optional<Bytes> predicted;   // absent when not representable
  std::optional<double> error_pct;  // signed, (predicted - measured) / measured
  std::string reason;               // why not representable, or approximations made
  std::string dominant;             // the largest terms of the predicted stage
};

struct ValidationSummary {
  std::string family;
  std::int64_t records = 0, predicted = 0;
  double median_abs_error = 0, max_abs_error = 0;
};

// One record as a request, with what it measured and where.
struct RecordRequest {
  Request request;
  std::string metric;      // allocated | reserved | device-used
  bool last_rank = false;  // measured on the last pipeline rank (else the peak stage)
  std::string notes;       // the model used (a preset or the record's architecture) and approximations
};

// The request a record describes, or the reason moemem cannot represent it. A record naming a
// preset (data/models) whose stated architecture agrees with it uses the preset; otherwise the
// model is built from the record's model_arch. Settings the record leaves unstated stay unset.
[[nodiscard]] std::variant<RecordRequest, std::string> record_request(const nlohmann::json& record);
// A record's field as text: a string as it is, another value as JSON, "" when absent or null.
[[nodiscard]] std::string record_text(const nlohmann::json& record, const char* key);
// What a record measured: allocated, reserved or device-used.
[[nodiscard]] std::string record_metric(const nlohmann::json& record);
// The family a record is summarised under: Megatron-LM, FlagPerf (Megatron), torchtitan, or its framework.
[[nodiscard]] std::string record_family(const nlohmann::json& record);

// The measurement set compiled into the library (tests/data/validation/measured-public.jsonl).
[[nodiscard]] std::string_view public_measurement_set();

// Evaluates every record of `jsonl` with confidence >= `min`. Throws InputError on a malformed
// line (naming the line number and the field).
[[nodiscard]] std::vector<ValidationResult> validate_records(std::string_view jsonl, const std::string& source,
                                                             Confidence min);
// Median and max absolute error per family, and overall (family "all").
[[nodiscard]] std::vector<ValidationSummary> summarize(const std::vector<ValidationResult>& results);

}  // namespace moemem
