#include "moemem/sharding.hpp"

#include "moemem/profile.hpp"

namespace moemem {

namespace {

std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// Share of `n` items for rank `r` of `k`: the first n % k ranks take one more.
std::uint64_t share(std::uint64_t n, std::int64_t k, std::int64_t r) {
  const std::uint64_t base = n / u(k), extra = n % u(k);
  return base + (u(r) < extra ? 1 : 0);
}

}  // namespace

Count shard_params(const Tensor& t, TpSplit split, const ParallelConfig& p, ShardCoord at, std::int64_t vocab_rows) {
  if (t.is_routed_expert) {
    // Whole experts over ep; each expert's FFN dimension over etp. The down-projection's bias
    // (gpt-oss) has h values, whole on every etp rank as a row-parallel layer's bias.
    const std::uint64_t experts = share(u(t.copies), p.ep, at.ep_rank);
    const bool ffn_in_cols = t.role == Role::expert_down;
    const bool ffn_in_rows = !ffn_in_cols && t.role != Role::expert_down_bias;
    const std::uint64_t rows = ffn_in_rows ? share(u(t.rows), p.etp_degree(), at.etp_rank) : u(t.rows);
    const std::uint64_t cols = ffn_in_cols ? share(u(t.cols), p.etp_degree(), at.etp_rank) : u(t.cols);
    return Count(checked_mul(checked_mul(rows, cols, "shard size"), experts, "shard size"));
  }
  const std::uint64_t copies = u(t.copies);
  switch (split) {
    case TpSplit::replicated: return t.params();
    case TpSplit::vocab:
      if (vocab_rows > t.rows) {
        return Count(checked_mul(checked_mul(share(u(vocab_rows), p.tp, at.tp_rank), u(t.cols), "shard size"), copies,
                                 "shard size"));
      }
      [[fallthrough]];
    case TpSplit::column:
      return Count(checked_mul(checked_mul(share(u(t.rows), p.tp, at.tp_rank), u(t.cols), "shard size"), copies, "shard size"));
    case TpSplit::row:
      return Count(checked_mul(checked_mul(u(t.rows), share(u(t.cols), p.tp, at.tp_rank), "shard size"), copies, "shard size"));
  }
  return t.params();
}

namespace {

// The split of a tensor's TP shard: its role's, but LoRA's B is always split by rows
// (Megatron-Bridge peft/utils.py ParallelLinearAdapter: linear_out = ColumnParallelLinear).
TpSplit split_of(const Tensor& t, const Profile& profile) {
  const TpSplit s = profile.tp_split(t.role);
  return t.adapter == Adapter::lora_b && s == TpSplit::row ? TpSplit::column : s;
}

}  // namespace

Count device_params(const Tensor& t, const Profile& profile, const ParallelConfig& p, std::int64_t vocab_rows) {
  return shard_params(t, split_of(t, profile), p, ShardCoord{}, vocab_rows);
}

ShardShape device_shape(const Tensor& t, const Profile& profile, const ParallelConfig& p, std::int64_t vocab_rows) {
  const auto first = [](std::int64_t n, std::int64_t k) { return static_cast<std::int64_t>(share(u(n), k, 0)); };
  if (t.is_routed_expert) {
    const bool ffn_in_rows = t.role != Role::expert_down;
    return {ffn_in_rows ? first(t.rows, p.etp_degree()) : t.rows, ffn_in_rows ? t.cols : first(t.cols, p.etp_degree()),
            first(t.copies, p.ep)};
  }
  switch (split_of(t, profile)) {
    case TpSplit::replicated: return {t.rows, t.cols, t.copies};
    case TpSplit::vocab: return {first(vocab_rows > t.rows ? vocab_rows : t.rows, p.tp), t.cols, t.copies};
    case TpSplit::column: return {first(t.rows, p.tp), t.cols, t.copies};
    case TpSplit::row: return {t.rows, first(t.cols, p.tp), t.copies};
  }
  return {t.rows, t.cols, t.copies};
}

}  // namespace moemem
