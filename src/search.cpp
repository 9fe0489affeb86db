#include "moemem/search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "moemem/errors.hpp"

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

std::vector<std::int64_t> choices(const std::optional<std::int64_t>& fixed, const std::vector<std::int64_t>& all,
                                  std::int64_t max) {
  std::vector<std::int64_t> out;
  for (const auto v : all) {
    if (fixed ? v == *fixed : (max <= 0 || v <= max)) out.push_back(v);
  }
  return out;
}

// Forward FLOPs per token of one layer of each kind, by recomputable part (2 x parameters for a
// GEMM, 2 x s x heads x (d_qk + d_v) for causal attention).
struct LayerFlops {
  double total = 0, core_attn = 0, mla_up = 0, mlp = 0, moe = 0, shared = 0;
};

LayerFlops layer_flops(const ModelSpec& m, LayerKind kind, std::int64_t seq) {
  LayerFlops f;
  const double h = static_cast<double>(m.hidden), nh = static_cast<double>(m.num_heads);
  double attn_params = 0, qk = 0, v = 0;
  if (m.attention == AttentionKind::mla) {
    const auto& l = m.mla;
    const double dq = static_cast<double>(l.q_lora_rank), dc = static_cast<double>(l.kv_lora_rank);
    qk = static_cast<double>(l.qk_nope_head_dim + l.qk_rope_head_dim);
    v = static_cast<double>(l.v_head_dim);
    const double up = (dq > 0 ? dq * nh * qk : 0) + dc * nh * (static_cast<double>(l.qk_nope_head_dim) + v);
    f.mla_up = 2 * up;
    attn_params = (dq > 0 ? dq * h : h * nh * qk) + (dc + static_cast<double>(l.qk_rope_head_dim)) * h + up + h * nh * v;
  } else {
    qk = v = static_cast<double>(m.head_dim);
    attn_params = h * nh * qk + 2 * h * static_cast<double>(m.num_kv_heads) * qk + h * nh * v;
  }
  f.core_attn = 2 * static_cast<double>(seq) * nh * (qk + v);  // causal: half of 4 s (qk + v) per head
  f.total = 2 * attn_params + f.core_attn;
  if (kind == LayerKind::dense) {
    f.mlp = 2 * 3 * h * static_cast<double>(m.dense_ffn);
    f.total += f.mlp;
  } else {
    const auto& e = m.moe;
    f.shared = 2 * 3 * h * static_cast<double>(e.shared_ffn);
    f.moe = 2 * (h * static_cast<double>(e.num_routed_experts) + 3 * h * static_cast<double>(e.expert_ffn * e.top_k)) + f.shared;
    f.total += f.moe;
  }
  return f;
}

}  // namespace

std::vector<RecomputeChoice> default_recompute_family(const ModelSpec& m) {
  std::vector<RecomputeChoice> out = {{"none", Recompute::none, 0},
                                      {"core_attn", Recompute::selective, kRecomputeCoreAttn}};
  if (m.attention == AttentionKind::mla) {
    out.push_back({"layernorm,mla_up_proj", Recompute::selective, kRecomputeLayernorm | kRecomputeMlaUpProj});
    if (m.is_moe()) {
      out.push_back({"layernorm,mla_up_proj,moe_act", Recompute::selective,
                     kRecomputeLayernorm | kRecomputeMlaUpProj | kRecomputeMoeAct});
    }
  } else {
    out.push_back({"layernorm,mlp", Recompute::selective, kRecomputeLayernorm | kRecomputeMlp});
  }
  if (m.is_moe()) out.push_back({"moe", Recompute::selective, kRecomputeMoe});
  out.push_back({"full", Recompute::full, 0});
  return out;
}

std::vector<RecomputeChoice> parse_recompute_choices(const std::string& text, const ModelSpec& m) {
  std::vector<RecomputeChoice> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    if (item == "none") out.push_back({"none", Recompute::none, 0});
    else if (item == "full") out.push_back({"full", Recompute::full, 0});
    else if (item == "selective") {
      for (const auto& c : default_recompute_family(m)) {
        if (c.mode == Recompute::selective) out.push_back(c);
      }
    } else {
      std::string modules = item;
      std::replace(modules.begin(), modules.end(), '+', ',');
      out.push_back({modules, Recompute::selective, parse_recompute_modules(modules, "--recompute")});
    }
  }
  if (out.empty()) throw InputError("--recompute", text, "a list of none, full, selective or module sets such as layernorm+mla_up_proj");
  return out;
}

CostBreakdown estimate_cost(const ModelSpec& m, const ParallelConfig& p, const TrainingConfig& t,
                            std::int64_t gpus_per_node) {
  CostBreakdown c;
  // Pipeline bubble over compute, for m micro-batches (Narayanan et al. 2021; ZB-H1 a third of
  // 1F1B; DualPipe (pp-2)/(3m) and DualPipeV (pp-1)/(6m) per the DualPipe comparison).
  const double pp = static_cast<double>(p.pp);
  const double mb = static_cast<double>(std::max<std::int64_t>(1, t.global_batch.value_or(1) / (t.micro_batch * p.dp)));
  if (p.pp > 1) {
    switch (p.schedule) {
      case Schedule::one_f_one_b:
      case Schedule::gpipe: c.bubble = (pp - 1) / mb; break;
      case Schedule::interleaved: c.bubble = (pp - 1) / (static_cast<double>(p.vpp) * mb); break;
      case Schedule::zb_h1: c.bubble = (pp - 1) / (3 * mb); break;
      case Schedule::dualpipe: c.bubble = std::max(0.0, pp - 2) / (3 * mb); break;
      case Schedule::dualpipev: c.bubble = (pp - 1) / (6 * mb); break;
    }
  }
  // Recomputation: recomputed forward FLOPs over a step's forward + backward (3x forward).
  double total = 0, again = 0, comm_bytes = 0, layers_flops = 0;
  // Layers of one kind cost the same: evaluate each kind once and weight it by its count.
  const auto moe_layers = static_cast<double>(m.num_moe_layers());
  for (const LayerKind kind : {LayerKind::dense, LayerKind::moe}) {
    const double count = kind == LayerKind::moe ? moe_layers : static_cast<double>(m.num_layers) - moe_layers;
    if (count == 0) continue;
    const LayerFlops one = layer_flops(m, kind, t.seq_len);
    LayerFlops f;
    f.total = one.total * count;
    f.core_attn = one.core_attn * count;
    f.mla_up = one.mla_up * count;
    f.mlp = one.mlp * count;
    f.moe = one.moe * count;
    f.shared = one.shared * count;
    total += f.total;
    switch (t.recompute) {
      case Recompute::none: break;
      case Recompute::full: again += f.total; break;
      case Recompute::selective:
        if (t.recompute_modules & kRecomputeCoreAttn) again += f.core_attn;
        if (t.recompute_modules & kRecomputeMlaUpProj) again += f.mla_up;
        if (t.recompute_modules & kRecomputeMlp) again += f.mlp;
        if (t.recompute_modules & kRecomputeMoe) again += f.moe;
        else if (t.recompute_modules & kRecomputeSharedExperts) again += f.shared;
        break;
    }
    // Inter-node traffic per token (bytes, forward and backward): TP's all-gathers and
    // reduce-scatters when tp spans nodes; EP's dispatch and combine for the share of the expert
    // group outside the node.
    const double h = static_cast<double>(m.hidden), a = 2.0;
    if (p.tp > gpus_per_node) comm_bytes += count * 8 * h * a * static_cast<double>(p.tp - 1) / static_cast<double>(p.tp);
    if (kind == LayerKind::moe) {
      const double span = static_cast<double>(p.ep * p.tp);
      const double outside = span > static_cast<double>(gpus_per_node) ? 1.0 - static_cast<double>(gpus_per_node) / span : 0.0;
      comm_bytes += count * 4 * static_cast<double>(m.moe.top_k) * h * a * outside;
    }
    layers_flops += 3 * f.total;
  }
  c.recompute = total > 0 ? again / (3 * total) : 0;
  // GPU-seconds per token: bytes at 50 GB/s per GPU (400 Gb/s NICs) against forward and backward
  // FLOPs at 400 TFLOP/s per GPU (about 40% of an H100's dense BF16). Overlap is not credited.
  const double compute_s = layers_flops / 400e12;
  const double comm_s = comm_bytes / 50e9;
  c.communication = compute_s > 0 ? comm_s / compute_s : 0;
  return c;
}

SearchResult search(const CompiledModel& cm, const SearchSpace& space, int threads, std::atomic<std::int64_t>* progress,
                    std::int64_t keep_infeasible) {
  const ModelSpec& m = *cm.model;
  if (space.gpus < 1 || space.gpus > kMaxWorld) {
    throw InputError("--gpus", std::to_string(space.gpus), fmt::format("an integer from 1 to {}", kMaxWorld));
  }
  if (!(space.max_memory_fraction > 0 && space.max_memory_fraction <= 1)) {
    throw InputError("--max-memory-fraction", fmt::format("{}", space.max_memory_fraction), "a fraction in (0, 1]");
  }
  if (!space.base.global_batch) throw InputError("--global-batch", "missing", "the sequences per optimizer step");
  for (const auto& [v, flag] : {std::pair{space.tp_max, "--tp-max"}, std::pair{space.pp_max, "--pp-max"},
                               std::pair{space.ep_max, "--ep-max"}, std::pair{space.cp_max, "--cp-max"},
                               std::pair{space.vpp_max, "--vpp-max"}, std::pair{space.micro_batch_max, "--micro-batch-max"}}) {
    if (v < 0 || v > kMaxDegree) throw InputError(flag, std::to_string(v), fmt::format("an integer from 0 (no bound) to {}", kMaxDegree));
  }
  if (threads < 1 || threads > 256) throw InputError("--threads", std::to_string(threads), "an integer from 1 to 256");
  if (space.gpus_per_node < 1 || space.gpus_per_node > 1024) {
    throw InputError("--gpus-per-node", std::to_string(space.gpus_per_node), "an integer from 1 to 1024");
  }

  SearchResult result;
  result.usable = Bytes(static_cast<std::uint64_t>(std::floor(static_cast<double>(space.capacity.value()) * space.max_memory_fraction)));
  const auto recomputes = space.recomputes.empty() ? default_recompute_family(m) : space.recomputes;
  std::vector<Schedule> schedules = space.schedules;
  if (schedules.empty()) schedules = {Schedule::one_f_one_b, Schedule::dualpipe};

  // Layouts: every degree combination and pipeline split that resolve_layout accepts.
  struct LayoutChoice {
    Layout layout;
    std::string split;
  };
  std::vector<LayoutChoice> layouts;
  const auto gpu_divisors = divisors(space.gpus);
  for (const auto tp : choices(space.tp, gpu_divisors, space.tp_max)) {
    for (const auto pp : choices(space.pp, divisors(space.gpus / tp), space.pp_max)) {
      if (pp > m.num_layers) continue;
      for (const auto cp : choices(space.cp, divisors(space.gpus / (tp * pp)), space.cp_max)) {
        const std::int64_t dp = space.gpus / (tp * pp * cp);
        const auto eps = m.is_moe() ? choices(space.ep, divisors(m.moe.num_routed_experts), space.ep_max)
                                    : std::vector<std::int64_t>{1};
        for (const auto ep : eps) {
          const auto etps = m.is_moe() ? choices(space.etp, divisors(tp), 0) : std::vector<std::int64_t>{1};
          for (const auto etp : etps) {
            if ((tp * cp * dp) % (ep * etp) != 0) continue;
            std::vector<std::int64_t> vpps{1};
            for (std::int64_t v = 2; v <= space.vpp_max && pp > 1; v *= 2) vpps.push_back(v);
            for (const auto vpp : vpps) {
              if (space.vpp && vpp != *space.vpp) continue;
              for (const auto sched : schedules) {
                const bool interleaved = sched == Schedule::interleaved || (sched == Schedule::one_f_one_b && vpp > 1);
                if (vpp > 1 && !interleaved) continue;
                if (vpp == 1 && sched == Schedule::interleaved) continue;
                if ((sched == Schedule::dualpipe || sched == Schedule::dualpipev) && pp < 2) continue;
                ParallelConfig p;
                p.tp = tp;
                p.pp = pp;
                p.cp = cp;
                p.dp = dp;
                p.ep = ep;
                p.etp = etp;
                p.vpp = vpp;
                p.sp = space.sequence_parallel && tp > 1;
                p.schedule = sched;
                // Pipeline splits: even; Megatron's first/last adjustments (one layer fewer on the
                // embedding's and the loss's stage, the rest even); counting them as layers.
                std::vector<std::pair<ParallelConfig, std::string>> splits{{p, "even"}};
                const std::int64_t chunks = pp * (sched == Schedule::dualpipev ? 2 : vpp);
                // First/last adjustments for any number of chunks: x layers on the first chunk (the
                // embedding's), y on the last (the loss's), the rest even; the two closest to even.
                if (chunks >= 3) {
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
                      splits.emplace_back(s, fmt::format("first {} last {}", x, y));
                      ++found;
                    }
                  }
                }
                if (pp > 1 && (m.num_layers + 2) % chunks == 0) {
                  ParallelConfig s = p;
                  s.account_for_embedding = s.account_for_loss = true;
                  splits.emplace_back(s, "account E+L");
                }
                for (const auto& [cfg, name] : splits) {
                  try {
                    layouts.push_back({resolve_layout(m, cfg), name});
                  } catch (const InputError&) {
                    // not a valid layout for this model
                  }
                }
              }
            }
          }
        }
      }
    }
  }

  // Candidates: each layout with every micro-batch, optimizer sharding and recomputation choice.
  struct Candidate {
    std::size_t layout;
    TrainingConfig training;
    std::size_t recompute;
  };
  std::vector<Candidate> candidates;
  const std::int64_t global = *space.base.global_batch;
  for (std::size_t li = 0; li < layouts.size(); ++li) {
    const auto& p = layouts[li].layout.config;
    if (global % p.dp != 0) continue;
    for (const auto mb : choices(space.micro_batch, divisors(global / p.dp), space.micro_batch_max)) {
      for (const int zero : space.zero_stages) {
        for (std::size_t ri = 0; ri < recomputes.size(); ++ri) {
          TrainingConfig t = space.base;
          t.micro_batch = mb;
          t.zero = zero;
          t.recompute = recomputes[ri].mode;
          t.recompute_modules = recomputes[ri].modules;
          candidates.push_back({li, t, ri});
        }
      }
    }
  }
  result.enumerated = static_cast<std::int64_t>(candidates.size());

  // Evaluate every candidate on every stage; each thread fills its own slice.
  std::vector<SearchEntry> entries(candidates.size());
  std::vector<char> valid(candidates.size(), 0);
  const auto start = std::chrono::steady_clock::now();
  auto work = [&](std::size_t begin, std::size_t end) {
    MemoryReport r;  // reused across this thread's candidates
    const EvalCachePtr cache = make_eval_cache();
    for (std::size_t i = begin; i < end; ++i) {
      const auto& c = candidates[i];
      const auto& lc = layouts[c.layout];
      try {
        analyze_into(cm, lc.layout, c.training, r, cache.get(), Detail::totals);
        SearchEntry& e = entries[i];
        e.index = static_cast<std::int64_t>(i);
        e.parallel = lc.layout.config;
        e.training = c.training;
        e.recompute_name = recomputes[c.recompute].name;
        e.split_name = lc.split;
        e.peak_stage = r.peak_stage;
        e.peak = r.stages[static_cast<std::size_t>(r.peak_stage)].bytes.total();
        e.fits = e.peak <= result.usable;
        e.cost = estimate_cost(m, e.parallel, e.training, space.gpus_per_node);
        valid[i] = 1;
      } catch (const InputError&) {
        // e.g. a sequence that does not split over cp*tp: not a valid candidate
      }
      if (progress != nullptr) progress->fetch_add(1, std::memory_order_relaxed);
    }
  };
  const auto n = candidates.size();
  const auto workers = static_cast<std::size_t>(std::min<std::int64_t>(threads, std::max<std::int64_t>(1, static_cast<std::int64_t>(n))));
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work, n * w / workers, n * (w + 1) / workers);
  work(0, n / workers);
  for (auto& th : pool) th.join();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Rank by index (entries are large; move each once at the end).
  std::vector<std::size_t> fit_idx, miss_idx;
  for (std::size_t i = 0; i < n; ++i) {
    if (!valid[i]) continue;
    ++result.evaluated;
    (entries[i].fits ? fit_idx : miss_idx).push_back(i);
  }
  const auto by_cost = [&](std::size_t a, std::size_t b) {
    const SearchEntry &x = entries[a], &y = entries[b];
    if (x.cost.total() != y.cost.total()) return x.cost.total() < y.cost.total();
    if (x.peak != y.peak) return x.peak < y.peak;
    return a < b;
  };
  const auto by_peak = [&](std::size_t a, std::size_t b) {
    const SearchEntry &x = entries[a], &y = entries[b];
    if (x.peak != y.peak) return x.peak < y.peak;
    if (x.cost.total() != y.cost.total()) return x.cost.total() < y.cost.total();
    return a < b;
  };
  // Pareto front on (peak memory, cost): scanning by increasing peak, keep strictly cheaper ones.
  std::vector<std::size_t> peak_order = fit_idx;
  std::sort(peak_order.begin(), peak_order.end(), by_peak);
  double best = INFINITY;
  for (const auto i : peak_order) {
    if (entries[i].cost.total() < best) {
      result.pareto.push_back(entries[i]);
      best = entries[i].cost.total();
    }
  }
  std::sort(fit_idx.begin(), fit_idx.end(), by_cost);
  std::sort(miss_idx.begin(), miss_idx.end(), by_peak);
  if (static_cast<std::int64_t>(miss_idx.size()) > keep_infeasible) miss_idx.resize(static_cast<std::size_t>(keep_infeasible));
  result.feasible.reserve(fit_idx.size());
  for (const auto i : fit_idx) result.feasible.push_back(std::move(entries[i]));
  for (const auto i : miss_idx) result.infeasible.push_back(std::move(entries[i]));
  return result;
}

}  // namespace moemem
