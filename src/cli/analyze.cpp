#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "moemem/report.hpp"

namespace moemem::cli {

namespace {

nlohmann::json report_json(const MemoryReport& r) {
  const auto& p = r.layout.config;
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : r.stages) {
    nlohmann::json by_module = nlohmann::json::object();
    for (std::size_t i = 0; i < kModuleCount; ++i) {
      if (s.params_by_module[i].value() > 0) by_module[std::string(name_of(static_cast<Module>(i)))] = s.params_by_module[i].value();
    }
    stages.push_back({
        {"stage", s.stage},
        {"first_layer", s.layers.first_layer},
        {"last_layer", s.layers.last_layer()},
        {"num_layers", s.layers.num_layers},
        {"has_embedding", s.has_embedding},
        {"has_head", s.has_head},
        {"mtp_depths", s.mtp_depths},
        {"params", {{"non_expert", s.params.non_expert.value()},
                    {"expert", s.params.expert.value()},
                    {"total", (s.params.non_expert + s.params.expert).value()},
                    {"by_module", by_module}}},
        {"bytes", {{"weights", s.bytes.weights.value()},
                   {"gradients", s.bytes.gradients.value()},
                   {"optimizer", s.bytes.optimizer.value()},
                   {"activations", s.bytes.activations.value()},
                   {"buffers", s.bytes.buffers.value()},
                   {"fragmentation", s.bytes.fragmentation.value()},
                   {"total", s.bytes.total().value()}}},
        {"activations_per_microbatch", s.activations_per_microbatch.value()},
        {"in_flight_microbatches", s.in_flight_microbatches},
        {"model_chunks", s.model_chunks},
    });
  }
  const auto& pr = r.training.precision;
  return {
      {"schema", "moemem.report/1"},
      {"model", {{"name", r.model_name}, {"total_params", r.total_params.value()}}},
      {"profile", r.profile},
      {"parallel", {{"world_size", r.layout.world_size}, {"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp}, {"cp", p.cp},
                    {"ep", p.ep}, {"etp", p.etp}, {"edp", r.layout.edp}, {"sp", p.sp}}},
      {"training", {{"micro_batch", r.training.micro_batch}, {"seq_len", r.training.seq_len},
                    {"recompute", name_of(r.training.recompute)}, {"zero", r.training.zero},
                    {"dtypes", {{"weights", name_of(pr.weights)}, {"gradients", name_of(pr.gradients)},
                                {"master", name_of(pr.master)}, {"exp_avg", name_of(pr.exp_avg)},
                                {"exp_avg_sq", name_of(pr.exp_avg_sq)},
                                {"activations", name_of(r.training.activation_dtype)}}}}},
      {"overhead", {{"point", name_of(r.training.overhead)},
                    {"buffers_range", {r.overhead.buffers_low.value(), r.overhead.buffers_high.value()}},
                    {"fragmentation_pct_range", {r.overhead.fragmentation_pct_low, r.overhead.fragmentation_pct_high}}}},
      {"stages", stages},
      {"peak", {{"stage", r.peak_stage}, {"total_bytes", r.stages[static_cast<std::size_t>(r.peak_stage)].bytes.total().value()}}},
      {"assumptions", r.assumptions},
  };
}

std::string layer_span(const StageReport& s) {
  std::string text = s.layers.num_layers == 0 ? "-"
                     : s.layers.num_layers == 1 ? std::to_string(s.layers.first_layer)
                                                : fmt::format("{}-{}", s.layers.first_layer, s.layers.last_layer());
  if (s.has_embedding) text = "E+" + text;
  if (s.has_head) text += "+H";
  if (s.mtp_depths > 0) text += fmt::format("+MTP{}", s.mtp_depths);
  return text;
}

Table stage_table(const MemoryReport& r, bool exact) {
  Table t;
  if (exact) {
    t.columns = {"stage", "first_layer", "last_layer", "non_expert_params", "expert_params", "weights_bytes",
                 "gradients_bytes", "optimizer_bytes", "activations_bytes", "in_flight_microbatches", "buffers_bytes",
                 "fragmentation_bytes", "total_bytes"};
    for (const auto& s : r.stages) {
      t.rows.push_back({s.stage, s.layers.first_layer, s.layers.last_layer(), s.params.non_expert.value(),
                        s.params.expert.value(), s.bytes.weights.value(), s.bytes.gradients.value(),
                        s.bytes.optimizer.value(), s.bytes.activations.value(), s.in_flight_microbatches,
                        s.bytes.buffers.value(), s.bytes.fragmentation.value(), s.bytes.total().value()});
    }
    return t;
  }
  t.title = "Memory per device of each pipeline stage (GiB = 2^30 bytes)";
  t.columns = {"stage", "layers", "params/device", "weights", "grads", "optimizer", "activations", "buffers", "frag", "total GiB"};
  for (const auto& s : r.stages) {
    t.rows.push_back({std::to_string(s.stage), layer_span(s), (s.params.non_expert + s.params.expert).value(),
                      GibBytes{s.bytes.weights.value()}, GibBytes{s.bytes.gradients.value()}, GibBytes{s.bytes.optimizer.value()},
                      GibBytes{s.bytes.activations.value()}, GibBytes{s.bytes.buffers.value()}, GibBytes{s.bytes.fragmentation.value()},
                      GibBytes{s.bytes.total().value()}});
  }
  return t;
}

}  // namespace

void AnalyzeCommand::setup(CLI::App& root) {
  app = root.add_subcommand("analyze", "Memory of every pipeline stage for one configuration");
  add_model_options(*app, model);
  add_layout_options(*app, layout);
  add_training_options(*app, training);
  add_format_option(*app, format);
}

void AnalyzeCommand::run(std::ostream& out, std::ostream& err) const {
  const Format f = parse_format(format);
  const Evaluation e = resolve(model, layout, training);
  report_unrecognised_keys(e.model, err);
  const MemoryReport r = analyze(e.model, e.inventory, *e.profile, e.layout, e.training);
  if (f == Format::json) {
    out << report_json(r).dump(2) << "\n";
    return;
  }
  if (f == Format::csv) {
    render(stage_table(r, true), f, out);
    return;
  }
  const auto& p = r.layout.config;
  const auto& pr = r.training.precision;
  const auto& peak = r.stages[static_cast<std::size_t>(r.peak_stage)];
  const bool md = f == Format::markdown;
  out << (md ? "## " : "") << fmt::format("moemem analyze: {} ({} parameters), profile {}\n", r.model_name,
                                         group_thousands(r.total_params.value()), r.profile);
  out << (md ? "\n" : "")
      << fmt::format("layout: tp {} pp {} dp {} cp {} ep {} etp {} (edp {}), sp {}, world size {}\n", p.tp, p.pp, p.dp,
                     p.cp, p.ep, p.etp, r.layout.edp, p.sp ? "on" : "off", r.layout.world_size);
  out << fmt::format("training: micro-batch {}, seq-len {}, recompute {}, ZeRO {}; dtypes weights {}, grads {}, "
                     "master {}, moments {}/{}\n",
                     r.training.micro_batch, r.training.seq_len, name_of(r.training.recompute), r.training.zero,
                     name_of(pr.weights), name_of(pr.gradients), name_of(pr.master), name_of(pr.exp_avg),
                     name_of(pr.exp_avg_sq));
  out << fmt::format("overhead: buffers {:.2f}-{:.2f} GiB, fragmentation {}-{}% of allocated; totals use '{}'\n\n",
                     r.overhead.buffers_low.gib(), r.overhead.buffers_high.gib(), r.overhead.fragmentation_pct_low,
                     r.overhead.fragmentation_pct_high, name_of(r.training.overhead));
  render(stage_table(r, false), f, out);
  out << fmt::format("peak: stage {}, {} ({} bytes)\n", r.peak_stage, format_gib(peak.bytes.total()),
                     group_thousands(peak.bytes.total().value()));
  out << (md ? "\n" : "") << "assumptions:\n";
  for (const auto& a : r.assumptions) out << "- " << a << "\n";
}

}  // namespace moemem::cli
