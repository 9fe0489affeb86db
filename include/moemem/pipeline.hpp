// Pipeline layouts and schedules. The model is cut, in model order, into chunks (embedding,
// decoder layers, MTP depths, loss); each pipeline rank holds one chunk (1F1B, GPipe, ZB-H1),
// v chunks (interleaved 1F1B), or two (DualPipe: stages r and pp-1-r, parameters twice;
// DualPipeV: chunks r and 2pp-1-r of 2pp). The schedule decides how many micro-batches of
// activations each chunk of a rank holds at the rank's peak.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moemem {

enum class Schedule : std::uint8_t { one_f_one_b, interleaved, dualpipe, dualpipev, gpipe, zb_h1 };

[[nodiscard]] std::string_view name_of(Schedule s);
[[nodiscard]] Schedule parse_schedule(std::string_view text);

// One contiguous piece of the model, in model order.
struct Chunk {
  std::int64_t first_layer = 0;  // first decoder layer
  std::int64_t num_layers = 0;   // decoder layers (may be 0)
  bool embedding = false;        // E: the input embedding
  bool loss = false;             // L: final norm, output head and loss
  std::int64_t first_mtp = 0;    // first MTP depth held
  std::int64_t mtp_depths = 0;   // m: MTP depths held
};

// What a Megatron layout string says (`Et|(tt|)*30mL`): one item list per stage, in the
// order written (virtual-stage-major: stage i is virtual stage i / pp of rank i % pp).
struct LayoutStage {
  std::int64_t embedding = 0, decoder = 0, mtp = 0, loss = 0;
  std::string items;  // the stage's items in order, e.g. "Ett"
};

// Parses a layout string: E, t, m, L, '|' between stages, '(...)' groups, '*N' repetition of
// the preceding item or group, commas and spaces ignored. Throws InputError pointing at the
// offending position.
[[nodiscard]] std::vector<LayoutStage> parse_pipeline_layout(std::string_view text);

// Micro-batches of chunk activations rank `rank` holds at its peak, per chunk it holds, for
// `m` micro-batches per step (nullopt: enough to fill the pipeline). `chunks_of_rank` is the
// number of chunks the rank holds (v for interleaved).
struct InFlight {
  std::vector<std::int64_t> per_chunk;  // indexed like the rank's chunk list
  std::int64_t total = 0;               // sum of per_chunk
};
[[nodiscard]] InFlight in_flight(Schedule s, std::int64_t rank, std::int64_t pp, std::int64_t chunks_of_rank,
                                 std::optional<std::int64_t> m, std::span<const std::uint64_t> weights = {});
// The same into `out`, reusing its storage. `weights` (one per chunk of the rank: the bytes one
// micro-batch keeps in it) pick, where the schedule's per-chunk counts change over the steady
// state (interleaved), the instant holding the most bytes; empty: the most micro-batches.
void in_flight_into(Schedule s, std::int64_t rank, std::int64_t pp, std::int64_t chunks_of_rank,
                    std::optional<std::int64_t> m, InFlight& out, std::span<const std::uint64_t> weights = {});

}  // namespace moemem
