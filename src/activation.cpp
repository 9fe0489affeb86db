#include "moemem/activation.hpp"

#include <optional>
#include <utility>

#include <fmt/format.h>

#include "moemem/errors.hpp"

namespace moemem {

std::optional<InputError> check_training(const TrainingConfig& t, const Layout& layout) {
  if (t.micro_batch < 1 || t.micro_batch > kMaxMicroBatch) {
    return InputError("--micro-batch", std::to_string(t.micro_batch), fmt::format("an integer from 1 to {}", kMaxMicroBatch));
  }
  if (t.seq_len < 1 || t.seq_len > kMaxSeqLen) {
    return InputError("--seq-len", std::to_string(t.seq_len), fmt::format("an integer from 1 to {}", kMaxSeqLen));
  }
  if (t.zero < 0 || t.zero > 3) return InputError("--zero", std::to_string(t.zero), "0, 1, 2 or 3");
  if (t.recompute_num_layers < 1 || t.recompute_num_layers > kMaxDegree) {
    return InputError("--recompute-num-layers", std::to_string(t.recompute_num_layers),
                      fmt::format("an integer from 1 to {}", kMaxDegree));
  }
  const auto& p = layout.config;
  if (t.global_batch) {
    const std::int64_t per_step = t.micro_batch * p.dp;
    if (*t.global_batch < 1 || *t.global_batch % per_step != 0) {
      return InputError("--global-batch", std::to_string(*t.global_batch),
                       fmt::format("a positive multiple of micro-batch x dp = {}", per_step));
    }
    // DualPipe's step() asserts num_chunks % 2 == 0 and num_chunks >= 2 x num_ranks, DualPipeV's
    // num_chunks >= 2 x num_ranks (deepseek-ai/DualPipe 3da1bbe, dualpipe.py and dualpipev.py; torch's
    // ScheduleDualPipeV, which torchtitan runs, raises below as many micro-batches as its 2 x pp stages):
    // the micro-batches of one step fill both directions of the pipeline.
    const std::int64_t m = *t.global_batch / per_step;
    const bool dualpipe = p.schedule == Schedule::dualpipe, dualpipev = p.schedule == Schedule::dualpipev;
    if ((dualpipe || dualpipev) && (m < 2 * p.pp || (dualpipe && m % 2 != 0))) {
      return InputError("--global-batch", std::to_string(*t.global_batch),
                        fmt::format("a global batch that gives {} {}at least 2 x pp = {} micro-batches per step "
                                    "(DualPipe's step() asserts it); this gives {} (global batch / (micro-batch x dp = {}))",
                                    dualpipe ? "dualpipe" : "dualpipev", dualpipe ? "an even count of " : "", 2 * p.pp, m,
                                    per_step));
    }
  }
  if (t.vocab_multiple && (*t.vocab_multiple < 1 || *t.vocab_multiple > kMaxDegree)) {
    return InputError("--make-vocab-size-divisible-by", std::to_string(*t.vocab_multiple),
                      fmt::format("an integer from 1 to {}", kMaxDegree));
  }
  for (const auto& [flag, prob] : {std::pair{"--hidden-dropout", t.hidden_dropout}, std::pair{"--attention-dropout", t.attention_dropout}}) {
    if (!(prob >= 0.0 && prob < 1.0)) return InputError(flag, fmt::format("{}", prob), "a probability from 0 up to (not including) 1");
  }
  if (!(t.moe_imbalance >= 1.0) || t.moe_imbalance > 1e6) {
    return InputError("--moe-imbalance", fmt::format("{}", t.moe_imbalance), "a factor from 1 (balanced) upward");
  }
  if (t.moe_capacity_factor && (!(*t.moe_capacity_factor > 0.0) || *t.moe_capacity_factor > 1e6)) {
    return InputError("--moe-capacity-factor", fmt::format("{}", *t.moe_capacity_factor), "a positive factor");
  }
  if (t.fragmentation_pct && (!(*t.fragmentation_pct >= 0.0) || *t.fragmentation_pct > 100.0)) {
    return InputError("--fragmentation-pct", fmt::format("{}", *t.fragmentation_pct), "a percentage from 0 to 100");
  }
  if (t.dp_replicate < 1 || p.dp % t.dp_replicate != 0) {
    return InputError("--dp-replicate", std::to_string(t.dp_replicate), fmt::format("a divisor of dp = {}", p.dp));
  }
  const std::int64_t split = p.cp * (p.sp ? p.tp : 1);
  if (t.seq_len % split != 0) {
    return InputError("--seq-len", std::to_string(t.seq_len),
                      fmt::format("a multiple of cp{} = {}", p.sp ? "*tp (sequence parallelism is on)" : "", split));
  }
  return std::nullopt;
}

void validate_training(const TrainingConfig& t, const Layout& layout) {
  if (auto problem = check_training(t, layout)) throw *problem;
}

bool is_kept(const ActivationTerm& t, Recompute r, std::uint16_t modules) {
  if (t.transient) return false;
  if (t.only_selective) return r == Recompute::selective;
  switch (r) {
    case Recompute::none: return true;
    case Recompute::selective: return (t.dropped_by & modules) == 0;
    case Recompute::full: return t.kept_under_full;
  }
  return true;
}

Bytes kept_bytes(const std::vector<ActivationTerm>& terms, Recompute r, std::uint16_t modules) {
  Bytes b;
  for (const auto& t : terms) {
    if (is_kept(t, r, modules)) b += t.bytes();
  }
  return b;
}

Bytes transient_bytes(const std::vector<ActivationTerm>& terms, std::uint16_t rerun_modules) {
  Bytes b;
  for (const auto& t : terms) {
    if (t.transient && (rerun_modules == 0 || (t.dropped_by & rerun_modules) != 0)) b += t.bytes();
  }
  return b;
}

std::string_view name_of(MegatronVersion v) {
  switch (v) {
    case MegatronVersion::v0_6: return "0.6";
    case MegatronVersion::v0_12: return "0.12";
    case MegatronVersion::current: return "current";
  }
  return "?";
}

MegatronVersion parse_megatron_version(std::string_view text) {
  for (const MegatronVersion v : {MegatronVersion::v0_6, MegatronVersion::v0_12, MegatronVersion::current}) {
    if (text == name_of(v)) return v;
  }
  throw InputError("--megatron-version", std::string(text),
                   "0.6 (up to 0.7), 0.12 (0.8 to 0.12) or current (0.13 and later)");
}

std::string_view name_of(TransformersVersion v) { return v == TransformersVersion::v4 ? "4" : "5"; }

TransformersVersion parse_transformers_version(std::string_view text) {
  if (text == "4") return TransformersVersion::v4;
  if (text == "5") return TransformersVersion::v5;
  throw InputError("--transformers-version", std::string(text),
                   "4 (4.x: per-expert nn.Linear modules looped over, DeepSeek-V3's router in fp32) or 5 (5.x: "
                   "3-D expert parameters, grouped_mm by default)");
}

std::string_view name_of(ExpertsImplementation e) { return e == ExpertsImplementation::eager ? "eager" : "grouped_mm"; }

ExpertsImplementation parse_experts_implementation(std::string_view text) {
  if (text == "eager") return ExpertsImplementation::eager;
  if (text == "grouped_mm") return ExpertsImplementation::grouped_mm;
  throw InputError("--experts-implementation", std::string(text),
                   "eager (the loop over hit experts) or grouped_mm (transformers 5's default)");
}

std::string_view name_of(TorchtitanVersion v) {
  switch (v) {
    case TorchtitanVersion::v0_1_0: return "0.1.0";
    case TorchtitanVersion::v0_2_0: return "0.2.0";
    case TorchtitanVersion::v0_2_1: return "0.2.1";
    case TorchtitanVersion::v0_2_2: return "0.2.2";
    case TorchtitanVersion::current: return "current";
  }
  return "?";
}

// Releases 0.1.0 and 0.2.0 (and the commits before them) keep the pipeline's outputs; 0.1.0 (and
// the commits before 83e694105, 2025-07-28) keeps FSDP's root (embedding, norm, output) and the
// last block unsharded after forward, 0.2.0 on shards the embedding and the blocks as units of
// their own by the reshard policy; 0.2.1 frees the pipeline's outputs but still repeats K and V
// for SDPA; 0.2.2 takes them unrepeated; `current` (from c5d93d109, 2026-06-15, which made
// activation checkpointing a policy class) differs from 0.2.2 only in its default checkpointing
// (per-op SAC instead of every second block) and FSDP at dp_shard 1.
TorchtitanVersion parse_torchtitan_version(std::string_view text) {
  if (text == "0.1.0") return TorchtitanVersion::v0_1_0;
  if (text == "0.2.0") return TorchtitanVersion::v0_2_0;
  if (text == "0.2.1") return TorchtitanVersion::v0_2_1;
  if (text == "0.2.2") return TorchtitanVersion::v0_2_2;
  if (text == "current") return TorchtitanVersion::current;
  throw InputError("--torchtitan-version", std::string(text),
                   "0.1.0 (and earlier commits: FSDP's root and last block stay unsharded after forward), 0.2.0 (both "
                   "keep the pipeline's outputs), 0.2.1, 0.2.2 (K and V unrepeated) or current (per-op SAC by default)");
}

std::string_view name_of(LossImpl l) {
  switch (l) {
    case LossImpl::upcast: return "upcast";
    case LossImpl::fused: return "fused";
    case LossImpl::chunked: return "chunked";
  }
  return "?";
}

LossImpl parse_loss_impl(std::string_view text) {
  for (const LossImpl l : {LossImpl::upcast, LossImpl::fused, LossImpl::chunked}) {
    if (text == name_of(l)) return l;
  }
  throw InputError("--loss", std::string(text), "upcast, fused or chunked");
}

std::string_view name_of(ReshardPolicy r) {
  switch (r) {
    case ReshardPolicy::standard: return "default";
    case ReshardPolicy::always: return "always";
    case ReshardPolicy::never: return "never";
  }
  return "?";
}

ReshardPolicy parse_reshard_policy(std::string_view text) {
  for (const ReshardPolicy r : {ReshardPolicy::standard, ReshardPolicy::always, ReshardPolicy::never}) {
    if (text == name_of(r)) return r;
  }
  throw InputError("--reshard-after-forward", std::string(text), "default, always or never");
}

namespace {
constexpr std::pair<const char*, std::uint16_t> kModules[] = {
    {"core_attn", kRecomputeCoreAttn}, {"mla_up_proj", kRecomputeMlaUpProj}, {"layernorm", kRecomputeLayernorm},
    {"moe_act", kRecomputeMoeAct},     {"mlp", kRecomputeMlp},               {"moe", kRecomputeMoe},
    {"shared_experts", kRecomputeSharedExperts}, {"gdn_norm_out", kRecomputeGdnNormOut}};
}  // namespace

std::uint16_t parse_recompute_modules(std::string_view text, std::string_view field) {
  std::uint16_t mask = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find_first_of(", ", start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    if (!item.empty()) {
      bool found = false;
      for (const auto& [name, bit] : kModules) {
        if (item == name) {
          mask = static_cast<std::uint16_t>(mask | bit);
          found = true;
        }
      }
      if (!found) {
        throw InputError(std::string(field), std::string(item),
                         "a list of core_attn, mla_up_proj, layernorm, moe_act, mlp, moe, shared_experts, gdn_norm_out");
      }
    }
    start = end + 1;
  }
  if (mask == 0) throw InputError(std::string(field), std::string(text), "at least one recompute module");
  return mask;
}

std::string recompute_modules_text(std::uint16_t mask) {
  std::string out;
  for (const auto& [name, bit] : kModules) {
    if ((mask & bit) == 0) continue;
    if (!out.empty()) out += ',';
    out.append(name);
  }
  return out;
}

std::string_view name_of(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

std::string_view name_of(AttentionKernel a) {
  switch (a) {
    case AttentionKernel::eager: return "eager";
    case AttentionKernel::flash: return "flash";
    case AttentionKernel::sdpa: return "sdpa";
  }
  return "?";
}

std::string_view name_of(Fp8Recipe f) {
  switch (f) {
    case Fp8Recipe::none: return "none";
    case Fp8Recipe::tensorwise: return "tensorwise";
    case Fp8Recipe::delayed: return "delayed";
    case Fp8Recipe::blockwise: return "blockwise";
    case Fp8Recipe::mxfp8: return "mxfp8";
  }
  return "?";
}

Fp8Recipe parse_fp8_recipe(std::string_view text) {
  for (const auto f : {Fp8Recipe::none, Fp8Recipe::tensorwise, Fp8Recipe::delayed, Fp8Recipe::blockwise, Fp8Recipe::mxfp8}) {
    if (text == name_of(f)) return f;
  }
  throw InputError("--fp8", std::string(text), "one of none, tensorwise, delayed, blockwise, mxfp8");
}

Count fp8_scale_elements(Count n, Fp8Recipe f) {
  switch (f) {
    case Fp8Recipe::none: return Count{};
    case Fp8Recipe::tensorwise:
    case Fp8Recipe::delayed: return Count(1);  // one scale per tensor
    case Fp8Recipe::blockwise: return Count(ceil_div(n.value(), 128));  // 1x128 tiles
    case Fp8Recipe::mxfp8: return Count(ceil_div(n.value(), 32));       // 1x32 blocks
  }
  return Count{};
}

DType fp8_scale_dtype(Fp8Recipe f) { return f == Fp8Recipe::mxfp8 ? DType::int8 : DType::fp32; }

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
