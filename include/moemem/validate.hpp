// Predictions against published per-GPU memory measurements. Each record (one JSON object per
// line, the schema of tests/data/validation/measured-public.jsonl) is mapped to a moemem model,
// layout and training configuration; the quantity it measured (peak allocated, peak reserved, or
// device memory in use) is predicted on the rank it was measured on. Records moemem cannot
// represent yet are kept with the reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// The measurement set compiled into the library (tests/data/validation/measured-public.jsonl).
[[nodiscard]] std::string_view public_measurement_set();

// Evaluates every record of `jsonl` with confidence >= `min`. Throws InputError on a malformed
// line (naming the line number and the field).
[[nodiscard]] std::vector<ValidationResult> validate_records(std::string_view jsonl, const std::string& source,
                                                             Confidence min);
// Median and max absolute error per family, and overall (family "all").
[[nodiscard]] std::vector<ValidationSummary> summarize(const std::vector<ValidationResult>& results);

}  // namespace moemem
