// Search, step 1: enumerate the degree combinations, each one's pipeline splits (each checked
// by check_layout), then the candidates. The order is the ranking's last tie-breaker, so every
// loop here keeps it: tp, pp, cp, ep, etp, vpp, schedule, split; then per layout micro-batch,
// ZeRO stage, recomputation choice.
#include <algorithm>

#include <fmt/format.h>

#include "moemem/search.hpp"

namespace moemem {

namespace {

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    out.push_back(d);
    if (d * d != n) out.push_back(n / d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The values of `all` allowed by a fixed value, else by the bound `max` (0: none).
std::vector<std::int64_t> choices(const std::optional<std::int64_t>& fixed, const std::vector<std::int64_t>& all,
                                  std::int64_t max) {
  std::vector<std::int64_t> out;
  for (const auto v : all) {
    if (fixed ? v == *fixed : (max <= 0 || v <= max)) out.push_back(v);
  }
  return out;
}

// vpp: 1, then powers of two up to vpp_max when there is a pipeline; only the fixed one if given
// (whatever --vpp-max, as a fixed tp, cp or micro-batch overrides its bound).
std::vector<std::int64_t> vpp_choices(const SearchSpace& space, std::int64_t pp) {
  std::vector<std::int64_t> vpps;
  if (space.vpp) {
    if (*space.vpp == 1 || pp > 1) vpps.push_back(*space.vpp);
    return vpps;
  }
  vpps.push_back(1);
  for (std::int64_t v = 2; v <= space.vpp_max && pp > 1; v *= 2) vpps.push_back(v);
  return vpps;
}

// Whether `sched` goes with vpp and pp: interleaving exactly when vpp > 1 (1f1b becomes
// interleaved), DualPipe(V) only with a pipeline.
bool schedule_applies(Schedule sched, std::int64_t vpp, std::int64_t pp) {
  const bool interleaved = sched == Schedule::interleaved || (sched == Schedule::one_f_one_b && vpp > 1);
  if (vpp > 1 && !interleaved) return false;
  if (vpp == 1 && sched == Schedule::interleaved) return false;
  return !((sched == Schedule::dualpipe || sched == Schedule::dualpipev) && pp < 2);
}

// The expert degrees of (tp, pp, cp, dp), then each vpp and schedule.
void add_expert_and_pipeline_degrees(const ModelSpec& m, const SearchSpace& space, const std::vector<Schedule>& schedules,
                                     ParallelConfig p, std::vector<ParallelConfig>& out) {
  const auto eps = m.is_moe() ? choices(space.ep, divisors(m.moe.num_routed_experts), space.ep_max)
                              : std::vector<std::int64_t>{1};
  const auto etps = m.is_moe() ? choices(space.etp, divisors(p.tp), 0) : std::vector<std::int64_t>{1};
  const auto vpps = vpp_choices(space, p.pp);
  for (const auto ep : eps) {
    for (const auto etp : etps) {
      if ((p.tp * p.cp * p.dp) % (ep * etp) != 0) continue;
      for (const auto vpp : vpps) {
        for (const auto sched : schedules) {
          if (!schedule_applies(sched, vpp, p.pp)) continue;
          p.ep = ep;
          p.etp = etp;
          p.vpp = vpp;
          p.schedule = sched;
          out.push_back(p);
        }
      }
    }
  }
}

// Megatron's first/last adjustments for any number of chunks: x layers on the first chunk (the
// embedding's), y on the last (the loss's), the rest even; the two closest to even (by how many
// layers they take off the two ends), never the even split itself.
void add_first_last_splits(const ModelSpec& m, const ParallelConfig& p, std::int64_t chunks,
                           std::vector<SplitChoice>& splits) {
  const std::int64_t q = (m.num_layers + chunks - 1) / chunks;
  int found = 0;
  for (std::int64_t cut = 1; cut <= 2 * q && found < 2; ++cut) {
    for (std::int64_t x = q; x >= 0 && found < 2; --x) {
      const std::int64_t y = 2 * q - cut - x;
      if (y < 0 || y > q) continue;
      const std::int64_t rest = m.num_layers - x - y;
      if (rest <= 0 || rest % (chunks - 2) != 0) continue;
      const std::int64_t per = rest / (chunks - 2);
      if (per < x || per < y || (x == per && y == per)) continue;
      // Not a new split if it is the even one (ceil(L/chunks) each, the last the rest).
      if (x == q && per == q) continue;
      ParallelConfig s = p;
      s.layers_per_stage.assign(static_cast<std::size_t>(chunks), per);
      s.layers_per_stage.front() = x;
      s.layers_per_stage.back() = y;
      splits.push_back({s, fmt::format("first {} last {}", x, y)});
      ++found;
    }
  }
}

}  // namespace

std::vector<ParallelConfig> enumerate_degrees(const ModelSpec& m, const SearchSpace& space) {
  std::vector<Schedule> schedules = space.schedules;
  if (schedules.empty()) schedules = {Schedule::one_f_one_b, Schedule::dualpipe};
  std::vector<ParallelConfig> out;
  for (const auto tp : choices(space.tp, divisors(space.gpus), space.tp_max)) {
    for (const auto pp : choices(space.pp, divisors(space.gpus / tp), space.pp_max)) {
      if (pp > m.num_layers) continue;
      for (const auto cp : choices(space.cp, divisors(space.gpus / (tp * pp)), space.cp_max)) {
        ParallelConfig p;
        p.tp = tp;
        p.pp = pp;
        p.cp = cp;
        p.dp = space.gpus / (tp * pp * cp);
        p.sp = space.sequence_parallel && tp > 1;
        add_expert_and_pipeline_degrees(m, space, schedules, p, out);
      }
    }
  }
  return out;
}

std::vector<SplitChoice> pipeline_splits(const ModelSpec& m, const ParallelConfig& p) {
  std::vector<SplitChoice> splits{{p, "even"}};
  const std::int64_t chunks = p.pp * (p.schedule == Schedule::dualpipev ? 2 : p.vpp);
  if (chunks >= 3) add_first_last_splits(m, p, chunks, splits);
  if (p.pp > 1 && (m.num_layers + 2) % chunks == 0) {
    ParallelConfig s = p;
    s.account_for_embedding = s.account_for_loss = true;
    splits.push_back({s, "account E+L"});
  }
  return splits;
}

LayoutEnumeration enumerate_layouts(const ModelSpec& m, const SearchSpace& space) {
  LayoutEnumeration out;
  for (const auto& degrees : enumerate_degrees(m, space)) {
    auto splits = pipeline_splits(m, degrees);
    if (space.base.recipe) {
      // A recipe's analyze default counts E, MTP and L as a layer each (make_scenario); the
      // search's unflagged split is that one, so that the layout it names reproduces.
      splits.front().config.balance_units = true;
      splits.front().name = "recipe default";
    } else if (space.titan_split) {
      // torchtitan's analyze default (make_scenario): the layout a result names reproduces.
      splits.front().config.titan_split = true;
      splits.front().name = "torchtitan default";
    }
    for (auto& [config, name] : splits) {
      LayoutVerdict v = check_layout(m, config);
      if (v.valid()) {
        out.layouts.push_back({std::move(*v.layout), std::move(name)});
      } else {
        ++out.rejected;
        ++out.rejected_by_field[v.error->field()];
      }
    }
  }
  return out;
}

// The micro-batches that divide `per_rank` (the global batch over dp) and are allowed: the fixed
// one, else those up to --micro-batch-max (0: up to 2^20, analyze's own limit). Trial division
// only as far as the bound or sqrt(per_rank), so that a huge global batch costs no more than a
// small one (the divisors of 2^62 would take 2^31 steps a layout).
std::vector<std::int64_t> micro_batch_choices(const SearchSpace& space, std::int64_t per_rank) {
  constexpr std::int64_t kMicroBatchLimit = std::int64_t{1} << 20;
  if (space.micro_batch) {
    if (*space.micro_batch > 0 && per_rank % *space.micro_batch == 0) return {*space.micro_batch};
    return {};
  }
  const std::int64_t bound = space.micro_batch_max > 0 ? std::min(space.micro_batch_max, kMicroBatchLimit) : kMicroBatchLimit;
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= bound && d <= per_rank / d; ++d) {
    if (per_rank % d != 0) continue;
    out.push_back(d);
    if (d != per_rank / d && per_rank / d <= bound) out.push_back(per_rank / d);
  }
  // sqrt(per_rank) below the bound: its divisors above the root were paired above; a bound below
  // the root ends the loop at the bound, and every divisor up to it was seen.
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t layout_candidates(std::size_t layout, const LayoutChoice& choice, const SearchSpace& space,
                              const std::vector<RecomputeChoice>& recomputes, std::vector<Candidate>& out, std::size_t from) {
  const std::int64_t global = *space.base.global_batch;
  const auto& p = choice.layout.config;
  if (global % p.dp != 0) return from;
  std::size_t n = from;
  for (const auto mb : micro_batch_choices(space, global / p.dp)) {
    for (const int zero : space.zero_stages) {
      for (std::size_t ri = 0; ri < recomputes.size(); ++ri) {
        if (n == out.size()) out.push_back({layout, space.base, ri});
        Candidate& c = out[n++];
        c.layout = layout;
        c.recompute = ri;
        c.training.micro_batch = mb;
        apply_zero_stage(c.training, zero);
        c.training.recompute = recomputes[ri].mode;
        c.training.recompute_modules = recomputes[ri].modules;
        // The base took the release's default checkpointing (torchtitan up to 0.2.2: layer SAC,
        // every 2nd block, held as full by `every`); a candidate names its own, and its "full"
        // checkpoints every block, as `analyze --recompute full` does.
        if (space.base.recompute_defaulted) {
          c.training.recompute_defaulted = false;
          c.training.recompute_method = RecomputeMethod::uniform;
          c.training.recompute_num_layers = 1;
        }
      }
    }
  }
  return n;
}

std::size_t layout_candidate_count(const LayoutChoice& choice, const SearchSpace& space, std::size_t recomputes) {
  const std::int64_t global = *space.base.global_batch;
  const auto& p = choice.layout.config;
  if (global % p.dp != 0) return 0;
  return micro_batch_choices(space, global / p.dp).size() * space.zero_stages.size() * recomputes;
}

std::vector<Candidate> enumerate_candidates(const std::vector<LayoutChoice>& layouts, const SearchSpace& space,
                                            const std::vector<RecomputeChoice>& recomputes) {
  std::vector<Candidate> candidates;
  std::size_t n = 0;
  for (std::size_t li = 0; li < layouts.size(); ++li) n = layout_candidates(li, layouts[li], space, recomputes, candidates, n);
  candidates.resize(n);
  return candidates;
}

}  // namespace moemem
