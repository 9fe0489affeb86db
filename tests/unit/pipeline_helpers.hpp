// Helpers shared by the library-level pipeline tests (test_pipeline_*.cpp,
// test_megatron_logits.cpp): checked casts, parallel settings, presets with their MTP depth,
// the megatron profile's training defaults, and the message of a thrown InputError.
#pragma once

#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"
#include "moemem/training.hpp"

namespace moemem::test::pipeline {

inline std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }
inline std::size_t idx(std::int64_t v) { return static_cast<std::size_t>(v); }

using I64s = std::vector<std::int64_t>;

inline ParallelConfig par(std::int64_t tp, std::int64_t pp, std::int64_t dp, std::int64_t ep, bool sp = false,
                          std::int64_t etp = 1) {
  ParallelConfig p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.ep = ep;
  p.etp = etp;
  p.sp = sp;
  return p;
}

inline ModelSpec model(const std::string& preset, std::int64_t mtp) {
  ModelSpec m = load_model(preset);
  set_mtp_layers(m, mtp);
  return m;
}

inline TrainingConfig megatron_training() {
  TrainingConfig t;
  t.precision = megatron_profile().default_precision;
  t.overhead = OverheadPoint::none;
  return t;
}

// What a thrown InputError says, or "" when nothing is thrown.
template <class F>
inline std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace moemem::test::pipeline
