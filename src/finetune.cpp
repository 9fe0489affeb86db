#include "moemem/finetune.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "moemem/enums.hpp"

namespace moemem {

namespace {

constexpr std::array<EnumName<Finetune>, 3> kFinetune{
    {{Finetune::full, "full"}, {Finetune::lora, "lora"}, {Finetune::qlora, "qlora"}}};
constexpr std::array<EnumName<OptimizerKind>, 6> kOptimizer{{{OptimizerKind::adamw, "adamw"},
                                                             {OptimizerKind::adam8bit, "adam8bit"},
                                                             {OptimizerKind::adafactor, "adafactor"},
                                                             {OptimizerKind::sgd, "sgd"},
                                                             {OptimizerKind::lion, "lion"},
                                                             {OptimizerKind::muon, "muon"}}};

template <class E, std::size_t N>
std::string_view name_in(const std::array<EnumName<E>, N>& table, E v) {
  for (const auto& e : table) {
    if (e.value == v) return e.name;
  }
  return "?";
}

// The comma-separated names of --lora-targets, each nonempty.
std::vector<std::string> split_targets(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    out.emplace_back(text.substr(start, end - start));
    if (out.back().empty()) throw InputError("--lora-targets", std::string(text), "all-linear or module names separated by commas");
    start = end + 1;
  }
  return out;
}

bool is_weight_matrix(const Tensor& t) { return !t.is_vector() && t.name.ends_with(".weight"); }

// Adapters of the targeted linear whose entries (one per part of a fused checkpoint matrix) are
// base[first, last): A once (r x in, carrying the first part's role for its split), B per part.
void add_adapters(const std::vector<Tensor>& base, std::size_t first, std::size_t last, std::int64_t r, Inventory& out) {
  const Tensor& t0 = base[first];
  const std::string stem = t0.name.substr(0, t0.name.size() - std::string_view(".weight").size());
  Tensor a = t0;
  a.name = stem + ".lora_A.weight";
  a.part = "lora_A";
  a.adapter = Adapter::lora_a;
  a.trainable = true;
  a.rows = r;
  a.cols = t0.cols;
  (void)a.params();  // overflow check
  out.tensors.push_back(std::move(a));
  for (std::size_t i = first; i < last; ++i) {
    Tensor b = base[i];
    b.name = stem + ".lora_B.weight";
    b.part = "lora_B";
    b.adapter = Adapter::lora_b;
    b.trainable = true;
    b.cols = r;
    (void)b.params();
    out.tensors.push_back(std::move(b));
  }
}

}  // namespace

std::string_view name_of(Finetune f) { return name_in(kFinetune, f); }
Finetune parse_finetune(std::string_view text, std::string_view field) {
  return parse_enum(text, field, kFinetune, "full, lora or qlora");
}
std::string_view name_of(OptimizerKind o) { return name_in(kOptimizer, o); }
OptimizerKind parse_optimizer(std::string_view text, std::string_view field) {
  return parse_enum(text, field, kOptimizer, "adamw, adam8bit, adafactor, sgd, lion or muon");
}

std::string_view module_name(const Tensor& t) {
  std::string_view n = t.name;
  if (n.ends_with(".weight")) n.remove_suffix(std::string_view(".weight").size());
  else if (n.ends_with(".bias")) n.remove_suffix(std::string_view(".bias").size());
  const std::size_t dot = n.rfind('.');
  return dot == std::string_view::npos ? n : n.substr(dot + 1);
}

bool all_linear_target(const Tensor& t, bool linear_routers, bool linear_experts) {
  if (!is_weight_matrix(t) || t.adapter != Adapter::none) return false;
  if (t.is_routed_expert && !linear_experts) return false;
  if (t.placement != Placement::decoder && t.placement != Placement::mtp) return false;
  switch (t.role) {
    case Role::router:              // the MoE router (Megatron-Bridge's default targets leave it out)
    case Role::shared_expert_gate:  // Qwen2-MoE's 1 x h sigmoid gate, a router of its own kind
      return linear_routers;
    case Role::mtp_embedding:
    case Role::mtp_output_head: return false;
    default: return true;
  }
}

bool hf_experts_are_linear(std::string_view model_type) {
  // modeling_gpt_oss.py GptOssExperts: gate_up_proj [E, h, 2f] and down_proj [E, f, h] parameters.
  return model_type != "gpt_oss";
}

bool hf_router_is_linear(std::string_view model_type) {
  // modeling_mixtral.py MixtralSparseMoeBlock and modeling_qwen3_moe.py Qwen3MoeSparseMoeBlock:
  // self.gate = nn.Linear(hidden, num_experts, bias=False) (transformers 4.x).
  return model_type == "mixtral" || model_type == "qwen3_moe";
}

namespace {

// QLoRA: bitsandbytes' Linear4bit quantises each replaced module's weight whole, so the parts of a
// fused checkpoint matrix, base[first, last), are one NF4 tensor per expert; its bytes go on the
// first part.
void quantize(const std::vector<Tensor>& base, std::size_t first, std::size_t last, Inventory& out) {
  std::uint64_t per_copy = 0;
  for (std::size_t i = first; i < last; ++i) per_copy = checked_add(per_copy, base[i].params().value() / static_cast<std::uint64_t>(base[i].copies), "nf4");
  for (std::size_t k = out.tensors.size() - (last - first); k < out.tensors.size(); ++k) out.tensors[k].nf4 = true;
  Tensor& head = out.tensors[out.tensors.size() - (last - first)];
  head.nf4_bytes = checked_mul(nf4_bytes(Count(per_copy)).value(), static_cast<std::uint64_t>(base[first].copies), "nf4");
}

}  // namespace

Inventory apply_finetune(const Inventory& base, const FinetuneSettings& s) {
  if (s.finetune == Finetune::full) return base;
  if (s.lora_rank < 1) throw InputError("--lora-rank", std::to_string(s.lora_rank), "a rank of at least 1 with --finetune lora or qlora");
  // A bound like the parallel degrees': adapter sizes (rank x width) stay far inside 64 bits.
  if (s.lora_rank > (std::int64_t{1} << 20)) {
    throw InputError("--lora-rank", std::to_string(s.lora_rank), "a rank of at most 1048576");
  }
  if (!(s.lora_dropout >= 0 && s.lora_dropout < 1)) {
    throw InputError("--lora-dropout", fmt::format("{}", s.lora_dropout), "a probability from 0 up to (not including) 1");
  }
  const bool all = s.lora_targets == "all-linear";
  std::vector<std::string> names = all ? std::vector<std::string>{} : split_targets(s.lora_targets);
  // PEFT reads "all-linear" only as the whole target_modules; in a list it would be a module name.
  if (std::find(names.begin(), names.end(), "all-linear") != names.end()) {
    throw InputError("--lora-targets", s.lora_targets, "all-linear alone, or a list of module names without it");
  }
  // A name given twice targets the same modules (PEFT matches each module against the set).
  std::vector<std::string> unique;
  for (auto& n : names) {
    if (std::find(unique.begin(), unique.end(), n) == unique.end()) unique.push_back(std::move(n));
  }
  names = std::move(unique);
  std::vector<bool> matched(names.size(), false);
  const auto targeted = [&](const Tensor& t) {
    if (all) return all_linear_target(t, s.linear_routers, s.linear_experts);
    if (!is_weight_matrix(t) || (t.is_routed_expert && !s.linear_experts)) return false;
    const auto it = std::find(names.begin(), names.end(), module_name(t));
    if (it == names.end()) return false;
    matched[static_cast<std::size_t>(it - names.begin())] = true;
    return true;
  };
  Inventory out;
  out.tensors.reserve(base.tensors.size() * 3);
  const auto& ts = base.tensors;
  for (std::size_t i = 0; i < ts.size();) {
    std::size_t j = i + 1;  // the parts of one checkpoint matrix are adjacent entries of one name
    while (j < ts.size() && ts[j].name == ts[i].name) ++j;
    for (std::size_t k = i; k < j; ++k) {
      out.tensors.push_back(ts[k]);
      out.tensors.back().trainable = false;
    }
    if (s.finetune == Finetune::qlora && all_linear_target(ts[i], s.linear_routers, s.linear_experts)) quantize(ts, i, j, out);
    if (targeted(ts[i])) add_adapters(ts, i, j, s.lora_rank, out);
    i = j;
  }
  for (std::size_t n = 0; n < names.size(); ++n) {
    if (matched[n]) continue;
    std::vector<std::string_view> known;
    for (const auto& t : ts) {
      if (!is_weight_matrix(t) || (t.placement != Placement::decoder && t.placement != Placement::mtp)) continue;
      if (t.is_routed_expert && !s.linear_experts) continue;
      if (std::find(known.begin(), known.end(), module_name(t)) == known.end()) known.push_back(module_name(t));
    }
    throw InputError("--lora-targets", names[n], fmt::format("all-linear or names of the model's linear modules: {}", fmt::join(known, ",")));
  }
  return out;
}

Count trainable_params(const Inventory& inv) {
  Count c;
  for (const auto& t : inv.tensors) {
    if (t.trainable) c += t.params();
  }
  return c;
}

Bytes nf4_bytes(Count n) {
  const std::uint64_t blocks = ceil_div(n.value(), 64);  // 4-bit blocks (quantize_4bit, blocksize 64)
  const std::uint64_t groups = ceil_div(blocks, 256);    // second level (quantize_blockwise, blocksize 256)
  // packed codes + 8-bit absmax per block + fp32 absmax per group + fp32 offset + 16 fp32 NF4 codes
  return Bytes(checked_add(checked_add(ceil_div(n.value(), 2), blocks, "nf4 bytes"), checked_mul(groups, 4, "nf4 bytes") + 4 + 64,
                           "nf4 bytes"));
}

}  // namespace moemem
