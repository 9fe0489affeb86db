#include "moemem/parallel.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "moemem/errors.hpp"
#include "moemem/units.hpp"

namespace moemem {

namespace {

void check_degree(std::int64_t v, const char* flag) {
  if (v < 1 || v > kMaxDegree) {
    throw InputError(flag, std::to_string(v), fmt::format("an integer from 1 to {}", kMaxDegree));
  }
}

void check_divides(std::int64_t whole, const char* what, std::int64_t by, const char* flag) {
  if (whole % by != 0) {
    throw InputError(flag, std::to_string(by), fmt::format("a divisor of {} ({})", what, whole));
  }
}

}  // namespace

std::vector<std::int64_t> default_layer_split(std::int64_t num_layers, std::int64_t pp) {
  const std::int64_t per = (num_layers + pp - 1) / pp;
  std::vector<std::int64_t> split(static_cast<std::size_t>(pp), per);
  const std::int64_t last = num_layers - per * (pp - 1);
  if (last < 0) {
    throw InputError("--pp", std::to_string(pp),
                     fmt::format("a stage count for which ceil({0}/pp) layers on each of the first pp-1 stages "
                                 "leaves the last stage at least 0 layers (or give --layers-per-stage)",
                                 num_layers));
  }
  split.back() = last;
  return split;
}

Layout resolve_layout(const ModelSpec& m, const ParallelConfig& p) {
  check_degree(p.tp, "--tp");
  check_degree(p.pp, "--pp");
  check_degree(p.dp, "--dp");
  check_degree(p.cp, "--cp");
  check_degree(p.ep, "--ep");
  check_degree(p.etp, "--etp");

  Layout out;
  out.config = p;
  std::uint64_t world = 1;
  bool overflow = false;
  for (const auto d : {p.tp, p.pp, p.cp, p.dp}) overflow |= __builtin_mul_overflow(world, static_cast<std::uint64_t>(d), &world);
  if (overflow || world > static_cast<std::uint64_t>(kMaxWorld)) {
    throw InputError("world size (tp*pp*cp*dp)",
                     fmt::format("{}*{}*{}*{} = {}", p.tp, p.pp, p.cp, p.dp, overflow ? "more than 2^64" : std::to_string(world)),
                     fmt::format("at most {} GPUs", kMaxWorld));
  }
  out.world_size = static_cast<std::int64_t>(world);

  check_divides(m.num_heads, "num_attention_heads", p.tp, "--tp");
  if (m.attention == AttentionKind::gqa) check_divides(m.num_kv_heads, "num_key_value_heads", p.tp, "--tp");

  if (!m.is_moe()) {
    if (p.ep != 1) throw InputError("--ep", std::to_string(p.ep), "1 for a model without routed experts");
    if (p.etp != 1) throw InputError("--etp", std::to_string(p.etp), "1 for a model without routed experts");
  } else {
    check_divides(m.moe.num_routed_experts, "n_routed_experts", p.ep, "--ep");
    check_divides(m.moe.expert_ffn, "moe_intermediate_size", p.etp, "--etp");
  }
  const std::int64_t dense_ranks = p.tp * p.cp * p.dp;  // ranks of one pipeline stage
  if (dense_ranks % (p.ep * p.etp) != 0) {
    throw InputError("--ep/--etp", fmt::format("ep*etp = {}", p.ep * p.etp),
                     fmt::format("a divisor of tp*cp*dp = {} (every stage's ranks must form whole expert groups)",
                                 dense_ranks));
  }
  out.edp = dense_ranks / (p.ep * p.etp);

  if (p.pp > m.num_layers) {
    throw InputError("--pp", std::to_string(p.pp), fmt::format("at most the number of layers ({})", m.num_layers));
  }
  std::vector<std::int64_t> split = p.layers_per_stage;
  if (split.empty()) {
    split = default_layer_split(m.num_layers, p.pp);
  } else {
    if (static_cast<std::int64_t>(split.size()) != p.pp) {
      throw InputError("--layers-per-stage", fmt::format("{}", fmt::join(split, ",")),
                       fmt::format("exactly pp = {} comma-separated layer counts", p.pp));
    }
    std::int64_t sum = 0;
    for (const auto n : split) {
      if (n < 0 || n > m.num_layers) {
        throw InputError("--layers-per-stage", std::to_string(n), fmt::format("layer counts from 0 to {}", m.num_layers));
      }
      sum += n;
    }
    if (sum != m.num_layers) {
      throw InputError("--layers-per-stage", fmt::format("{} (sum {})", fmt::join(split, ","), sum),
                       fmt::format("layer counts that sum to the model's {} layers", m.num_layers));
    }
  }
  std::int64_t first = 0;
  for (const auto n : split) {
    out.stages.push_back({first, n});
    first += n;
  }
  return out;
}

}  // namespace moemem
