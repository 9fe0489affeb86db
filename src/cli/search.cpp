// `moemem search`: every layout that fits on N GPUs, ranked.
#include <algorithm>
#include <chrono>
#include <future>
#include <iostream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "moemem/errors.hpp"
#include "moemem/finetune.hpp"
#include "moemem/recipes.hpp"
#include "moemem/search.hpp"
#include "report_html.hpp"

namespace moemem::cli {

namespace {

std::string recompute_text(const SearchEntry& e) { return e.recompute_name; }

nlohmann::json time_json(const SearchEntry& e) {
  if (!e.timed) return nullptr;
  const auto& t = e.time;
  const auto& b = t.breakdown;
  return {{"step_seconds", t.step_seconds}, {"tokens_per_second_per_gpu", t.tokens_per_second_per_gpu}, {"mfu", t.mfu},
          {"breakdown", {{"compute", b.compute}, {"recompute", b.recompute}, {"tp_comm", b.tp_comm}, {"ep_comm", b.ep_comm},
                         {"cp_comm", b.cp_comm}, {"pp_comm", b.pp_comm}, {"dp_comm", b.dp_comm}, {"bubble", b.bubble},
                         {"optimizer", b.optimizer}}}};
}

nlohmann::json entry_json(const SearchEntry& e, std::int64_t rank, const std::string& command) {
  const auto& p = e.parallel;
  return {{"rank", rank}, {"command", command}, {"time", time_json(e)},
          {"tp", p.tp}, {"pp", p.pp}, {"vpp", p.vpp}, {"cp", p.cp}, {"ep", p.ep}, {"etp", p.etp_degree()}, {"dp", p.dp},
          {"sp", p.sp}, {"schedule", name_of(p.schedule)}, {"split", e.split_name},
          {"micro_batch", e.training.micro_batch}, {"zero", e.training.zero},
          {"distributed_optimizer", e.training.zero == 1}, {"recompute", recompute_text(e)},
          {"peak_stage", e.peak_stage}, {"peak_bytes", e.peak.value()}, {"fits", e.fits},
          {"cost", {{"total", e.cost.total()}, {"bubble", e.cost.bubble}, {"recompute", e.cost.recompute},
                    {"communication", e.cost.communication}}}};
}

// How a result shards its states, in its framework's terms: Megatron's distributed optimizer is
// ZeRO 1 (2 and 3 Megatron-FSDP), torchtitan always FSDP2, the hf profile DeepSpeed's stage or
// FSDP/DDP through accelerate.
std::string optimizer_label(const SearchEntry& e, std::string_view profile) {
  if (profile == "torchtitan" || e.training.accelerate_fsdp2) return "fsdp2";
  if (e.training.accelerate_fsdp1) return "fsdp1";
  if (e.training.hf_ddp) return "ddp";
  if (profile == "megatron" && e.training.zero == 1) return "dist-opt";
  return fmt::format("zero{}", e.training.zero);
}

void add_row(Table& t, const SearchEntry& e, std::int64_t rank, Bytes usable, bool timed, std::string_view profile) {
  const auto& p = e.parallel;
  std::vector<Cell> row;
  row.emplace_back(rank);
  row.emplace_back(fmt::format("tp{} pp{}{} cp{} ep{} etp{} dp{}", p.tp, p.pp, p.vpp > 1 ? fmt::format("x{}", p.vpp) : "",
                               p.cp, p.ep, p.etp_degree(), p.dp));
  row.emplace_back(std::string(name_of(p.schedule)));
  row.emplace_back(e.split_name);
  row.emplace_back(e.training.micro_batch);
  row.emplace_back(optimizer_label(e, profile));
  row.emplace_back(recompute_text(e));
  row.emplace_back(GibBytes{e.peak.value()});
  row.emplace_back(e.peak_stage);
  // A shortfall too small to show at two decimals still reads as one (-0.01), never as -0.00.
  const double margin = (static_cast<double>(usable.value()) - static_cast<double>(e.peak.value())) / kBytesPerGiB;
  row.emplace_back(margin < 0 && margin > -0.01 ? std::string("-0.01") : fmt::format("{:+.2f}", margin));
  if (timed) {
    row.emplace_back(e.timed ? fmt::format("{:.0f}", e.time.tokens_per_second_per_gpu) : std::string("-"));
    row.emplace_back(e.timed ? fmt::format("{:.1f}%", 100 * e.time.mfu) : std::string("-"));
  } else {
    row.emplace_back(fmt::format("{:.3f} ({:.3f}/{:.3f}/{:.3f})", e.cost.total(), e.cost.bubble, e.cost.recompute,
                                 e.cost.communication));
  }
  t.rows.push_back(std::move(row));
}

Table entries_table(const std::string& title, const std::vector<SearchEntry>& entries, std::int64_t top, Bytes usable,
                    bool timed, std::string_view profile) {
  Table t;
  t.title = title;
  t.columns = {"#", "layout", "schedule", "split", "mb", "optimizer", "recompute", "peak", "stage", "margin GiB"};
  if (timed) {
    t.columns.emplace_back("tok/s/GPU");
    t.columns.emplace_back("MFU");
  } else {
    t.columns.emplace_back("cost (bubble/recompute/comm)");
  }
  std::int64_t rank = 0;
  for (const auto& e : entries) {
    if (++rank > top) break;
    add_row(t, e, rank, usable, timed, profile);
  }
  return t;
}

// The flags analyze needs to reproduce a result's pipeline split: none for the even split (the
// default), else a --pipeline-model-parallel-layout string of the chunks (it holds under VPP
// and DualPipe, where --decoder-first/last-pipeline-num-layers do not). For Megatron-LM
// (`megatron`) an even split whose chunks differ in layers needs the string too: Megatron refuses
// layers that do not divide over the pipeline without one.
std::string split_flags(const ModelSpec& m, const SearchEntry& e, bool megatron = false) {
  if (e.split_name == "even" && !megatron) return "";
  const Layout layout = resolve_layout(m, e.parallel);
  if (e.split_name == "even") {
    bool equal = true;
    for (const Chunk& c : layout.chunks) equal = equal && c.num_layers == layout.chunks.front().num_layers;
    if (equal) return "";
  }
  std::string text;
  for (std::size_t i = 0; i < layout.chunks.size(); ++i) {
    const Chunk& c = layout.chunks[i];
    if (i > 0) text += '|';
    if (c.embedding) text += 'E';
    text.append(static_cast<std::size_t>(c.num_layers), 't');
    text.append(static_cast<std::size_t>(c.mtp_depths), 'm');
    if (c.loss) text += 'L';
  }
  return fmt::format(" --pipeline-model-parallel-layout '{}'", text);
}

// The analyze flags of one result: the settings search was given, then the layout's.
std::string entry_command(const std::string& base, const ModelSpec& m, const SearchEntry& e, double fraction) {
  const auto& p = e.parallel;
  std::string cmd = fmt::format("{} --tp {} --pp {} --dp {} --cp {} --ep {} --etp {}{}", base, p.tp, p.pp, p.dp, p.cp, p.ep,
                                p.etp_degree(), p.sp ? " --sp" : "");
  if (p.vpp > 1) cmd += fmt::format(" --vpp {}", p.vpp);
  cmd += fmt::format(" --schedule {}{} --micro-batch {} --zero {}", name_of(p.schedule), split_flags(m, e), e.training.micro_batch,
                     e.training.zero);
  if (e.training.recompute == Recompute::selective && e.training.recompute_modules != 0) {
    cmd += " --recompute selective --recompute-modules " + e.recompute_name;
  } else {
    cmd += fmt::format(" --recompute {}", name_of(e.training.recompute));
  }
  // Search judges a fit by the prediction against capacity x --max-memory-fraction, without the
  // accuracy band analyze adds by default: --no-margin makes analyze judge by the prediction too,
  // and the same fraction the same usable memory.
  return cmd + (fraction < 1 ? fmt::format(" --max-memory-fraction {}", fraction) : "") + " --no-margin";
}

// The Megatron-LM launch flags of a result's layout, batch, optimizer sharding and recomputation
// (the names megatron_args.cpp reads back), or "" where Megatron has no such schedule (DualPipe,
// DualPipeV, ZB-H1) or the profile is not Megatron's. Model flags are not included; the weights'
// precision is (--bf16 or --fp16).
std::string megatron_command(const ModelSpec& m, const SearchEntry& e, std::int64_t seq_len, std::string_view profile) {
  const auto& p = e.parallel;
  // No launch flags where Megatron-LM has none for the plan: DualPipe and the other schedules, and
  // ZeRO 2/3 (Megatron-FSDP, whose --use-megatron-fsdp launches moemem does not read back).
  if (profile != "megatron" || (p.schedule != Schedule::one_f_one_b && p.schedule != Schedule::interleaved) ||
      e.training.zero >= 2) {
    return "";
  }
  std::string cmd = fmt::format("--tensor-model-parallel-size {} --pipeline-model-parallel-size {} --context-parallel-size {} "
                                "--expert-model-parallel-size {} --expert-tensor-parallel-size {}",
                                p.tp, p.pp, p.cp, p.ep, p.etp_degree());
  if (p.vpp > 1) cmd += fmt::format(" --num-virtual-stages-per-pipeline-rank {}", p.vpp);
  if (p.sp) cmd += " --sequence-parallel";
  cmd += split_flags(m, e, true);
  cmd += fmt::format(" --micro-batch-size {} --global-batch-size {} --seq-length {}", e.training.micro_batch,
                     e.training.global_batch.value_or(0), seq_len);
  // Megatron's default dispatcher is allgather: an MoE command names the one costed.
  if (m.is_moe()) {
    cmd += fmt::format(" --moe-token-dispatcher-type {}",
                       e.training.deepep ? "flex" : e.training.allgather ? "allgather" : "alltoall");
  }
  // Megatron trains in fp32 without a precision flag; search costs bf16 weights (or fp16).
  if (e.training.precision.weights == DType::bf16) cmd += " --bf16";
  else if (e.training.precision.weights == DType::fp16) cmd += " --fp16";
  if (e.training.zero == 1) cmd += " --use-distributed-optimizer";
  if (!e.training.dataloader_attention_mask) cmd += " --no-create-attention-mask-in-dataloader";
  // TransformerConfig raises for full recomputation without a method and a layer count.
  if (e.training.recompute == Recompute::full) {
    cmd += fmt::format(" --recompute-granularity full --recompute-method {} --recompute-num-layers {}",
                       name_of(e.training.recompute_method), e.training.recompute_num_layers);
  }
  if (e.training.recompute == Recompute::selective) {
    std::string modules = e.recompute_name;
    std::replace(modules.begin(), modules.end(), ',', ' ');
    cmd += " --recompute-granularity selective --recompute-modules " + modules;
  }
  return cmd;
}

}  // namespace

void SearchCommand::setup(CLI::App& root) {
  app = root.add_subcommand("search", "Every parallel layout that fits on N GPUs, ranked");
  add_model_options(*app, model);
  add_int(*app, "--gpus", gpus, "Number of GPUs (required)");
  app->add_option("--gpu", training.gpu.gpu, "GPU: h100-80g|h800-80g|h200-141g|a100-80g|b200-192g");
  app->add_option("--gpu-memory", training.gpu.gpu_memory, "GPU memory, e.g. 80GiB");
  add_int(*app, "--seq-len", training.batch.seq_len, "Sequence length");
  add_optional_int(*app, "--global-batch", training.batch.global_batch, "Sequences per optimizer step (required)");
  app->add_option("--profile", training.profile, "Accounting profile: megatron|paper|torchtitan|hf")->capture_default_str();
  app->add_option("--main-grads-dtype", training.states.main_grads_dtype, "Gradient dtype");
  app->add_option("--main-params-dtype", training.states.main_params_dtype, "Master-weight dtype");
  app->add_option("--exp-avg-dtype", training.states.exp_avg_dtype, "Adam first-moment dtype");
  app->add_option("--exp-avg-sq-dtype", training.states.exp_avg_sq_dtype, "Adam second-moment dtype");
  app->add_option("--params-dtype", training.states.params_dtype, "Weight dtype");
  app->add_option("--fp8", training.numerics.fp8, "FP8 recipe: none|tensorwise|delayed|blockwise|mxfp8");
  app->add_option("--recipe", training.numerics.recipe, "deepseek-v3 or deepseek-v2 (its precision and recomputation)");
  app->add_option("--recipe-off", training.numerics.recipe_off, "The recipe's techniques to leave out, comma-separated");
  app->add_option("--attention", training.numerics.attention, "flash|eager");
  add_release_options(*app, training);
  add_fsdp2_options(*app, training);
  app->add_option("--finetune", training.finetune.finetune, "What trains: full|lora|qlora (the layouts of a LoRA or QLoRA fine-tune)")
      ->capture_default_str();
  add_optional_int(*app, "--lora-rank", training.finetune.lora_rank, "LoRA rank r (required with --finetune lora)");
  app->add_option("--lora-targets", training.finetune.lora_targets, "Linears LoRA adapts: all-linear or module names");
  app->add_option("--lora-dropout", training.finetune.lora_dropout, "LoRA dropout probability (default 0)");
  app->add_option("--optimizer", training.finetune.optimizer, "Optimizer: adamw|sgd|lion|muon (megatron; default adamw)");
  app->add_option("--moe-imbalance", training.moe.moe_imbalance, "Hottest expert rank's tokens, times the average");
  app->add_option("--moe-token-dispatcher", training.moe.dispatcher, "alltoall|allgather|deepep")->capture_default_str();
  app->add_flag("--overlap-moe-expert-parallel-comm", training.moe.ep_overlap,
                "EP all-to-all overlapped with another micro-batch's compute (Megatron's 1F1B A2A overlap)");
  app->add_flag("--no-create-attention-mask-in-dataloader", training.moe.no_attention_mask,
                "No b x s x s boolean attention mask from the data loader (Megatron creates one by default; megatron)");
  app->add_option("--max-memory-fraction", max_memory_fraction, "Usable share of GPU memory (headroom)")
      ->capture_default_str();
  add_int(*app, "--gpus-per-node", gpus_per_node, "GPUs per node (TP/EP beyond it cross nodes)");
  add_int(*app, "--tp-max", tp_max, "Largest tp (0: no bound)");
  add_int(*app, "--pp-max", pp_max, "Largest pp (0: no bound)");
  add_int(*app, "--ep-max", ep_max, "Largest ep (0: no bound)");
  add_int(*app, "--cp-max", cp_max, "Largest cp (0: no bound)");
  add_int(*app, "--vpp-max", vpp_max, "Largest virtual pipeline degree");
  add_int(*app, "--micro-batch-max", micro_batch_max, "Largest micro-batch (0: no bound)");
  add_optional_int(*app, "--tp", tp, "Fixed tp");
  add_optional_int(*app, "--pp", pp, "Fixed pp");
  add_optional_int(*app, "--cp", cp, "Fixed cp");
  add_optional_int(*app, "--ep", ep, "Fixed ep");
  add_optional_int(*app, "--etp", etp, "Fixed etp");
  add_optional_int(*app, "--vpp", vpp, "Fixed vpp");
  add_optional_int(*app, "--micro-batch", micro_batch, "Fixed micro-batch");
  app->add_option("--schedule", schedules, "Schedules to consider, comma-separated (default 1f1b, and "
                                            "interleaved with --vpp-max > 1; dualpipe too under --profile paper or --recipe deepseek-v3, zb-h1 under --recipe deepseek-v2)");
  app->add_option("--recompute", recomputes, "Recomputation choices: none,full,selective or module sets a+b "
                                             "(default: the documented family)");
  app->add_option("--zero", zero_stages, "ZeRO stages to consider (megatron: 0 plain, 1 distributed optimizer; hf default 0,1,2,3, or 0 with "
                                                   "--fsdp1/--fsdp2/--ddp)")
      ->capture_default_str();
  add_int(*app, "--top", top, "Layouts to print");
  add_int(*app, "--threads", threads, "Threads (0: all cores)");
  app->add_flag("--quiet")->description("No progress line on stderr (shown only when stderr is a terminal, after a second)");
  app->add_option("--format", format, "table|json|jsonl|csv|markdown|html (one self-contained page with charts)")->capture_default_str();
}

namespace {

// The settings search was given that analyze takes as they are (not searched over).
std::string base_flags(const SearchCommand& c) {
  const auto& t = c.training;
  std::string out = fmt::format("--model {}", c.model.model);
  if (c.model.mtp) out += fmt::format(" --mtp {}", *c.model.mtp);
  out += fmt::format(" --profile {} --seq-len {}", t.profile, t.batch.seq_len);
  if (t.batch.global_batch) out += fmt::format(" --global-batch {}", *t.batch.global_batch);
  if (c.gpus_per_node != 8) out += fmt::format(" --gpus-per-node {}", c.gpus_per_node);  // the step-time estimate's node
  for (const auto& [flag, value] : {std::pair{"--gpu", &t.gpu.gpu}, std::pair{"--gpu-memory", &t.gpu.gpu_memory},
                                    std::pair{"--main-grads-dtype", &t.states.main_grads_dtype},
                                    std::pair{"--main-params-dtype", &t.states.main_params_dtype},
                                    std::pair{"--exp-avg-dtype", &t.states.exp_avg_dtype},
                                    std::pair{"--exp-avg-sq-dtype", &t.states.exp_avg_sq_dtype},
                                    std::pair{"--params-dtype", &t.states.params_dtype}, std::pair{"--fp8", &t.numerics.fp8},
                                    std::pair{"--recipe", &t.numerics.recipe}, std::pair{"--recipe-off", &t.numerics.recipe_off},
                                    std::pair{"--attention", &t.numerics.attention},
                                    std::pair{"--hidden-dropout", &t.numerics.hidden_dropout},
                                    std::pair{"--attention-dropout", &t.numerics.attention_dropout},
                                    std::pair{"--loss", &t.fsdp.loss},
                                    std::pair{"--moe-imbalance", &t.moe.moe_imbalance}}) {
    if (!value->empty()) out += fmt::format(" {} {}", flag, *value);
  }
  // Releases and torchtitan's FSDP2 settings, where not the defaults.
  if (t.numerics.megatron_version != "current") out += " --megatron-version " + t.numerics.megatron_version;
  if (t.numerics.torchtitan_version != "current") out += " --torchtitan-version " + t.numerics.torchtitan_version;
  if (t.numerics.transformers_version != "5") out += " --transformers-version " + t.numerics.transformers_version;
  if (t.numerics.deepspeed_version != "current") out += " --deepspeed-version " + t.numerics.deepspeed_version;
  if (!t.numerics.experts_implementation.empty()) out += " --experts-implementation " + t.numerics.experts_implementation;
  if (t.fsdp.compile) out += " --compile";
  if (t.fsdp.fsdp_float8_all_gather) out += " --fsdp-float8-all-gather";
  if (t.fsdp.fsdp1) out += " --fsdp1";
  if (t.fsdp.ddp) out += " --ddp";
  if (t.fsdp.fsdp2) out += " --fsdp2";
  if (t.fsdp.fsdp_offload_params) out += " --fsdp-offload-params";
  if (t.fsdp.reshard_after_forward != "default") out += " --reshard-after-forward " + t.fsdp.reshard_after_forward;
  if (t.moe.dispatcher != "alltoall") out += " --moe-token-dispatcher " + t.moe.dispatcher;
  if (t.moe.ep_overlap) out += " --overlap-moe-expert-parallel-comm";
  if (t.moe.no_attention_mask) out += " --no-create-attention-mask-in-dataloader";
  if (t.finetune.finetune != "full") out += " --finetune " + t.finetune.finetune;
  if (t.finetune.lora_rank) out += fmt::format(" --lora-rank {}", *t.finetune.lora_rank);
  if (!t.finetune.lora_targets.empty()) out += " --lora-targets " + t.finetune.lora_targets;
  if (!t.finetune.lora_dropout.empty()) out += " --lora-dropout " + t.finetune.lora_dropout;
  if (!t.finetune.optimizer.empty() && t.finetune.optimizer != "adamw") out += " --optimizer " + t.finetune.optimizer;
  return out;
}

// The flags that need no model, in the order they are checked.
void check_flags(const SearchCommand& c) {
  if (c.format != "table" && c.format != "json" && c.format != "jsonl" && c.format != "csv" && c.format != "markdown" &&
      c.format != "html") {
    throw InputError("--format", c.format, "one of table, json, jsonl, csv, markdown, html");
  }
  if (c.gpus < 1) throw InputError("--gpus", std::to_string(c.gpus), "a positive number of GPUs (required)");
  if (c.top < 1 || c.top > 1000000) throw InputError("--top", std::to_string(c.top), "an integer from 1 to 1000000");
  if (c.threads < 0 || c.threads > 256) throw InputError("--threads", std::to_string(c.threads), "an integer from 0 (all cores) to 256");
}

// Runs the search on its own thread, showing progress on `err` after the first second when `show`.
SearchResult search_with_progress(const CompiledModel& cm, const SearchSpace& space, int n_threads, std::int64_t top,
                                  bool show, std::ostream& err) {
  std::atomic<std::int64_t> progress{0};
  // Only the `top` best layouts that fit are kept (all are counted): memory stays bounded.
  auto task = std::async(std::launch::async, [&] { return search(cm, space, n_threads, &progress, 5, top); });
  const auto start = std::chrono::steady_clock::now();
  while (task.wait_for(std::chrono::milliseconds(250)) != std::future_status::ready) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (show && elapsed > 1.0) err << fmt::format("\rsearching: {} layouts evaluated, {:.1f} s", progress.load(), elapsed) << std::flush;
  }
  if (show && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > 1.0) err << "\n";
  return task.get();
}

// What every format prints about the run (and the JSON summary's fields).
struct RunInfo {
  const ModelSpec& model;
  const GpuChoice& gpu;
  const Profile& profile;
  const SearchSpace& space;
  int threads = 1;
  std::vector<std::string> warnings;  // config keys not understood
  std::string base;                   // base_flags: each result's command starts with them
  [[nodiscard]] std::string command(const SearchEntry& e) const {
    return entry_command(base, model, e, space.max_memory_fraction);
  }
  [[nodiscard]] nlohmann::json megatron(const SearchEntry& e) const {
    const std::string m = megatron_command(model, e, space.base.seq_len, profile.name);
    return m.empty() ? nlohmann::json() : nlohmann::json(m);
  }
  [[nodiscard]] bool timed() const { return space.perf.has_value(); }
};

std::string summary_line(const SearchResult& r, const RunInfo& run) {
  return fmt::format("{} candidates, {} valid layouts evaluated on every stage in {:.3f} s with {} thread(s); {} fit in {} "
                     "({} x {:.2f})",
                     r.enumerated, r.evaluated, r.seconds, run.threads, r.feasible_count, format_gib(r.usable),
                     format_gib(run.space.capacity), run.space.max_memory_fraction);
}

// When no candidate was valid, "no layout fits" alone hides why (a model variant every layout
// breaks, such as Gemma-2's soft-capping without --attention eager): each rule broken, with how
// many candidates broke it and one of its messages.
bool all_refused(const SearchResult& r) { return r.evaluated == 0 && r.invalid > 0; }
std::string refusals(const SearchResult& r) {
  std::string s = "every candidate was refused, for these reasons (candidates refused, one message each):\n";
  for (const auto& [field, n] : r.invalid_by_field) s += fmt::format("  {} ({}): {}\n", field, n, r.invalid_reason.at(field));
  return s;
}

// json: one document; jsonl: one line per layout, then the summary line.
void print_json(const SearchResult& r, const RunInfo& run, std::int64_t top, bool lines, std::ostream& out) {
  nlohmann::json feasible = nlohmann::json::array(), pareto = nlohmann::json::array(), misses = nlohmann::json::array();
  std::int64_t rank = 0;
  for (const auto& e : r.feasible) {
    if (++rank > top) break;
    auto j = entry_json(e, rank, run.command(e));
    j["megatron_command"] = run.megatron(e);
    j["margin_bytes"] = r.usable.value() - e.peak.value();  // what the table's margin column shows, exact
    if (lines) out << json_text(j) << "\n";
    else feasible.push_back(std::move(j));
  }
  for (const auto& e : r.pareto) {
    auto j = entry_json(e, 0, run.command(e));
    j["margin_bytes"] = r.usable.value() - e.peak.value();
    pareto.push_back(std::move(j));
  }
  for (const auto& e : r.infeasible) {
    auto j = entry_json(e, 0, run.command(e));
    j["short_bytes"] = e.peak.value() - r.usable.value();
    misses.push_back(j);
  }
  nlohmann::json s = {{"schema", "moemem.search/1"}, {"model", run.model.name}, {"gpus", run.space.gpus}, {"gpu", run.gpu.name},
                      {"usable_bytes", r.usable.value()}, {"candidates", r.enumerated}, {"evaluated", r.evaluated},
                      {"feasible", r.feasible_count}, {"seconds", r.seconds}, {"threads", run.threads},
                      {"pareto", pareto}, {"nearest_infeasible", misses}};
  if (all_refused(r)) {
    nlohmann::json refused = nlohmann::json::array();
    for (const auto& [field, n] : r.invalid_by_field) {
      refused.push_back({{"field", field}, {"candidates", n}, {"reason", r.invalid_reason.at(field)}});
    }
    s["refused"] = refused;
  }
  add_warnings(s, run.warnings);
  if (!lines) {
    s["layouts"] = feasible;
    out << json_text(s, 2) << "\n";
  } else {
    s["summary"] = true;
    out << json_text(s) << "\n";
  }
}

// csv: the layouts that fit on `out`, the summary on `err`. For machines: one unit a column (peak
// and margin in bytes, MFU a fraction), numbers without signs or percent, and the analyze flags
// that reproduce each row.
Table csv_table(const SearchResult& r, const RunInfo& run, std::int64_t top) {
  Table t = entries_table("", r.feasible, top, r.usable, run.timed(), run.profile.name);
  t.columns = {"rank", "layout", "schedule", "split", "micro_batch", "optimizer", "recompute", "peak_bytes", "peak_stage",
               "margin_bytes"};
  if (run.timed()) {
    t.columns.emplace_back("tokens_per_second_per_gpu");
    t.columns.emplace_back("mfu");
  } else {
    t.columns.emplace_back("cost");
  }
  t.columns.emplace_back("command");
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const SearchEntry& e = r.feasible[i];
    auto& row = t.rows[i];
    row[9] = static_cast<std::int64_t>(r.usable.value()) - static_cast<std::int64_t>(e.peak.value());
    if (run.timed()) {
      row[10] = e.timed ? fmt::format("{:.1f}", e.time.tokens_per_second_per_gpu) : std::string();
      row[11] = e.timed ? fmt::format("{:.4f}", e.time.mfu) : std::string();
    } else {
      row[10] = fmt::format("{:.4f}", e.cost.total());
    }
    row.emplace_back("moemem analyze " + run.command(e));
  }
  return t;
}

void print_csv(const SearchResult& r, const RunInfo& run, std::int64_t top, std::ostream& out, std::ostream& err) {
  render(csv_table(r, run, top), Format::csv, out);
  err << summary_line(r, run) << "\n";
  if (all_refused(r)) err << refusals(r);
}

// The text table, or the same in Markdown (headings, tables, the command in backticks).
void print_table(const SearchResult& r, const RunInfo& run, std::int64_t top, std::ostream& out, Format f) {
  const bool md = f == Format::markdown;
  out << fmt::format("{}moemem search: {} on {} x {} (profile {}); peak and margin in GiB (2^30 bytes)\n{}{}\n\n", md ? "## " : "",
                     run.model.name, run.space.gpus, run.gpu.name, run.profile.name, md ? "\n" : "", summary_line(r, run));
  if (!r.feasible.empty()) {
    const char* by = run.timed() ? "estimated tokens/s per GPU" : "estimated overhead";
    render(entries_table(fmt::format("Best {} of {} layouts that fit, by {}", std::min<std::int64_t>(top, static_cast<std::int64_t>(r.feasible.size())), r.feasible_count, by),
                         r.feasible, top, r.usable, run.timed(), run.profile.name),
           f, out);
    if (!r.feasible.empty()) {
      const std::string cmd = "moemem analyze " + run.command(r.feasible.front());
      out << "#1 as analyze flags: " << (md ? "`" + cmd + "`" : cmd) << "\n\n";
    }
    render(entries_table(fmt::format("Pareto front (peak memory vs {}){}", by,
                                     static_cast<std::int64_t>(r.pareto.size()) > top
                                         ? fmt::format(": the {} leanest of {} (--top)", top, r.pareto.size())
                                         : ""),
                         r.pareto, top, r.usable, run.timed(),
                         run.profile.name),
           f, out);
  } else if (all_refused(r)) {
    out << "No layout: every candidate was refused (the reasons are on stderr).\n\n";
  } else {
    out << "No layout fits.\n\n";
  }
  if (!r.infeasible.empty()) {
    render(entries_table("Nearest layouts that do not fit (negative margin: short by)", r.infeasible, top, r.usable, run.timed(),
                         run.profile.name),
           f, out);
  }
  if (run.timed()) {
    out << "tokens/s per GPU and MFU: the step-time model (docs/formulas.md, \"Step time\"); one entry per layout "
           "(degrees, schedule, micro-batch): its fastest recomputation, split and optimizer sharding, or within 1% of it "
           "the one with the lowest peak\n";
  } else {
    out << "cost = pipeline bubble + recomputation + inter-node communication, as fractions of compute (docs/formulas.md)\n";
  }
}

}  // namespace

int SearchCommand::run(std::ostream& out, std::ostream& err) const {
  check_flags(*this);
  const auto gpu = gpu_choice(training);
  if (!gpu) throw InputError("--gpu/--gpu-memory", "missing", "the GPU to fit on (--gpu NAME or --gpu-memory SIZE)");
  if (!training.batch.global_batch) throw InputError("--global-batch", "missing", "the sequences per optimizer step");
  if (*training.batch.global_batch < 1) {
    throw InputError("--global-batch", std::to_string(*training.batch.global_batch), "a positive number of sequences per step");
  }
  if (!training.accelerate_config.empty()) {
    throw InputError("--accelerate-config", training.accelerate_config,
                     "analyze or explain (search takes --fsdp1, --fsdp2 or --ddp and searches the recomputation itself)");
  }

  const Profile& profile = get_profile(training.profile);
  const ModelSpec m = load_model_for(model, profile);
  const auto warnings = model_warnings(m, model, err);
  TrainingConfig base = to_training(training, profile);
  // LoRA: the base frozen and the adapters added, as make_scenario does for analyze.
  base.linear_routers = profile.peft_modules && hf_router_is_linear(m.model_type);
  base.linear_experts = !profile.peft_modules || hf_experts_are_linear(m.model_type);
  const Inventory inv = apply_finetune(build_inventory(m), base);
  check_peft_on_experts(profile, m, base, inv);
  const CompiledModel cm = compile_model(m, inv, profile);

  SearchSpace space;
  space.gpus = gpus;
  space.gpu_name = gpu->name;
  space.capacity = gpu->capacity;
  space.max_memory_fraction = parse_double(max_memory_fraction, "--max-memory-fraction");
  space.gpus_per_node = gpus_per_node;
  // A named GPU (not only --gpu-memory) has the figures the step-time model needs.
  if (!training.gpu.gpu.empty()) space.perf = lookup_gpu_perf(training.gpu.gpu);
  space.base = std::move(base);
  space.tp_max = tp_max;
  space.pp_max = pp_max;
  space.ep_max = ep_max;
  space.cp_max = cp_max;
  space.vpp_max = vpp_max;
  space.micro_batch_max = micro_batch_max;
  space.tp = tp;
  space.pp = pp;
  space.cp = cp;
  space.ep = ep;
  space.etp = etp;
  space.vpp = vpp;
  space.micro_batch = micro_batch;
  // Under the hf profile DeepSpeed's four stages are the choices (ZeRO-2 and -3 are how large
  // models fit there); FSDP and DDP shard by themselves, stage 0 with them.
  std::string stages = zero_stages;
  if (app->count("--zero") == 0 && profile.name == "hf") {
    stages = space.base.accelerate_fsdp() || space.base.hf_ddp ? "0" : "0,1,2,3";
  }
  for (const auto& s : parse_int_list(stages, "--zero")) {
    if (s > 3) throw InputError("--zero", stages, "stages from 0 to 3");
    space.zero_stages.clear();
  }
  for (const auto s : parse_int_list(stages, "--zero")) space.zero_stages.push_back(static_cast<int>(s));
  for (const char* flag : {"--schedule", "--recompute"}) {
    if (app->count(flag) > 0 && (flag == std::string_view("--schedule") ? schedules : recomputes).empty()) {
      throw InputError(flag, "", "a comma-separated list (leave the flag out for the default choices)");
    }
  }
  if (!schedules.empty()) {
    std::size_t start = 0;
    while (start <= schedules.size()) {
      const std::size_t end = std::min(schedules.find(',', start), schedules.size());
      space.schedules.push_back(parse_schedule(schedules.substr(start, end - start)));
      start = end + 1;
    }
  } else {
    // The schedules the profile's framework runs: Megatron-LM and torchtitan have 1F1B and its
    // interleaved form (the latter from --vpp-max > 1), not DualPipe. DeepSeek's own framework
    // ran DualPipe for V3 (the reference analysis, the deepseek-v3 recipe) and zero-bubble
    // pipelining for V2 (arXiv 2405.04434 §3.1.3).
    space.schedules = {Schedule::one_f_one_b};
    const std::optional<Recipe> recipe =
        training.numerics.recipe.empty() ? std::nullopt : std::optional(parse_recipe(training.numerics.recipe, "--recipe"));
    if (profile.name == "paper" || recipe == Recipe::deepseek_v3) space.schedules.push_back(Schedule::dualpipe);
    if (recipe == Recipe::deepseek_v2) space.schedules.push_back(Schedule::zb_h1);
  }
  space.titan_split = profile.name == "torchtitan";
  if (!profile.selective_recompute) {
    // The reference analysis knows no selective recomputation.
    space.recomputes = {{"none", Recompute::none, 0}, {"full", Recompute::full, 0}};
    if (!recomputes.empty()) {
      for (const auto& c : parse_recompute_choices(recomputes, m)) {
        if (c.mode == Recompute::selective) throw InputError("--recompute", recomputes, fmt::format("none or full for the {} profile", profile.name));
      }
      space.recomputes = parse_recompute_choices(recomputes, m);
    }
  } else if (profile.name == "torchtitan") {
    // torchtitan's selective checkpointing is per-op SAC, with no module list: none, it, full.
    space.recomputes = {{"none", Recompute::none, 0}, {"selective", Recompute::selective, 0}, {"full", Recompute::full, 0}};
    if (!recomputes.empty()) {
      space.recomputes.clear();
      for (std::size_t start = 0; start <= recomputes.size();) {
        const std::size_t end = std::min(recomputes.find(',', start), recomputes.size());
        const std::string item = recomputes.substr(start, end - start);
        start = end + 1;
        if (item == "none") space.recomputes.push_back({"none", Recompute::none, 0});
        else if (item == "selective") space.recomputes.push_back({"selective", Recompute::selective, 0});
        else if (item == "full") space.recomputes.push_back({"full", Recompute::full, 0});
        else if (!item.empty()) {
          throw InputError("--recompute", recomputes, "a list of none, selective (per-op SAC) and full for the torchtitan profile");
        }
      }
    }
  } else if (!recomputes.empty()) {
    space.recomputes = parse_recompute_choices(recomputes, m);
  } else if (!training.numerics.recipe.empty()) {
    // A recipe fixes the recomputation and the optimizer sharding it was published with.
    space.recomputes = {{recompute_modules_text(space.base.recompute_modules), space.base.recompute,
                         space.base.recompute_modules}};
    space.zero_stages = {space.base.zero};
  }

  // A choice listed twice is one choice: each is searched once (and counted once).
  const auto dedupe = [](auto& list, auto same) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      for (std::size_t j = list.size(); j-- > i + 1;) {
        if (same(list[i], list[j])) list.erase(list.begin() + static_cast<std::ptrdiff_t>(j));
      }
    }
  };
  dedupe(space.zero_stages, [](int a, int b) { return a == b; });
  dedupe(space.schedules, [](Schedule a, Schedule b) { return a == b; });
  dedupe(space.recomputes, [](const RecomputeChoice& a, const RecomputeChoice& b) { return a.mode == b.mode && a.modules == b.modules; });
  const int n_threads = threads > 0 ? static_cast<int>(threads)
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Progress is for a person watching: on the process's stderr when it is a terminal, unless --quiet.
  const bool show = app->count("--quiet") == 0 && &err == &std::cerr && isatty(STDERR_FILENO) == 1;
  const SearchResult r = search_with_progress(cm, space, n_threads, top, show, err);
  if (r.enumerated == 0) {
    // Each fixed degree divides the GPU count, yet their combination (with the model: ep must
    // divide the experts and dp x cp, vpp the layers per stage) admits no layout at all.
    std::vector<std::string> fixed;
    for (const auto& [flag, v] : {std::pair{"--tp", tp}, std::pair{"--pp", pp}, std::pair{"--cp", cp}, std::pair{"--ep", ep},
                                  std::pair{"--etp", etp}, std::pair{"--vpp", vpp}, std::pair{"--micro-batch", micro_batch}}) {
      if (v) fixed.push_back(fmt::format("{} {}", flag, *v));
    }
    throw InputError(fixed.empty() ? std::string("--gpus") : fmt::format("{}", fmt::join(fixed, ", ")),
                     fixed.empty() ? std::to_string(gpus) : std::string("fixed"),
                     fmt::format("choices that admit at least one layout of {} GPUs for {} (with these, no candidate "
                                 "exists: ep divides the routed experts and dp x cp, etp x ep divides the GPUs, vpp the "
                                 "layers per stage, micro-batch x dp the global batch)",
                                 gpus, m.name));
  }
  const RunInfo run{m, *gpu, profile, space, n_threads, warnings, base_flags(*this)};
  if (format == "html") {
    // The page is drawn from the JSON document itself, so it shows exactly its numbers.
    std::ostringstream doc;
    print_json(r, run, top, false, doc);
    write_search_html(nlohmann::json::parse(doc.str()), command_line(*app), out);
  } else if (format == "json" || format == "jsonl") print_json(r, run, top, format == "jsonl", out);
  else if (format == "csv") print_csv(r, run, top, out, err);
  else print_table(r, run, top, out, format == "markdown" ? Format::markdown : Format::table);
  // Every candidate refused is bad input (a setting no layout can take), not "does not fit":
  // exit 2 with the reasons on stderr (the JSON document carries them too, under "refused").
  if (all_refused(r)) {
    if (format != "csv") err << "moemem: error: " << refusals(r);
    return 2;
  }
  return r.feasible_count == 0 ? 1 : 0;
}

}  // namespace moemem::cli
