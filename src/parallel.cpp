#include "moemem/parallel.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "moemem/errors.hpp"
#include "moemem/units.hpp"

namespace moemem {

namespace {

// The first rule a layout breaks, or none. Every check returns one instead of throwing, so that
// check_layout() can say why a layout is invalid and resolve_layout() throws the same error.
using Problem = std::optional<InputError>;

Problem check_degree(std::int64_t v, const char* flag) {
  if (v < 1 || v > kMaxDegree) {
    return InputError(flag, std::to_string(v), fmt::format("an integer from 1 to {}", kMaxDegree));
  }
  return std::nullopt;
}

Problem check_divides(std::int64_t whole, const char* what, std::int64_t by, const char* flag) {
  if (whole % by != 0) {
    return InputError(flag, std::to_string(by), fmt::format("a divisor of {} ({})", what, whole));
  }
  return std::nullopt;
}

std::string list_text(const std::vector<std::int64_t>& v) { return fmt::format("{}", fmt::join(v, ",")); }

// Default split: ceil(L/chunks) layers per chunk, the last taking what remains.
Problem even_split(std::int64_t num_layers, std::int64_t pp, std::vector<std::int64_t>& split) {
  const std::int64_t per = (num_layers + pp - 1) / pp;
  const std::int64_t last = num_layers - per * (pp - 1);
  if (last < 0) {
    return InputError("pipeline chunks (--pp x --vpp)", std::to_string(pp),
                      fmt::format("a chunk count for which ceil({0}/chunks) layers on each chunk but the last leaves "
                                  "the last at least 0 (or give --layers-per-stage or a layout string)",
                                  num_layers));
  }
  split.assign(static_cast<std::size_t>(pp), per);
  split.back() = last;
  return std::nullopt;
}

// Decoder layers per chunk for Megatron's uneven first/last split: the given end stages, the
// rest divided evenly over the middle ones.
Problem first_last_split(const ModelSpec& m, const ParallelConfig& p, std::int64_t n, std::vector<std::int64_t>& split) {
  if (n != p.pp) {
    return InputError("--decoder-first/last-pipeline-num-layers", "with virtual stages",
                      "no --vpp and no dualpipev (use --pipeline-model-parallel-layout for those)");
  }
  for (const auto& [v, flag] : {std::pair{p.first_stage_layers, "--decoder-first-pipeline-num-layers"},
                               std::pair{p.last_stage_layers, "--decoder-last-pipeline-num-layers"}}) {
    if (v && (*v < 0 || *v > m.num_layers)) {
      return InputError(flag, std::to_string(*v), fmt::format("a layer count from 0 to {}", m.num_layers));
    }
  }
  const std::int64_t first = p.first_stage_layers.value_or(-1), last = p.last_stage_layers.value_or(-1);
  const std::int64_t fixed_stages = (first >= 0 ? 1 : 0) + (last >= 0 ? 1 : 0);
  const std::int64_t rest = m.num_layers - std::max<std::int64_t>(first, 0) - std::max<std::int64_t>(last, 0);
  const std::int64_t middle = n - fixed_stages;
  if (n < 2) {  // Megatron's first/last-stage counts split a pipeline
    return InputError(first >= 0 ? "--decoder-first-pipeline-num-layers" : "--decoder-last-pipeline-num-layers",
                      std::to_string(first >= 0 ? first : last), "a pipeline of 2 or more stages (--pp)");
  }
  if (rest < 0 || (middle == 0 && rest != 0) || (middle > 0 && rest % middle != 0)) {
    const std::string given = first >= 0 && last >= 0 ? fmt::format("first {} last {}", first, last)
                              : first >= 0             ? fmt::format("first {}", first)
                                                       : fmt::format("last {}", last);
    return InputError("--decoder-first/last-pipeline-num-layers", given,
                      fmt::format("counts leaving the other {} stages an equal share of the remaining {} of {} layers",
                                  std::max<std::int64_t>(middle, 0), rest, m.num_layers));
  }
  split.assign(static_cast<std::size_t>(n), middle > 0 ? rest / middle : 0);
  if (first >= 0) split.front() = first;
  if (last >= 0) split.back() = last;
  return std::nullopt;
}

// --layers-per-stage as given: one count per chunk, each within the model, summing to it.
Problem given_split(const ModelSpec& m, const std::vector<std::int64_t>& split, std::int64_t n) {
  if (static_cast<std::int64_t>(split.size()) != n) {
    return InputError("--layers-per-stage", list_text(split),
                      fmt::format("exactly {} comma-separated layer counts (one per pipeline chunk)", n));
  }
  std::int64_t sum = 0;
  for (const auto k : split) {
    if (k < 0 || k > m.num_layers) {
      return InputError("--layers-per-stage", std::to_string(k), fmt::format("layer counts from 0 to {}", m.num_layers));
    }
    sum += k;
  }
  if (sum != m.num_layers) {
    return InputError("--layers-per-stage", fmt::format("{} (sum {})", list_text(split), sum),
                      fmt::format("layer counts that sum to the model's {} layers", m.num_layers));
  }
  return std::nullopt;
}

// Megatron: the embedding and/or the loss count as one layer each in an even split.
Problem embedding_loss_split(const ModelSpec& m, const ParallelConfig& p, std::int64_t n, std::vector<std::int64_t>& split) {
  const std::int64_t e = p.account_for_embedding ? 1 : 0, l = p.account_for_loss ? 1 : 0;
  const std::int64_t units = m.num_layers + e + l;
  if (units % n != 0) {
    return InputError("--account-for-embedding/loss-in-pipeline-split", fmt::format("{} layers + {} + {}", m.num_layers, e, l),
                      fmt::format("a total divisible by the {} pipeline chunks", n));
  }
  split.assign(static_cast<std::size_t>(n), units / n);
  split.front() -= e;
  split.back() -= l;
  if (split.front() < 0 || split.back() < 0) {
    return InputError("--account-for-embedding/loss-in-pipeline-split", "on", "chunks large enough to hold a layer");
  }
  return std::nullopt;
}

// torchtitan's default split (distributed/pipeline_parallel.py generate_llm_fqn_per_model_part
// from 0.2.0, generate_split_points with the same weights in 0.1.0): the embedding and the norm +
// output count as pipeline_parallel_first/last_stage_less_layers = 1 layer each (the config
// defaults); chunk i gets floor(units / n) units, plus one for i < units % n, the first and last
// giving their weight back; torchtitan raises when a chunk would get fewer units than a weight.
Problem titan_default_split(const ModelSpec& m, std::int64_t n, std::vector<std::int64_t>& split) {
  const std::int64_t units = m.num_layers + 2, per = units / n, extra = units % n;
  if (n > 1 && per < 1) {
    return InputError("--pp", std::to_string(n),
                      fmt::format("at most {} pipeline chunks for {} layers with torchtitan's default split (the embedding "
                                  "and the output count as a layer each: generate_llm_fqn_per_model_part)",
                                  units, m.num_layers));
  }
  split.assign(static_cast<std::size_t>(n), 0);
  if (n == 1) {
    split.front() = m.num_layers;
    return std::nullopt;
  }
  std::int64_t left = m.num_layers;
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t take = per + (i < extra ? 1 : 0) - (i == 0 ? 1 : 0) - (i == n - 1 ? 1 : 0);
    take = std::clamp<std::int64_t>(take, 0, left);
    split[static_cast<std::size_t>(i)] = take;
    left -= take;
  }
  split.back() += left;  // none left: the units add up to the layers
  return std::nullopt;
}

// The embedding, each MTP depth and the loss as one unit each beside the decoder layers: every
// chunk gets floor(units / chunks), the middle chunks (first ones first) one more while units
// remain, and the end chunks give their E, MTP and L units back as decoder layers they do not hold.
Problem balanced_units_split(const ModelSpec& m, std::int64_t n, std::vector<std::int64_t>& split) {
  const std::int64_t front = 1, back = 1 + m.mtp_layers;
  const std::int64_t units = m.num_layers + front + back;
  std::int64_t extra = units % n;
  split.assign(static_cast<std::size_t>(n), units / n);
  for (std::int64_t c = 1; c + 1 < n && extra > 0; ++c, --extra) ++split[static_cast<std::size_t>(c)];
  if (extra > 0) split.front() += extra;  // two chunks or fewer: the front takes the rest
  split.front() -= front;
  split.back() -= back;
  if (n == 1) split.front() = m.num_layers;
  if (split.front() < 0 || split.back() < 0) {
    return InputError("pipeline split (the recipe's default)", fmt::format("{} layers in {} chunks", m.num_layers, n),
                      "chunks large enough to hold the embedding, MTP and loss units (give --layers-per-stage)");
  }
  return std::nullopt;
}

// The layout string's stages. The parser (src/pipeline.cpp) reports a malformed string by
// throwing; this one catch turns that into the check's answer.
Problem parse_layout_string(const std::string& text, std::vector<LayoutStage>& stages) {
  try {
    stages = parse_pipeline_layout(text);
  } catch (const InputError& e) {
    return e;
  }
  return std::nullopt;
}

// Megatron's validate_layer_layout on the parsed stages: one E first, one L last, every decoder
// layer before any MTP layer, one t per decoder layer, as many m as MTP depths (or none).
Problem check_layout_string(const ModelSpec& m, const ParallelConfig& p, const std::vector<LayoutStage>& stages,
                            std::int64_t n) {
  const char* flag = "--pipeline-model-parallel-layout";
  if (static_cast<std::int64_t>(stages.size()) != n) {
    return InputError(flag, p.pipeline_layout,
                      fmt::format("{} stages separated by '|' (pp {} x virtual stages), not {}", n, p.pp, stages.size()));
  }
  std::int64_t e = 0, t = 0, mt = 0, l = 0;
  std::string all;
  for (const auto& s : stages) {
    e += s.embedding;
    t += s.decoder;
    mt += s.mtp;
    l += s.loss;
    all += s.items;
  }
  if (e != 1 || l != 1) return InputError(flag, p.pipeline_layout, "exactly one E (embedding) and one L (loss)");
  if (all.front() != 'E') return InputError(flag, p.pipeline_layout, "a layout whose first item is E (the embedding)");
  if (all.back() != 'L') return InputError(flag, p.pipeline_layout, "a layout whose last item is L (the loss)");
  if (mt > 0 && all.rfind('t') != std::string::npos && all.rfind('t') > all.find('m')) {
    return InputError(flag, p.pipeline_layout, "every decoder layer (t) placed before the MTP layers (m)");
  }
  if (t != m.num_layers) {
    return InputError(flag, fmt::format("{} ({} t)", p.pipeline_layout, t), fmt::format("{} t, one per decoder layer", m.num_layers));
  }
  if (mt != 0 && mt != m.mtp_layers) {
    return InputError(flag, fmt::format("{} ({} m)", p.pipeline_layout, mt),
                      fmt::format("as many m as MTP depths ({}; set --mtp)", m.mtp_layers));
  }
  return std::nullopt;
}

Problem chunks_from_layout_string(const ModelSpec& m, const ParallelConfig& p, std::int64_t n, std::vector<Chunk>& chunks) {
  std::vector<LayoutStage> stages;
  if (auto problem = parse_layout_string(p.pipeline_layout, stages)) return problem;
  if (auto problem = check_layout_string(m, p, stages, n)) return problem;
  std::int64_t layer = 0, mtp = 0;
  for (const auto& s : stages) {
    Chunk c;
    c.first_layer = layer;
    c.num_layers = s.decoder;
    c.embedding = s.embedding > 0;
    c.loss = s.loss > 0;
    c.first_mtp = mtp;
    c.mtp_depths = s.mtp;
    layer += s.decoder;
    mtp += s.mtp;
    chunks.push_back(c);
  }
  if (mtp == 0) {  // MTP not placed by the layout: it goes with the loss
    for (auto& c : chunks) {
      if (c.loss) c.mtp_depths = m.mtp_layers;
    }
  }
  return std::nullopt;
}

// Decoder layers per chunk: --layers-per-stage, else the first/last counts, else E/L counted as
// layers, else the default split.
Problem layer_split(const ModelSpec& m, const ParallelConfig& p, std::int64_t n, std::vector<std::int64_t>& split) {
  if (!p.layers_per_stage.empty()) {
    split = p.layers_per_stage;
    return given_split(m, split, n);
  }
  if (p.first_stage_layers || p.last_stage_layers) return first_last_split(m, p, n, split);
  if (p.account_for_embedding || p.account_for_loss) return embedding_loss_split(m, p, n, split);
  if (p.balance_units) return balanced_units_split(m, n, split);
  if (p.titan_split) return titan_default_split(m, n, split);
  return even_split(m.num_layers, n, split);
}

Problem cut_into_chunks(const ModelSpec& m, const ParallelConfig& p, std::int64_t n, std::vector<Chunk>& chunks) {
  if (!p.pipeline_layout.empty()) return chunks_from_layout_string(m, p, n, chunks);
  // Counting the embedding and the loss as layers (Megatron's --account-for-*-in-pipeline-split)
  // lets an end chunk hold that unit alone.
  const bool accounted = p.layers_per_stage.empty() && !p.first_stage_layers && !p.last_stage_layers;
  const std::int64_t units =
      m.num_layers + (accounted ? (p.account_for_embedding ? 1 : 0) + (p.account_for_loss ? 1 : 0) : 0);
  if (n > units && units > m.num_layers) {
    const char* counted = p.account_for_embedding && p.account_for_loss ? "the embedding and the loss"
                          : p.account_for_embedding                       ? "the embedding"
                                                                          : "the loss";
    return InputError("--pp", std::to_string(p.pp),
                      fmt::format("at most {} units ({} layers, {} counted as layers) in pipeline chunks (here {}); a "
                                  "layout string can place more",
                                  units, m.num_layers, counted, n));
  }
  if (n > units) {
    return InputError("--pp", std::to_string(p.pp),
                      fmt::format("at most the number of layers ({}) in pipeline chunks (here {}); a layout string "
                                  "can place more",
                                  m.num_layers, n));
  }
  std::vector<std::int64_t> split;
  if (auto problem = layer_split(m, p, n, split)) return problem;
  std::int64_t first = 0;
  for (const auto k : split) {
    chunks.push_back(Chunk{first, k, false, false, 0, 0});
    first += k;
  }
  chunks.front().embedding = true;
  chunks.back().loss = true;
  chunks.back().mtp_depths = m.mtp_layers;
  return std::nullopt;
}

// The degrees and the world size they make.
Problem check_degrees(const ParallelConfig& p, Layout& out) {
  for (const auto& [v, flag] : {std::pair{p.tp, "--tp"}, std::pair{p.pp, "--pp"}, std::pair{p.dp, "--dp"},
                               std::pair{p.cp, "--cp"}, std::pair{p.ep, "--ep"}, std::pair{p.etp_degree(), "--etp"}}) {
    if (auto problem = check_degree(v, flag)) return problem;
  }
  std::uint64_t world = 1;
  bool overflow = false;
  for (const auto d : {p.tp, p.pp, p.cp, p.dp}) overflow |= __builtin_mul_overflow(world, static_cast<std::uint64_t>(d), &world);
  if (overflow || world > static_cast<std::uint64_t>(kMaxWorld)) {
    return InputError("world size (tp*pp*cp*dp)",
                      fmt::format("{}*{}*{}*{} = {}", p.tp, p.pp, p.cp, p.dp, overflow ? "more than 2^64" : std::to_string(world)),
                      fmt::format("at most {} GPUs", kMaxWorld));
  }
  out.world_size = static_cast<std::int64_t>(world);
  return std::nullopt;
}

// Heads over tp; experts over ep and etp; whole expert groups in every stage (gives edp).
Problem check_model_split(const ModelSpec& m, const ParallelConfig& p, Layout& out) {
  if (auto problem = check_divides(m.num_heads, "num_attention_heads", p.tp, "--tp")) return problem;
  if (m.attention == AttentionKind::gqa) {
    if (auto problem = check_divides(m.num_kv_heads, "num_key_value_heads", p.tp, "--tp")) return problem;
  }
  if (!m.is_moe()) {
    if (p.ep != 1) return InputError("--ep", std::to_string(p.ep), "1 for a model without routed experts");
    if (p.etp_degree() != 1) return InputError("--etp", std::to_string(p.etp_degree()), "1 for a model without routed experts");
  } else {
    if (auto problem = check_divides(m.moe.num_routed_experts, "n_routed_experts", p.ep, "--ep")) return problem;
    if (auto problem = check_divides(m.moe.expert_ffn, "moe_intermediate_size", p.etp_degree(), "--etp")) return problem;
  }
  const std::int64_t dense_ranks = p.tp * p.cp * p.dp;  // ranks of one pipeline stage
  const std::int64_t etp = p.etp_degree();
  if (dense_ranks % (p.ep * etp) != 0) {
    return InputError("--ep/--etp", fmt::format("ep*etp = {}", p.ep * etp),
                      fmt::format("a divisor of tp*cp*dp = {} (every stage's ranks must form whole expert groups)",
                                  dense_ranks));
  }
  out.edp = dense_ranks / (p.ep * etp);
  return std::nullopt;
}

// The schedule in effect (vpp > 1 with 1f1b: interleaved) and the rules it brings.
Problem resolve_schedule(const ParallelConfig& p, Schedule& sched) {
  if (auto problem = check_degree(p.vpp, "--vpp")) return problem;
  if (p.vpp > 1) {
    // Megatron builds vpp model chunks and, without pipeline parallelism, runs
    // forward_backward_no_pipelining, which asserts one chunk ("non-pipeline-parallel schedule
    // does not support model chunking"; megatron/core/pipeline_parallel/schedules.py).
    if (p.pp == 1) {
      return InputError("--vpp", std::to_string(p.vpp),
                        "1 when --pp is 1 (model chunks need pipeline parallelism: Megatron's non-pipelined schedule takes one)");
    }
    if (sched == Schedule::one_f_one_b) sched = Schedule::interleaved;
    if (sched != Schedule::interleaved) {
      return InputError("--schedule", std::string(name_of(sched)), "1f1b or interleaved when --vpp > 1");
    }
  } else if (sched == Schedule::interleaved) {
    return InputError("--vpp", std::to_string(p.vpp), "at least 2 for the interleaved schedule");
  }
  if (sched == Schedule::dualpipe && p.pp % 2 != 0) {
    return InputError("--pp", std::to_string(p.pp), "an even number of stages for dualpipe");
  }
  return std::nullopt;
}

// The chunks each rank holds and the decoder layers they make.
void assign_chunks_to_ranks(Layout& out, std::int64_t num_chunks) {
  const std::int64_t pp = out.config.pp;
  const Schedule sched = out.config.schedule;
  out.rank_chunks.resize(static_cast<std::size_t>(pp));
  for (std::int64_t r = 0; r < pp; ++r) {
    auto& held = out.rank_chunks[static_cast<std::size_t>(r)];
    if (sched == Schedule::dualpipe) {
      // DualPipe: each rank holds stage r for one direction and stage pp-1-r for the other.
      held = {r, pp - 1 - r};
    } else if (sched == Schedule::dualpipev) {
      // DualPipeV: 2pp chunks folded into a V, rank r holding chunks r and 2pp-1-r.
      held = {r, 2 * pp - 1 - r};
    } else {
      for (std::int64_t c = r; c < num_chunks; c += pp) held.push_back(c);
    }
    StageRange range{-1, 0};
    for (const auto c : held) {
      const auto& ch = out.chunks[static_cast<std::size_t>(c)];
      if (ch.num_layers > 0 && (range.first_layer < 0 || ch.first_layer < range.first_layer)) {
        range.first_layer = ch.first_layer;
      }
      range.num_layers += ch.num_layers;
    }
    if (range.first_layer < 0) range.first_layer = 0;
    out.stages.push_back(range);
  }
}

}  // namespace

std::int64_t Layout::chunk_of_layer(std::int64_t layer) const {
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    if (layer >= chunks[c].first_layer && layer < chunks[c].first_layer + chunks[c].num_layers) return static_cast<std::int64_t>(c);
  }
  return 0;
}

std::int64_t Layout::chunk_with_embedding() const {
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    if (chunks[c].embedding) return static_cast<std::int64_t>(c);
  }
  return 0;
}

// At most one chunk holds the loss (a layout string has exactly one L; otherwise the last chunk),
// almost always the last: searched from the end.
std::int64_t Layout::chunk_with_loss() const {
  for (std::size_t c = chunks.size(); c-- > 0;) {
    if (chunks[c].loss) return static_cast<std::int64_t>(c);
  }
  return static_cast<std::int64_t>(chunks.size()) - 1;
}

std::int64_t Layout::chunk_of_mtp(std::int64_t depth) const {
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    if (depth >= chunks[c].first_mtp && depth < chunks[c].first_mtp + chunks[c].mtp_depths) return static_cast<std::int64_t>(c);
  }
  return chunk_with_loss();
}

bool Layout::rank_holds(std::int64_t rank, std::int64_t chunk) const {
  for (const auto c : rank_chunks[static_cast<std::size_t>(rank)]) {
    if (c == chunk) return true;
  }
  return false;
}

std::vector<std::int64_t> default_layer_split(std::int64_t num_layers, std::int64_t pp) {
  std::vector<std::int64_t> split;
  if (auto problem = even_split(num_layers, pp, split)) throw *problem;
  return split;
}

namespace {

// What a layout string says beyond the cut: Megatron infers the virtual stages from it
// (megatron/training/arguments.py: vpp = stages / pp when a layout is given), so a layout of
// k x pp stages under 1F1B is interleaved with vpp k. Under DualPipe every rank holds stage r of
// one direction's model copy and stage pp-1-r of the other's, so a layout may also write both
// copies out (2 x pp stages, the second half repeating the first); a single model cut into 2 x pp
// chunks and folded into a V is DualPipeV, named in the error.
Problem apply_layout_string(ParallelConfig& q) {
  if (q.pipeline_layout.empty()) return std::nullopt;
  std::vector<LayoutStage> stages;
  if (auto problem = parse_layout_string(q.pipeline_layout, stages)) return problem;
  const auto n = static_cast<std::int64_t>(stages.size());
  if (q.pp < 1 || q.pp > kMaxDegree) return std::nullopt;  // check_degrees refuses it (n / pp below)
  if (q.schedule == Schedule::dualpipe && n == 2 * q.pp) {
    std::string first;
    for (std::int64_t i = 0; i < q.pp; ++i) {
      const auto& a = stages[static_cast<std::size_t>(i)];
      if (a.items != stages[static_cast<std::size_t>(i + q.pp)].items) {
        return InputError("--pipeline-model-parallel-layout", q.pipeline_layout,
                          fmt::format("under dualpipe {} stages (one model copy) or 2 x {} whose second half repeats the "
                                      "first (each rank holds stage r and stage pp-1-r of two copies); a single model in "
                                      "2 x pp chunks folded into a V is --schedule dualpipev",
                                      q.pp, q.pp));
      }
      first += (i > 0 ? "|" : "") + a.items;
    }
    q.pipeline_layout = first;
  } else if ((q.schedule == Schedule::one_f_one_b || q.schedule == Schedule::interleaved) && q.vpp == 1 && n > q.pp &&
             n % q.pp == 0) {
    if (q.pp == 1) {
      return InputError("--pipeline-model-parallel-layout", q.pipeline_layout,
                        fmt::format("one stage when --pp is 1 (it has {}: Megatron would make them virtual stages, which "
                                    "its non-pipelined schedule refuses)",
                                    n));
    }
    q.vpp = n / q.pp;
  }
  return std::nullopt;
}

}  // namespace

LayoutVerdict check_layout(const ModelSpec& m, const ParallelConfig& given) {
  LayoutVerdict v;
  ParallelConfig p = given;
  if ((v.error = apply_layout_string(p))) return v;
  Layout out;
  out.config = p;
  out.config.etp = p.etp_degree();
  v.error = check_degrees(p, out);
  if (!v.error) v.error = check_model_split(m, p, out);
  if (!v.error) v.error = resolve_schedule(p, out.config.schedule);
  if (v.error) return v;
  const Schedule sched = out.config.schedule;
  const std::int64_t num_chunks = sched == Schedule::interleaved ? p.pp * p.vpp
                                  : sched == Schedule::dualpipev ? 2 * p.pp
                                                                 : p.pp;
  v.error = cut_into_chunks(m, p, num_chunks, out.chunks);
  if (v.error) return v;
  assign_chunks_to_ranks(out, num_chunks);
  v.layout = std::move(out);
  return v;
}

Layout resolve_layout(const ModelSpec& m, const ParallelConfig& p) {
  LayoutVerdict v = check_layout(m, p);
  if (v.error) throw *v.error;
  return std::move(*v.layout);
}

}  // namespace moemem
