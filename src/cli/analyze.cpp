#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include <algorithm>
#include <cmath>
#include <tuple>

#include "moemem/explain.hpp"
#include "moemem/analyze.hpp"
#include "moemem/step_time.hpp"
#include "report_html.hpp"

namespace moemem::cli {

namespace {

// The model's name and parameters, and the trainable ones (the cli contract's
// model.trainable_params: the adapters under LoRA or QLoRA, else every parameter).
nlohmann::json model_json(const MemoryReport& r) {
  nlohmann::json m = {{"name", r.model_name}, {"total_params", r.total_params.value()},
                      {"trainable_params", r.trainable_params.value()}};
  if (r.training.finetune != Finetune::full || r.training.optimizer != OptimizerKind::adamw) {
    m["finetune"] = name_of(r.training.finetune);
    m["optimizer"] = name_of(r.training.optimizer);
  }
  return m;
}

nlohmann::json report_json(const MemoryReport& r, const std::optional<GpuChoice>& gpu) {
  const auto& p = r.layout.config;
  nlohmann::json stages = nlohmann::json::array();
  const auto fits = gpu ? fit(r, gpu->usable()) : std::vector<StageFit>{};
  for (const auto& s : r.stages) {
    nlohmann::json chunks = nlohmann::json::array();
    for (std::size_t i = 0; i < s.chunks.size(); ++i) {
      const auto& ch = r.layout.chunks[static_cast<std::size_t>(s.chunks[i])];
      chunks.push_back({{"chunk", s.chunks[i]},
                        {"first_layer", ch.first_layer},
                        {"num_layers", ch.num_layers},
                        {"embedding", ch.embedding},
                        {"loss", ch.loss},
                        {"mtp_depths", ch.mtp_depths},
                        {"activations_per_microbatch", s.chunk_activations[i].value()}});
    }
    nlohmann::json by_module = nlohmann::json::object();
    for (std::size_t i = 0; i < kModuleCount; ++i) {
      if (s.params_by_module[i].value() > 0) by_module[std::string(name_of(static_cast<Module>(i)))] = s.params_by_module[i].value();
    }
    stages.push_back({
        {"stage", s.stage},
        {"first_layer", s.layers.num_layers > 0 ? s.layers.first_layer : -1},
        {"last_layer", s.last_layer},
        {"num_layers", s.layers.num_layers},
        {"has_embedding", s.has_embedding},
        {"has_head", s.has_head},
        {"mtp_depths", s.mtp_depths},
        {"params", {{"non_expert", s.params.non_expert.value()},
                    {"expert", s.params.expert.value()},
                    {"total", (s.params.non_expert + s.params.expert).value()},
                    // what gets gradients and optimizer states (not the frozen base under LoRA,
                    // nor the routers' score-correction bias buffers)
                    {"trainable", {{"non_expert", s.trainable.non_expert.params.value()},
                                   {"expert", s.trainable.expert.params.value()}}},
                    {"by_module", by_module}}},
        {"bytes", {{"weights", s.bytes.weights.value()},
                   {"gradients", s.bytes.gradients.value()},
                   {"optimizer", s.bytes.optimizer.value()},
                   {"activations", s.bytes.activations.value()},
                   {"buffers", s.bytes.buffers.value()},
                   {"fragmentation", s.bytes.fragmentation.value()},
                   {"runtime", s.bytes.runtime.value()},
                   {"allocated", s.bytes.allocated().value()},
                   {"reserved", s.bytes.reserved().value()},
                   {"total", s.bytes.total().value()},
                   {"host", s.bytes.host.value()}}},
        {"fp8_weight_copies", s.fp8_weight_copies.value()},
        {"cp_ring_buffers", s.cp_ring_buffers.value()},
        // the data loader's batch as a forward holds it, and the moment it sets: the batch (or, split
        // for context parallelism, the whole batch before that forward) with one layer's unsaved terms
        {"input_batch", s.input_batch.in_forward.value()},
        {"input_batch_transient", s.input_batch.total().value()},
        {"activations_per_microbatch", s.activations_per_microbatch.value()},
        {"recompute_transient", s.transient.total().value()},
        {"loss_transient", s.loss.allocated.value()},
        {"in_flight_microbatches", s.in_flight_microbatches},
        {"model_chunks", s.model_chunks},
        {"chunks", chunks},
    });
    if (gpu) {
      stages.back()["fits"] = fits[static_cast<std::size_t>(s.stage)].fits;
      stages.back()["headroom_bytes"] = fits[static_cast<std::size_t>(s.stage)].headroom_bytes;
    }
  }
  const auto& pr = r.training.precision;
  return {
      {"schema", "moemem.report/1"},
      {"model", model_json(r)},
      {"profile", r.profile},
      {"parallel", {{"world_size", r.layout.world_size}, {"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp}, {"cp", p.cp},
                    {"ep", p.ep}, {"etp", p.etp_degree()}, {"edp", r.layout.edp}, {"sp", p.sp}, {"vpp", p.vpp},
                    {"schedule", name_of(p.schedule)}, {"num_chunks", r.layout.chunks.size()}}},
      {"training", {{"micro_batch", r.training.micro_batch}, {"seq_len", r.training.seq_len},
                    {"global_batch", r.training.global_batch ? nlohmann::json(*r.training.global_batch) : nlohmann::json()},
                    {"microbatches_per_step", r.microbatches ? nlohmann::json(*r.microbatches) : nlohmann::json()},
                    {"attention", name_of(r.attention)}, {"padded_vocab", r.padded_vocab},
                    {"logits_dtype", name_of(r.training.logits_dtype)},
                    {"fp8", name_of(r.training.fp8)},
                    {"fp8_weight_copies", r.training.fp8 != Fp8Recipe::none && !r.training.fp8_online_weights},
                    {"moe_imbalance", r.training.moe_imbalance},
                    {"moe_capacity_factor", r.training.moe_capacity_factor ? nlohmann::json(*r.training.moe_capacity_factor)
                                                                           : nlohmann::json()},
                    {"moe_token_dispatcher", r.training.deepep ? "deepep" : r.training.allgather ? "allgather" : "alltoall"},
                    {"recompute", name_of(r.training.recompute)},
                    {"recompute_modules", r.training.recompute == Recompute::selective
                                              ? nlohmann::json(recompute_modules_text(r.training.recompute_modules))
                                              : nlohmann::json()},
                    {"recompute_method", std::string(name_of(r.training.recompute_method))},
                    {"recompute_num_layers", r.training.recompute_num_layers},
                    {"zero", r.training.zero},
                    {"sharding", r.training.accelerate_fsdp2 || r.profile == "torchtitan" ? "fsdp2"
                                : r.training.accelerate_fsdp1 ? "fsdp1"
                                : r.training.hf_ddp           ? "ddp"
                                                              : "zero"},
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
      {"gpu", gpu ? nlohmann::json{{"name", gpu->name}, {"capacity_bytes", gpu->capacity.value()},
                                   {"margin_pct", gpu->margin_pct}, {"usable_bytes", gpu->usable().value()},
                                   {"all_fit", std::all_of(fits.begin(), fits.end(), [](const StageFit& f) { return f.fits; })}}
                  : nlohmann::json()},
  };
}

std::string layer_span(const StageReport& s) {
  std::string text = s.layers.num_layers == 0 ? "-"
                     : s.layers.num_layers == 1 ? std::to_string(s.layers.first_layer)
                                                : fmt::format("{}-{}", s.layers.first_layer, s.last_layer);
  if (s.model_chunks > 1) text = fmt::format("{} layers in {} chunks", s.layers.num_layers, s.model_chunks);
  if (s.has_embedding) text = "E+" + text;
  if (s.has_head) text += "+H";
  if (s.mtp_depths > 0) text += fmt::format("+MTP{}", s.mtp_depths);
  return text;
}

Table stage_table(const MemoryReport& r, bool exact, const std::optional<GpuChoice>& gpu) {
  const auto fits = gpu ? fit(r, gpu->usable()) : std::vector<StageFit>{};
  Table t;
  if (exact) {
    t.columns = {"stage", "first_layer", "last_layer", "non_expert_params", "expert_params", "weights_bytes",
                 "gradients_bytes", "optimizer_bytes", "activations_bytes", "in_flight_microbatches", "buffers_bytes",
                 "fragmentation_bytes", "total_bytes", "runtime_bytes"};
    for (const auto& s : r.stages) {
      t.rows.push_back({s.stage, s.layers.num_layers > 0 ? s.layers.first_layer : -1, s.last_layer, s.params.non_expert.value(),
                        s.params.expert.value(), s.bytes.weights.value(), s.bytes.gradients.value(),
                        s.bytes.optimizer.value(), s.bytes.activations.value(), s.in_flight_microbatches,
                        s.bytes.buffers.value(), s.bytes.fragmentation.value(), s.bytes.total().value(),
                        s.bytes.runtime.value()});
    }
    return t;
  }
  t.title = "Memory per device of each pipeline stage (GiB = 2^30 bytes)";
  t.columns = {"stage", "layers", "params/device", "weights", "grads", "optimizer", "activations", "in flight",
               "buffers", "frag", "runtime", "total GiB"};
  // Host memory (DeepSeek-V3's EMA in CPU memory) gets a column where a stage keeps any.
  const bool host = std::any_of(r.stages.begin(), r.stages.end(), [](const StageReport& s) { return s.bytes.host.value() > 0; });
  if (host) t.columns.push_back("host GiB");
  if (gpu) t.columns.push_back(fmt::format("fits {}", gpu->name));
  for (const auto& s : r.stages) {
    std::vector<Cell> row;
    row.emplace_back(std::to_string(s.stage));
    row.emplace_back(layer_span(s));
    row.emplace_back((s.params.non_expert + s.params.expert).value());
    for (const Bytes b : {s.bytes.weights, s.bytes.gradients, s.bytes.optimizer, s.bytes.activations}) {
      row.emplace_back(GibBytes{b.value()});
    }
    row.emplace_back(s.in_flight_microbatches);
    for (const Bytes b : {s.bytes.buffers, s.bytes.fragmentation, s.bytes.runtime, s.bytes.total()}) {
      row.emplace_back(GibBytes{b.value()});
    }
    if (host) row.emplace_back(GibBytes{s.bytes.host.value()});
    if (gpu) {
      const auto& f = fits[static_cast<std::size_t>(s.stage)];
      const double gib = gib_of(f.headroom_bytes);
      row.emplace_back(f.fits ? fmt::format("yes, {:.2f} GiB free", gib) : fmt::format("NO, {:.2f} GiB short", -gib));
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

}  // namespace

void AnalyzeCommand::setup(CLI::App& root, const char* name) {
  is_explain = std::string(name) == "explain";
  app = root.add_subcommand(name, is_explain ? "Every byte of one stage at its peak, itemised"
                                             : "Memory of every pipeline stage for one configuration");
  auto* stage_opt = app->add_option_function<std::string>(
      is_explain ? "--stage" : "--explain",
      [this](const std::string& v) { explain = parse_int(v, is_explain ? "--stage" : "--explain"); },
      "Pipeline stage to itemise: every byte by category, module and tensor");
  (void)stage_opt;  // explain needs --stage or --time, checked in run()
  app->add_flag("--time", time, "Itemise the step-time estimate: compute, recomputation, each communication, bubble "
                                "(needs a named --gpu and --global-batch)");
  add_int(*app, "--gpus-per-node", gpus_per_node,
          "GPUs per node for the step-time estimate (groups beyond it cross nodes; search's flag of the same name)");
  add_model_options(*app, model);
  add_layout_options(*app, layout);
  add_training_options(*app, training);
  add_format_option(*app, format);
  app->get_option("--format")->description("Output: table|json|csv|markdown|html (one self-contained page with charts)");
  // explain takes every analyze flag (a search result's command pastes into either); it gives no
  // fit verdict, so there --no-margin changes nothing, and says so.
  app->add_flag("--no-margin", no_margin,
                is_explain ? "Accepted as analyze's flag; explain gives no fit verdict, so it changes nothing"
                           : "Fit verdict on the prediction alone (default: the upper end of the band measured runs fell in, "
                             "from moemem validate's public set)");
  app->add_option("--max-memory-fraction", max_memory_fraction,
                  "Usable share of GPU memory for the fit verdict (search's flag of the same name; default 1)");
  app->add_option("--megatron-args", megatron.path,
                  "A Megatron-LM launch script or argument file: its layout, batch, recompute, precision and "
                  "architecture flags (flags given here as well take precedence)")
      ->expected(0, 1)  // the value is checked when the script is read, where a second one is refused
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

namespace {

Bytes device_total(const std::vector<ExplainItem>& items) {
  Bytes total;  // the device's: host memory (category host) is listed, not added
  for (const auto& i : items) {
    if (i.category != "host") total += i.bytes;
  }
  return total;
}

// explain's JSON document (schema moemem.explain/1).
nlohmann::json explain_json(const Evaluation& e, std::int64_t stage, const std::vector<ExplainItem>& items,
                            const std::vector<std::string>& warnings) {
  nlohmann::json j = {{"schema", "moemem.explain/1"}, {"model", e.model.name}, {"profile", e.profile->name},
                      {"stage", stage}, {"total_bytes", device_total(items).value()}};
  add_warnings(j, warnings);
  j["items"] = nlohmann::json::array();
  for (const auto& i : items) {
    j["items"].push_back({{"category", i.category}, {"module", i.module}, {"item", i.item}, {"detail", i.detail},
                          {"bytes", i.bytes.value()}});
  }
  return j;
}

}  // namespace

void explain_output(const Evaluation& e, std::int64_t stage, Format f, const std::vector<std::string>& warnings,
                    std::ostream& out) {
  const auto items = explain_stage(e.model, e.inventory, *e.profile, e.layout, e.training, stage);
  const Bytes total = device_total(items);
  if (f == Format::json) {
    out << json_text(explain_json(e, stage, items, warnings), 2) << "\n";
    return;
  }
  Table t;
  t.title = fmt::format("Every byte of stage {} at its peak ({}, profile {}); GiB = 2^30 bytes", stage, e.model.name,
                        e.profile->name);
  t.columns = {"category", "module", "item", "how", "GiB", "bytes"};
  // The device's items, their total, then what lives in host memory (not part of that total).
  const auto host = [](const auto& i) { return i.category == name_of(Category::host); };
  const auto row_of = [&](const auto& i) {
    std::vector<Cell> row;
    row.emplace_back(i.category);
    row.emplace_back(i.module);
    row.emplace_back(i.item);
    row.emplace_back(i.detail);
    row.emplace_back(GibBytes{i.bytes.value()});
    row.emplace_back(i.bytes.value());
    return row;
  };
  for (const auto& i : items) {
    if (!host(i)) t.rows.push_back(row_of(i));
  }
  std::vector<Cell> total_row;
  total_row.emplace_back(std::string("total"));
  for (int k = 0; k < 3; ++k) total_row.emplace_back(std::string(""));
  total_row.emplace_back(GibBytes{total.value()});
  total_row.emplace_back(total.value());
  t.rows.push_back(std::move(total_row));
  for (const auto& i : items) {
    if (host(i)) {
      auto row = row_of(i);
      row[0] = std::string("host (not in total)");
      t.rows.push_back(std::move(row));
    }
  }
  render(t, f, out);
}

namespace {

// The band for the device totals analyze reports; where a profile has no device measurements, the
// nearest kind it has (reserved, then allocated), named.
struct MetricBand {
  std::string metric;
  Band band;
};
std::optional<MetricBand> uncertainty(const std::string& profile) {
  for (const char* metric : {"device-used", "reserved", "allocated"}) {
    if (const auto b = measured_band(profile, metric)) return MetricBand{metric, *b};
  }
  return std::nullopt;
}

// analyze's JSON document: the report, the band it is known to within, the config's warnings.
nlohmann::json analyze_json(const MemoryReport& r, const std::optional<GpuChoice>& gpu, const std::optional<MetricBand>& band,
                            bool margin_applied, const std::vector<std::string>& warnings) {
  nlohmann::json j = report_json(r, gpu);
  // own_records: of the records, those moemem's developers measured on a GPU (the device set).
  j["uncertainty"] = band ? nlohmann::json{{"metric", band->metric}, {"records", band->band.records},
                                           {"own_records", band->band.own},
                                           {"low_pct", band->band.low_pct}, {"high_pct", band->band.high_pct},
                                           {"margin_applied", margin_applied}}
                          : nlohmann::json();
  // The contract's names: the band under peak as [low, high] percent (null without records of the
  // profile), and warnings always a list.
  j["peak"]["band_pct"] = band ? nlohmann::json::array({band->band.low_pct, band->band.high_pct}) : nlohmann::json();
  j["warnings"] = warnings;
  return j;
}

// The step-time model's figures (docs/formulas.md, "Step time"), or null: it needs a named GPU
// (its peaks and links) and the global batch (the micro-batches per step).
nlohmann::json time_json(const Scenario& e, const std::optional<GpuChoice>& gpu, std::int64_t gpus_per_node) {
  if (!gpu || !e.training.global_batch) return nullptr;
  const auto names = gpu_names();
  if (std::find(names.begin(), names.end(), gpu->name) == names.end()) return nullptr;
  const CompiledModel cm = compile_model(e.model, e.inventory, *e.profile);
  const StepTimeModel sm = make_step_time_model(cm);
  if (sm.untimed_layers) return nullptr;  // not timed (estimate_step_time says why)
  GpuPerf perf = lookup_gpu_perf(gpu->name);
  perf.gpus_per_node = gpus_per_node;
  const StepTime st = estimate_step_time(sm, e.layout, e.training, perf);
  const auto& b = st.breakdown;
  return {{"step_seconds", st.step_seconds}, {"tokens_per_second_per_gpu", st.tokens_per_second_per_gpu}, {"mfu", st.mfu},
          {"model_flops_per_token", st.model_flops_per_token}, {"bubble_fraction", st.bubble_fraction},
          {"slowest_rank", st.slowest_rank},
          {"breakdown", {{"compute", b.compute}, {"recompute", b.recompute}, {"tp_comm", b.tp_comm}, {"ep_comm", b.ep_comm},
                         {"cp_comm", b.cp_comm}, {"pp_comm", b.pp_comm}, {"dp_comm", b.dp_comm}, {"bubble", b.bubble},
                         {"optimizer", b.optimizer}}}};
}

// `--time`: the step-time estimate, itemised (seconds per step and share of the step).
void time_output(const Scenario& e, const std::optional<GpuChoice>& gpu, std::int64_t gpus_per_node, Format f,
                 std::ostream& out) {
  const nlohmann::json t = time_json(e, gpu, gpus_per_node);
  if (t.is_null()) {
    if (gpu && e.training.global_batch) {
      const auto names = gpu_names();
      if (std::find(names.begin(), names.end(), gpu->name) != names.end()) {
        throw InputError("--time", "set", fmt::format("a model whose layers the step-time model times: model_type {} has Gated "
                                                      "DeltaNet, Mamba-2, Nemotron-NAS or separately sized sliding-window "
                                                      "layers, which it does not",
                                                      e.model.model_type));
      }
    }
    throw InputError("--time", "without a named --gpu or --global-batch", "a named --gpu and --global-batch");
  }
  if (f == Format::json) {
    out << json_text({{"schema", "moemem.time/1"}, {"model", e.model.name}, {"gpu", gpu->name}, {"time", t}}, 2) << "\n";
    return;
  }
  const double step = t.at("step_seconds").get<double>();
  Table table;
  table.title = fmt::format("Step time of {} on {} x {}: {:.3f} s, {:.0f} tokens/s per GPU, MFU {:.1f}% (docs/formulas.md, \"Step time\")",
                            e.model.name, e.layout.world_size, gpu->name, step, t.at("tokens_per_second_per_gpu").get<double>(),
                            100 * t.at("mfu").get<double>());
  table.columns = {"part", "seconds", "share"};
  for (const auto& [part, v] : t.at("breakdown").items()) {
    std::vector<Cell> row;
    row.emplace_back(part);
    row.emplace_back(fmt::format("{:.4f}", v.get<double>()));
    row.emplace_back(fmt::format("{:.1f}%", 100 * v.get<double>() / step));
    table.rows.push_back(std::move(row));
  }
  render(table, f, out);
}

// Selective-recompute modules of a layer kind the model lacks recompute nothing (Megatron accepts
// the name and skips it, and so does moemem): said once, so that the list never reads as a saving.
void warn_inert_recompute_modules(const Evaluation& e, std::vector<std::string>& warnings, std::ostream& err) {
  const ModelSpec& m = e.model;
  const TrainingConfig& t = e.training;
  if (t.recompute != Recompute::selective) return;
  const bool gdn = std::find(m.layer_mixers.begin(), m.layer_mixers.end(), MixerKind::gated_delta_net) != m.layer_mixers.end();
  for (const auto& [module, present, what] :
       {std::tuple{kRecomputeMoeAct, m.is_moe(), "routed experts"}, std::tuple{kRecomputeMoe, m.is_moe(), "routed experts"},
        std::tuple{kRecomputeSharedExperts, m.moe.shared_ffn > 0, "shared experts"},
        std::tuple{kRecomputeMlaUpProj, m.attention == AttentionKind::mla, "multi-head latent attention"},
        std::tuple{kRecomputeGdnNormOut, gdn, "Gated DeltaNet layers"}}) {
    if ((t.recompute_modules & module) != 0 && !present) {
      warnings.push_back(fmt::format("--recompute-modules {}: {} has no {}, so it recomputes nothing",
                                     recompute_modules_text(module), m.name, what));
      err << "note: " << warnings.back() << "\n";
    }
  }
}

}  // namespace

void AnalyzeCommand::run(std::ostream& out, std::ostream& err) const {
  if (is_explain && !explain && !time) throw InputError("--stage", "missing", "the pipeline stage to itemise (or --time)");
  // html: the JSON documents drawn as one page (report_html.cpp); explain's adds the whole report.
  const bool html = format == "html";
  if (html && time) throw InputError("--format", "html", "table, json, csv or markdown with --time");
  if (!html && format != "table" && format != "json" && format != "csv" && format != "markdown") {
    throw InputError("--format", format, "one of table, json, csv, markdown, html");
  }
  const Format f = html ? Format::json : parse_format(format);
  if (gpus_per_node < 1 || gpus_per_node > 1024) {
    throw InputError("--gpus-per-node", std::to_string(gpus_per_node), "an integer from 1 to 1024");
  }
  const Evaluation e = make_scenario(to_request(model, layout, training, megatron));
  auto gpu = gpu_choice(training);
  const double fraction = parse_double(max_memory_fraction, "--max-memory-fraction");
  if (!(fraction > 0 && fraction <= 1)) {
    throw InputError("--max-memory-fraction", max_memory_fraction, "a fraction in (0, 1]");
  }
  if (gpu) gpu->fraction = fraction;
  auto warnings = model_warnings(e.model, model, err);
  warn_inert_recompute_modules(e, warnings, err);
  if (is_explain && no_margin) {
    warnings.emplace_back("--no-margin: explain gives no fit verdict, so the flag changes nothing");
    err << "note: " << warnings.back() << "\n";
  }
  if (time) {
    time_output(e, gpu, gpus_per_node, f, out);
    return;
  }
  if (explain && !html) {
    explain_output(e, *explain, f, warnings, out);
    return;
  }
  MemoryReport r = analyze(e.model, e.inventory, *e.profile, e.layout, e.training);
  for (const auto& n : megatron_notes(megatron)) r.assumptions.push_back("--megatron-args: " + n);
  const auto band = uncertainty(r.profile);
  if (gpu && band && !no_margin) gpu->margin_pct = std::max(0.0, band->band.high_pct);
  if (f == Format::json) {
    nlohmann::json j = analyze_json(r, gpu, band, gpu && !no_margin, warnings);
    j["time"] = time_json(e, gpu, gpus_per_node);
    if (html) {
      const std::int64_t stage = explain.value_or(r.peak_stage);
      const auto items = explain_stage(e.model, e.inventory, *e.profile, e.layout, e.training, stage);
      write_report_html(j, explain_json(e, stage, items, warnings), command_line(*app), out);
      return;
    }
    out << json_text(j, 2) << "\n";
    return;
  }
  if (f == Format::csv) {
    render(stage_table(r, true, gpu), f, out);
    return;
  }
  const auto& p = r.layout.config;
  const auto& pr = r.training.precision;
  const auto& peak = r.stages[static_cast<std::size_t>(r.peak_stage)];
  const bool md = f == Format::markdown;
  out << (md ? "## " : "") << fmt::format("moemem analyze: {} ({} parameters), profile {}\n", r.model_name,
                                         group_thousands(r.total_params.value()), r.profile);
  if (r.training.finetune != Finetune::full || r.training.optimizer != OptimizerKind::adamw) {
    out << (md ? "\n" : "")
        << fmt::format("fine-tuning: {}{}, {} trainable parameters, optimizer {}\n", name_of(r.training.finetune),
                       r.training.finetune == Finetune::full
                           ? std::string()
                           : fmt::format(" (r {}, targets {}, dropout {})", r.training.lora_rank, r.training.lora_targets,
                                         r.training.lora_dropout),
                       group_thousands(r.trainable_params.value()), name_of(r.training.optimizer));
  }
  out << (md ? "\n" : "")
      << fmt::format("layout: tp {} pp {} dp {} cp {} ep {} etp {} (edp {}), sp {}, world size {}\n", p.tp, p.pp, p.dp,
                     p.cp, p.ep, p.etp_degree(), r.layout.edp, p.sp ? "on" : "off", r.layout.world_size);
  const std::string recompute =
      r.training.recompute == Recompute::full && r.training.recompute_method == RecomputeMethod::every
          ? fmt::format("selective (layer SAC: every {}block checkpointed)",
                        r.training.recompute_num_layers == 1 ? std::string()
                        : r.training.recompute_num_layers == 2 ? std::string("2nd ")
                        : r.training.recompute_num_layers == 3 ? std::string("3rd ")
                                                               : fmt::format("{}th ", r.training.recompute_num_layers))
      : r.training.recompute == Recompute::selective && r.profile == "torchtitan"
          ? std::string("selective (per-op SAC)")
      : r.training.recompute == Recompute::selective
          ? fmt::format("selective ({})", recompute_modules_text(r.training.recompute_modules))
      : r.training.recompute == Recompute::full && (r.training.recompute_method != RecomputeMethod::uniform ||
                                                    r.training.recompute_num_layers != 1)
          ? fmt::format("full ({} {})", name_of(r.training.recompute_method),
                        r.training.recompute_num_layers)
          : std::string(name_of(r.training.recompute));
  if (r.training.hf_ddp) {
    // hf --ddp: every state on every rank in the parameters' dtype (PEFT's adapters fp32).
    out << fmt::format("training: micro-batch {}, seq-len {}, recompute {}, DDP (no DeepSpeed or FSDP); dtypes weights {}, "
                       "grads and moments as the parameters ({} for LoRA's adapters), no master copy\n",
                       r.training.micro_batch, r.training.seq_len, recompute, name_of(pr.weights), name_of(DType::fp32));
  } else if (r.profile == "torchtitan") {
    // torchtitan always runs FSDP2 (fully_shard over dp_shard x cp): no ZeRO stage.
    out << fmt::format("training: micro-batch {}, seq-len {}, recompute {}, FSDP2 (torchtitan); dtypes weights {} "
                       "(gathered), shards fp32, grads fp32, moments {}/{}\n",
                       r.training.micro_batch, r.training.seq_len, recompute, name_of(pr.weights), name_of(pr.exp_avg),
                       name_of(pr.exp_avg_sq));
  } else if (r.training.accelerate_fsdp()) {
    // hf --fsdp1/--fsdp2: fp32 shards of what trains (no separate master copy), bf16 gathered weights.
    out << fmt::format("training: micro-batch {}, seq-len {}, recompute {}, FSDP{} (accelerate); dtypes weights {} "
                       "(gathered), shards fp32, grads fp32 shards, moments {}/{}\n",
                       r.training.micro_batch, r.training.seq_len, recompute, r.training.accelerate_fsdp1 ? 1 : 2,
                       name_of(pr.weights), name_of(pr.exp_avg), name_of(pr.exp_avg_sq));
  } else {
    out << fmt::format("training: micro-batch {}, seq-len {}, recompute {}, ZeRO {}; dtypes weights {}, grads {}, "
                       "master {}, moments {}/{}\n",
                       r.training.micro_batch, r.training.seq_len, recompute, r.training.zero, name_of(pr.weights),
                       name_of(pr.gradients), name_of(pr.master), name_of(pr.exp_avg), name_of(pr.exp_avg_sq));
  }
  if (r.training.fp8 != Fp8Recipe::none || r.training.moe_imbalance != 1.0 || r.training.moe_capacity_factor ||
      r.training.deepep || r.training.allgather) {
    out << fmt::format("fp8 {}; moe: hottest rank x{}{}, dispatcher {}\n", name_of(r.training.fp8), r.training.moe_imbalance,
                       r.training.moe_capacity_factor ? fmt::format(", capacity factor {}", *r.training.moe_capacity_factor) : "",
                       r.training.deepep ? "deepep" : r.training.allgather ? "allgather" : "alltoall");
  }
  out << fmt::format("pipeline: schedule {}, {} chunks over {} ranks (vpp {}), micro-batches per step {}; attention {}\n",
                     name_of(p.schedule), r.layout.chunks.size(), p.pp, p.vpp,
                     r.microbatches ? std::to_string(*r.microbatches) : std::string("enough to fill the pipeline"),
                     name_of(r.attention));
  out << fmt::format("overhead: buffers {:.2f}-{:.2f} GiB, fragmentation {}-{}% of allocated; totals use '{}'\n\n",
                     r.overhead.buffers_low.gib(), r.overhead.buffers_high.gib(), r.overhead.fragmentation_pct_low,
                     r.overhead.fragmentation_pct_high, name_of(r.training.overhead));
  render(stage_table(r, false, gpu), f, out);
  out << fmt::format("peak: stage {}, {} ({} bytes)\n", r.peak_stage, format_gib(peak.bytes.total()),
                     group_thousands(peak.bytes.total().value()));
  if (band) {
    const std::string runs =
        band->band.own == 0 ? fmt::format("{} published {} runs", band->band.records, r.profile)
                            : fmt::format("{} {} runs ({} measured on a GPU by moemem's developers)", band->band.records,
                                          r.profile, band->band.own);
    out << fmt::format("uncertainty: on {} measuring {} memory, the measurement was {:+.1f}% .. "
                       "{:+.1f}% of moemem's prediction (moemem validate); peak at the upper end {}\n",
                       runs, band->metric, band->band.low_pct, band->band.high_pct,
                       format_gib(Bytes(static_cast<std::uint64_t>(static_cast<double>(peak.bytes.total().value()) *
                                                                   (1.0 + std::max(0.0, band->band.high_pct) / 100.0)))));
  } else {
    out << fmt::format("uncertainty: no published {} measurements to compare with\n", r.profile);
  }
  if (gpu) {
    const auto fits = fit(r, gpu->usable());
    const auto& pf = fits[static_cast<std::size_t>(r.peak_stage)];
    out << fmt::format("{}: {}{}{} ({}); peak stage {} by {:.2f} GiB\n", gpu->name, format_gib(gpu->capacity),
                       gpu->fraction < 1 ? fmt::format(" x {} usable", gpu->fraction) : "",
                       gpu->margin_pct > 0 ? fmt::format(", {} with the +{:.1f}% margin", format_gib(gpu->usable()), gpu->margin_pct) : "",
                       pf.fits ? "every stage fits" : "DOES NOT FIT", pf.fits ? "fits" : "exceeds",
                       std::abs(gib_of(pf.headroom_bytes)));
  }
  out << (md ? "\n" : "") << "assumptions:\n";
  for (const auto& a : r.assumptions) out << "- " << a << "\n";
}

}  // namespace moemem::cli
