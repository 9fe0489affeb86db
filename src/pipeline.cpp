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
    // The character at pos_, whole: a UTF-8 lead byte and its continuation bytes (a message cut
    // inside one is not valid UTF-8, which Python's binding cannot decode).
    std::size_t end = pos_ + 1;
    while (end < text_.size() && (static_cast<unsigned char>(text_[end]) & 0xC0U) == 0x80U) ++end;
    const std::string shown = fmt::format("{} (at position {}: '{}')", text_, pos_,
                                          pos_ < text_.size() ? std::string(text_.substr(pos_, end - pos_)) : std::string("end"));
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
  // Forwards [0, k) of chunk c: whole periods of group x v entries (group each), the partial
  // period, then the last group's rem entries per chunk.
  const auto forwards_before = [&](std::int64_t k, std::int64_t c) {
    const std::int64_t period = group * v, in_full = std::min(k, full_entries);
    std::int64_t n = in_full / period * group + std::clamp(in_full % period - c * group, std::int64_t{0}, group);
    if (k > full_entries) n += std::clamp(k - full_entries - c * rem, std::int64_t{0}, rem);
    return n;
  };
  // Per chunk, the forwards of [0, fwd) less the backwards of [0, bwd) (backward j runs chunk
  // v - 1 - that of forward j).
  std::vector<std::int64_t>& held = f.per_chunk;
  const auto hold = [&](std::int64_t fwd, std::int64_t bwd) {
    for (std::int64_t c = 0; c < v; ++c) held[static_cast<std::size_t>(c)] = forwards_before(fwd, c) - forwards_before(bwd, v - 1 - c);
  };
  const std::int64_t warmup = std::min((pp - rank - 1) * 2 + (v - 1) * group, total);
  hold(warmup, 0);
  if (warmup == total) return;  // every forward before the first backward
  const bool uniform = weights.empty() || std::all_of(weights.begin(), weights.end(), [&](auto w) { return w == weights[0]; });
  if (uniform) {
    hold(warmup + 1, 0);  // the count peaks right after the first steady forward and stays there
    return;
  }
  // With chunks of different sizes the heaviest instant can come later. While forwards stay in
  // the whole groups the steady state repeats every group x v steps (each chunk as many forwards
  // as backwards per period), so the first period and one step cover those instants; the
  // forwards of the last group's remainder (rem x v of them) come after, each walked. The weighted
  // sum moves by one chunk's weight per forward and per backward; the chunks of forwards k, k+1,
  // ... are walked without dividing.
  const std::int64_t steady = total - warmup;
  struct Cursor {
    std::int64_t k, chunk, pos;  // forward k runs `chunk`, the pos-th entry of its run
  };
  const auto cursor_at = [&](std::int64_t k) {
    return k < full_entries ? Cursor{k, (k % (group * v)) / group, k % group} : Cursor{k, (k - full_entries) / rem, (k - full_entries) % rem};
  };
  const auto advance = [&](Cursor& cur) {
    ++cur.k;
    ++cur.pos;
    if (cur.k == full_entries) {
      cur.chunk = cur.pos = 0;
    } else if (cur.pos == (cur.k < full_entries ? group : rem)) {
      cur.pos = 0;
      cur.chunk = cur.k < full_entries ? (cur.chunk + 1) % v : cur.chunk + 1;
    }
  };
  std::int64_t best_step = -1;
  std::uint64_t best_weight = 0;
  // Steps [first, last): the instant after forward warmup + j, before backward j.
  const auto walk = [&](std::int64_t first, std::int64_t last) {
    if (first >= last) return;
    hold(warmup + first, first);
    std::uint64_t w = 0;
    for (std::size_t c = 0; c < held.size(); ++c) w += static_cast<std::uint64_t>(held[c]) * weights[c];
    Cursor fwd = cursor_at(warmup + first), bwd = cursor_at(first);
    for (std::int64_t j = first; j < last; ++j, advance(fwd), advance(bwd)) {
      w += weights[static_cast<std::size_t>(fwd.chunk)];
      if (best_step < 0 || w > best_weight) {
        best_step = j;
        best_weight = w;
      }
      w -= weights[static_cast<std::size_t>(v - 1 - bwd.chunk)];
    }
  };
  const std::int64_t periodic = std::min(steady, group * v + 1);
  walk(0, periodic);
  walk(std::max(periodic, full_entries - warmup), steady);
  hold(warmup + best_step + 1, best_step);
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
      std::int64_t mb = m.value_or(fill - fill % pp + pp);
      // Past the warm-up (under (v + 1) pp forwards, so within 4 groups of pp micro-batches) the
      // schedule repeats every group until the last group's remainder: 8 groups and the remainder
      // hold what any larger count holds, and keep mb x v far from overflowing.
      if (mb > 8 * pp) mb = 8 * pp + mb % pp;
      interleaved(rank, pp, v, mb, weights, f);
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
