#include "cli/common.hpp"

#include <charconv>

#include <fmt/format.h>

#include "moemem/errors.hpp"

namespace moemem::cli {

std::int64_t parse_int(const std::string& text, const char* field) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ptr != end || ec == std::errc::invalid_argument) {
    throw InputError(field, text, "an integer");
  }
  if (ec == std::errc::result_out_of_range) throw InputError(field, text, "an integer that fits in 64 bits");
  return v;
}

void add_int(CLI::App& app, const char* flag, std::int64_t& target, const char* help) {
  app.add_option_function<std::string>(flag, [&target, flag](const std::string& s) { target = parse_int(s, flag); }, help)
      ->default_str(std::to_string(target))
      ->type_name("INT");
}

void add_model_options(CLI::App& app, ModelOptions& o) {
  app.add_option("--model", o.model, "Preset name (deepseek-v3, deepseek-v2, deepseek-v2-lite) or path to a config.json")
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--mtp", [&o](const std::string& s) { o.mtp = parse_int(s, "--mtp"); },
         "Multi-token-prediction depths to include (default: the config's, 0 in the paper profile)")
      ->type_name("INT");
}

void add_layout_options(CLI::App& app, LayoutOptions& o) {
  add_int(app, "--tp", o.tp, "Tensor-parallel degree");
  add_int(app, "--pp", o.pp, "Pipeline-parallel degree (stages)");
  add_int(app, "--dp", o.dp, "Data-parallel degree");
  add_int(app, "--cp", o.cp, "Context-parallel degree");
  add_int(app, "--ep", o.ep, "Expert-parallel degree");
  add_int(app, "--etp", o.etp, "Expert-tensor-parallel degree");
  app.add_flag("--sp", o.sp, "Sequence parallelism (split non-attention activations over tp)");
  app.add_option("--layers-per-stage", o.layers_per_stage,
                 "Decoder layers on each pipeline stage, e.g. 4,4,...,1 (default: ceil(L/pp), the last stage the rest)");
}

void add_training_options(CLI::App& app, TrainingOptions& o) {
  app.add_option("--profile", o.profile, "Accounting profile: paper")->capture_default_str();
  add_int(app, "--micro-batch", o.micro_batch, "Micro-batch size b");
  add_int(app, "--seq-len", o.seq_len, "Sequence length s");
  add_int(app, "--zero", o.zero, "ZeRO stage 0-3");
  app.add_option("--recompute", o.recompute, "Activation recomputation: none|full")->capture_default_str();
  app.add_option("--overhead", o.overhead,
                 "Which end of the profile's buffer/fragmentation range enters totals: none|low|high")
      ->capture_default_str();
  app.add_option("--params-dtype", o.params_dtype, "Weight dtype (profile default: bf16)");
  app.add_option("--main-grads-dtype", o.main_grads_dtype, "Gradient dtype (profile default: fp32)");
  app.add_option("--main-params-dtype", o.main_params_dtype, "Master-weight dtype (profile default: fp32)");
  app.add_option("--exp-avg-dtype", o.exp_avg_dtype, "Adam first-moment dtype (profile default: bf16)");
  app.add_option("--exp-avg-sq-dtype", o.exp_avg_sq_dtype, "Adam second-moment dtype (profile default: bf16)");
}

void add_format_option(CLI::App& app, std::string& format) {
  app.add_option("--format", format, "Output: table|json|csv|markdown")->capture_default_str();
}

std::vector<std::int64_t> parse_int_list(const std::string& text, const char* field) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    std::int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < 0) {
      throw InputError(field, text, "a comma-separated list of non-negative integers, e.g. 4,4,4,1");
    }
    out.push_back(v);
    start = end + 1;
  }
  return out;
}

ModelSpec load_model_for(const ModelOptions& o, const Profile& profile) {
  ModelSpec m = load_model(o.model);
  if (o.mtp) set_mtp_layers(m, o.mtp);
  else if (!profile.include_mtp_by_default) m.mtp_layers = 0;
  return m;
}

ParallelConfig to_parallel(const LayoutOptions& o) {
  ParallelConfig p;
  p.tp = o.tp;
  p.pp = o.pp;
  p.dp = o.dp;
  p.cp = o.cp;
  p.ep = o.ep;
  p.etp = o.etp;
  p.sp = o.sp;
  if (!o.layers_per_stage.empty()) p.layers_per_stage = parse_int_list(o.layers_per_stage, "--layers-per-stage");
  return p;
}

TrainingConfig to_training(const TrainingOptions& o, const Profile& profile) {
  TrainingConfig t;
  t.micro_batch = o.micro_batch;
  t.seq_len = o.seq_len;
  if (o.zero < 0 || o.zero > 3) throw InputError("--zero", std::to_string(o.zero), "0, 1, 2 or 3");
  t.zero = static_cast<int>(o.zero);
  if (o.recompute == "none") t.recompute = Recompute::none;
  else if (o.recompute == "full") t.recompute = Recompute::full;
  else throw InputError("--recompute", o.recompute, "none or full");
  if (o.overhead == "none") t.overhead = OverheadPoint::none;
  else if (o.overhead == "low") t.overhead = OverheadPoint::low;
  else if (o.overhead == "high") t.overhead = OverheadPoint::high;
  else throw InputError("--overhead", o.overhead, "none, low or high");
  t.precision = profile.default_precision;
  if (!o.params_dtype.empty()) t.precision.weights = parse_dtype(o.params_dtype, "--params-dtype");
  if (!o.main_grads_dtype.empty()) t.precision.gradients = parse_dtype(o.main_grads_dtype, "--main-grads-dtype");
  if (!o.main_params_dtype.empty()) t.precision.master = parse_dtype(o.main_params_dtype, "--main-params-dtype");
  if (!o.exp_avg_dtype.empty()) t.precision.exp_avg = parse_dtype(o.exp_avg_dtype, "--exp-avg-dtype");
  if (!o.exp_avg_sq_dtype.empty()) t.precision.exp_avg_sq = parse_dtype(o.exp_avg_sq_dtype, "--exp-avg-sq-dtype");
  return t;
}

Evaluation resolve(const ModelOptions& mo, const LayoutOptions& lo, const TrainingOptions& to) {
  Evaluation e;
  e.profile = &get_profile(to.profile);
  e.model = load_model_for(mo, *e.profile);
  e.inventory = build_inventory(e.model);
  e.layout = resolve_layout(e.model, to_parallel(lo));
  e.training = to_training(to, *e.profile);
  validate_training(e.training, e.layout);
  return e;
}

}  // namespace moemem::cli
