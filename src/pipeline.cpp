#include "moemem/pipeline.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "moemem/errors.hpp"

namespace moemem {

std::string_view name_of(Schedule s) {
  switch (s) {
    case Schedule::one_f_one_b: return "1f1b";
    case Schedule::interleaved: return "interleaved";
    case Schedule::dualpipe: return "dualpipe";
    case Schedule::dualpipev: return "dualpipev";
    case Schedule::gpipe: return "gpipe";
    case Schedule::zb_h1: return "zb-h1";
  }
  return "?";
}

Schedule parse_schedule(std::string_view text) {
  for (const auto s : {Schedule::one_f_one_b, Schedule::interleaved, Schedule::dualpipe, Schedule::dualpipev,
                       Schedule::gpipe, Schedule::zb_h1}) {
    if (text == name_of(s)) return s;
  }
  throw InputError("--schedule", std::string(text), "one of 1f1b, interleaved, dualpipe, dualpipev, gpipe, zb-h1");
}

namespace {

// Expanded layouts longer than this are refused (a guard against "(t)*999999999").
constexpr std::size_t kMaxExpanded = 1 << 20;

class LayoutParser {
 public:
  explicit LayoutParser(std::string_view text) : text_(text) {}

  std::string parse() {
    std::string out = sequence(0);
    if (pos_ < text_.size()) fail("an item (E, t, m, L, |, '(') — unmatched ')'");
    return out;
  }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& expected) const {
    const std::string shown = fmt::format("{} (at position {}: '{}')", text_, pos_,
                                          pos_ < text_.size() ? std::string(1, text_[pos_]) : std::string("end"));
    throw InputError("--pipeline-model-parallel-layout", shown, expected);
  }

  void skip_cosmetic() {
    while (pos_ < text_.size() && (text_[pos_] == ',' || text_[pos_] == ' ')) ++pos_;
  }

  std::string sequence(int depth) {
    std::string out;
    for (;;) {
      skip_cosmetic();
      if (pos_ >= text_.size() || text_[pos_] == ')') {
        if (pos_ < text_.size() && depth == 0) fail("an item (E, t, m, L, |, '('), not ')'");
        return out;
      }
      std::string item = atom(depth);
      skip_cosmetic();
      if (pos_ < text_.size() && text_[pos_] == '*') {
        ++pos_;
        const std::size_t start = pos_;
        std::uint64_t n = 0;
        while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
          n = n * 10 + static_cast<std::uint64_t>(text_[pos_] - '0');
          if (n > kMaxExpanded) fail(fmt::format("a repetition count of at most {}", kMaxExpanded));
          ++pos_;
        }
        if (pos_ == start) fail("a number after '*'");
        if (item.size() * n > kMaxExpanded) fail(fmt::format("a layout of at most {} items once expanded", kMaxExpanded));
        if (item.empty()) continue;  // an empty group repeated is empty (and must not loop n times)
        std::string rep;
        for (std::uint64_t i = 0; i < n; ++i) rep += item;
        item = std::move(rep);
      }
      out += item;
      if (out.size() > kMaxExpanded) fail(fmt::format("a layout of at most {} items once expanded", kMaxExpanded));
    }
  }

  std::string atom(int depth) {
    const char c = text_[pos_];
    if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
      ++pos_;
      return std::string(1, c);
    }
    if (c == '(') {
      if (depth > 16) fail("groups nested at most 16 deep");
      ++pos_;
      std::string inner = sequence(depth + 1);
      if (pos_ >= text_.size() || text_[pos_] != ')') fail("')' closing the group");
      ++pos_;
      return inner;
    }
    fail("E (embedding), t (decoder layer), m (MTP), L (loss), | (stage boundary), '(', ')' or '*N'");
  }
};

}  // namespace

std::vector<LayoutStage> parse_pipeline_layout(std::string_view text) {
  if (text.empty()) throw InputError("--pipeline-model-parallel-layout", "", "a non-empty layout such as Et|(tt|)*30mL");
  const std::string flat = LayoutParser(text).parse();
  std::vector<LayoutStage> stages(1);
  for (const char c : flat) {
    if (c != '|') stages.back().items += c;
    switch (c) {
      case '|': stages.emplace_back(); break;
      case 'E': ++stages.back().embedding; break;
      case 't': ++stages.back().decoder; break;
      case 'm': ++stages.back().mtp; break;
      case 'L': ++stages.back().loss; break;
      default: break;
    }
  }
  return stages;
}

InFlight in_flight(Schedule s, std::int64_t rank, std::int64_t pp, std::int64_t chunks_of_rank,
                   std::optional<std::int64_t> m, std::span<const std::uint64_t> weights) {
  InFlight f;
  in_flight_into(s, rank, pp, chunks_of_rank, m, f, weights);
  return f;
}

namespace {

// Megatron-Core's interleaved 1F1B (schedules.py: get_pp_rank_microbatches, get_schedule_table,
// microbatch group size = pp). Forward k runs the model chunk of entry k of the schedule table:
// groups of pp micro-batches, each group through chunks 0..v-1, the last group holding the
// remainder; backward k runs chunk v - 1 - (that chunk). Warm-up runs (pp - rank - 1) * 2 +
// (v - 1) * pp forwards (all m * v when that is more); then each steady step runs one forward and
// one backward. Holds, per chunk, the micro-batches at the instant after a forward where the
// weighted sum (weights: a micro-batch's bytes per chunk; empty: 1 each) is largest.
void interleaved(std::int64_t rank, std::int64_t pp, std::int64_t v, std::int64_t mb, std::span<const std::uint64_t> weights,
                 InFlight& f) {
  const std::int64_t group = pp;
  const std::int64_t total = mb * v;
  const std::int64_t full_entries = (mb / group) * group * v;
  const std::int64_t rem = mb % group;
  const auto chunk_of = [&](std::int64_t k) {
    return k < full_entries ? (k % (group * v)) / group : (k - full_entries) / rem;
  };
  const std::int64_t warmup = std::min((pp - rank - 1) * 2 + (v - 1) * group, total);
  std::vector<std::int64_t>& held = f.per_chunk;
  for (std::int64_t k = 0; k < warmup; ++k) ++held[static_cast<std::size_t>(chunk_of(k))];
  if (warmup == total) return;  // every forward before the first backward
  const bool uniform = weights.empty() || std::all_of(weights.begin(), weights.end(), [&](auto w) { return w == weights[0]; });
  // The count peaks right after the first steady forward and stays there; with chunks of
  // different sizes the heaviest instant can come later. The steady state repeats every
  // group * v steps, so two periods cover every distinct instant.
  const std::int64_t steps = uniform ? 1 : std::min(total - warmup, 2 * group * v + 1);
  std::vector<std::int64_t> best;
  std::uint64_t best_weight = 0;
  const auto weight_of = [&](const std::vector<std::int64_t>& h) {
    std::uint64_t w = 0;
    for (std::size_t c = 0; c < h.size(); ++c) w += static_cast<std::uint64_t>(h[c]) * (weights.empty() ? 1 : weights[c]);
    return w;
  };
  for (std::int64_t j = 0; j < steps; ++j) {
    ++held[static_cast<std::size_t>(chunk_of(warmup + j))];
    const std::uint64_t w = weight_of(held);
    if (best.empty() || w > best_weight) {
      best = held;
      best_weight = w;
    }
    --held[static_cast<std::size_t>(v - 1 - chunk_of(j))];
  }
  held = std::move(best);
}

}  // namespace

void in_flight_into(Schedule s, std::int64_t rank, std::int64_t pp, std::int64_t chunks_of_rank,
                    std::optional<std::int64_t> m, InFlight& f, std::span<const std::uint64_t> weights) {
  f.per_chunk.assign(static_cast<std::size_t>(chunks_of_rank), 0);
  f.total = 0;
  // Without a global batch, assume enough micro-batches to fill the pipeline.
  switch (s) {
    case Schedule::one_f_one_b:
    case Schedule::zb_h1:  // ZB-H1 keeps 1F1B's activation memory
      f.per_chunk[0] = m ? std::min(pp - rank, *m) : pp - rank;
      break;
    case Schedule::gpipe:
      if (!m) throw InputError("--global-batch", "missing", "the sequences per step: GPipe keeps every micro-batch of the step");
      f.per_chunk[0] = *m;
      break;
    case Schedule::interleaved: {
      // Enough micro-batches to fill the pipeline: a multiple of pp past the warm-up.
      const std::int64_t v = chunks_of_rank;
      const std::int64_t fill = ((pp - rank - 1) * 2 + (v - 1) * pp) / v + 2 * pp;
      interleaved(rank, pp, v, m.value_or(fill - fill % pp + pp), weights, f);
      break;
    }
    case Schedule::dualpipe: {
      // deepseek-ai/DualPipe (dualpipe.py, warm-up steps 1-4): rank r holds pp - r micro-batches
      // of stage r (its forward-direction chunk) and r + 1 of stage pp - 1 - r (the reverse
      // direction): PP + 1 in all, the DeepSeek-V3 report's Table 2.
      f.per_chunk[0] = m ? std::min(pp - rank, *m) : pp - rank;
      f.per_chunk[1] = m ? std::min(rank + 1, *m) : rank + 1;
      break;
    }
    case Schedule::dualpipev: {
      // deepseek-ai/DualPipe (dualpipev.py): the V over 2pp chunks holds 2pp - c micro-batches of
      // chunk c, as 1F1B over 2pp stages: rank r holds chunks r and 2pp - 1 - r, 2pp + 1 in all
      // (the README's PP + 1 for PP/2 devices).
      f.per_chunk[0] = m ? std::min(2 * pp - rank, *m) : 2 * pp - rank;
      f.per_chunk[1] = m ? std::min(rank + 1, *m) : rank + 1;
      break;
    }
  }
  for (const auto c : f.per_chunk) f.total += c;
}

}  // namespace moemem
