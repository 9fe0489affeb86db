#include "moemem/activation.hpp"

#include <fmt/format.h>

#include "moemem/errors.hpp"

namespace moemem {

void validate_training(const TrainingConfig& t, const Layout& layout) {
  if (t.micro_batch < 1 || t.micro_batch > kMaxMicroBatch) {
    throw InputError("--micro-batch", std::to_string(t.micro_batch), fmt::format("an integer from 1 to {}", kMaxMicroBatch));
  }
  if (t.seq_len < 1 || t.seq_len > kMaxSeqLen) {
    throw InputError("--seq-len", std::to_string(t.seq_len), fmt::format("an integer from 1 to {}", kMaxSeqLen));
  }
  if (t.zero < 0 || t.zero > 3) throw InputError("--zero", std::to_string(t.zero), "0, 1, 2 or 3");
  const auto& p = layout.config;
  if (t.global_batch) {
    const std::int64_t per_step = t.micro_batch * p.dp;
    if (*t.global_batch < 1 || *t.global_batch % per_step != 0) {
      throw InputError("--global-batch", std::to_string(*t.global_batch),
                       fmt::format("a positive multiple of micro-batch x dp = {}", per_step));
    }
  }
  if (t.vocab_multiple && (*t.vocab_multiple < 1 || *t.vocab_multiple > kMaxDegree)) {
    throw InputError("--make-vocab-size-divisible-by", std::to_string(*t.vocab_multiple),
                     fmt::format("an integer from 1 to {}", kMaxDegree));
  }
  const std::int64_t split = p.cp * (p.sp ? p.tp : 1);
  if (t.seq_len % split != 0) {
    throw InputError("--seq-len", std::to_string(t.seq_len),
                     fmt::format("a multiple of cp{} = {}", p.sp ? "*tp (sequence parallelism is on)" : "", split));
  }
}

Bytes kept_bytes(const std::vector<ActivationTerm>& terms, Recompute r) {
  Bytes b;
  for (const auto& t : terms) {
    if (r == Recompute::none || t.kept_under_full) b += t.bytes();
  }
  return b;
}

std::string_view name_of(Recompute r) { return r == Recompute::none ? "none" : "full"; }

std::string_view name_of(AttentionKernel a) { return a == AttentionKernel::eager ? "eager" : "flash"; }

std::optional<std::int64_t> microbatches_per_step(const TrainingConfig& t, const Layout& layout) {
  if (!t.global_batch) return std::nullopt;
  return *t.global_batch / (t.micro_batch * layout.config.dp);
}

std::string_view name_of(OverheadPoint p) {
  switch (p) {
    case OverheadPoint::none: return "none";
    case OverheadPoint::low: return "low";
    case OverheadPoint::high: return "high";
  }
  return "?";
}

}  // namespace moemem
