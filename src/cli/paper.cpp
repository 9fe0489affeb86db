// `moemem paper`: the reference analysis's tables (paper-method.md §2-§7), every figure computed
// from the tensor inventory and the paper profile, never typed in.
#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "moemem/errors.hpp"
#include "moemem/analyze.hpp"
#include "moemem/sharding.hpp"

namespace moemem::cli {

namespace {

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

Count module_sum(const StageReport& s, std::initializer_list<Module> mods) {
  Count c;
  for (const auto m : mods) c += s.params_by_module[static_cast<std::size_t>(m)];
  return c;
}

std::string shape_text(const Tensor& t) {
  return t.is_vector() ? fmt::format("{}", t.rows) : fmt::format("{} x {}", t.rows, t.cols);
}

Table per_layer_table(const ModelSpec& m, const Inventory& inv) {
  Table t;
  t.title = "Parameters per layer (reference §2)";
  t.columns = {"layer kind", "matrix", "tensor", "shape", "params"};
  auto add_layer = [&](LayerKind kind, const char* label) {
    std::int64_t layer = -1;
    for (std::int64_t i = 0; i < m.num_layers && layer < 0; ++i) {
      if (m.layer_kinds[idx(i)] == kind) layer = i;
    }
    if (layer < 0) return;
    Count attn, norms, block;
    for (const auto& x : inv.tensors) {
      if (x.placement != Placement::decoder || x.layer != layer || x.role == Role::router_bias) continue;
      if (x.module == Module::attention) {
        attn += x.params();
        t.rows.push_back({std::string(label), std::string(name_of(x.role)),
                          x.name + (x.part.empty() ? "" : fmt::format(" [{}]", x.part)), shape_text(x), x.params().value()});
      } else if (x.module == Module::norms) {
        norms += x.params();
      } else {
        block += x.params();
        if (x.is_routed_expert) {
          t.rows.push_back({std::string(label), fmt::format("{} (per expert)", name_of(x.role)), x.name, shape_text(x),
                            Count(x.params().value() / static_cast<std::uint64_t>(x.copies)).value()});
        } else if (x.module != Module::attention) {
          t.rows.push_back({std::string(label), std::string(name_of(x.role)), x.name, shape_text(x), x.params().value()});
        }
      }
    }
    t.rows.push_back({std::string(label), std::string("attention total"), std::string(""), std::string(""), attn.value()});
    t.rows.push_back({std::string(label), std::string("RMSNorm total"), std::string(""), std::string(""), norms.value()});
    t.rows.push_back({std::string(label), std::string(kind == LayerKind::moe ? "MoE block total" : "dense MLP total"),
                      std::string(""), std::string(""), block.value()});
  };
  add_layer(LayerKind::moe, "MoE layer");
  add_layer(LayerKind::dense, "dense layer");
  return t;
}

Table totals_table(const ModelSpec& base) {
  Table t;
  t.title = "Model totals (reference §2)";
  t.columns = {"variant", "params"};
  ModelSpec m = base;
  m.mtp_layers = 0;
  m.moe.router_bias = false;
  const Count plain = build_inventory(m).total();
  t.rows.push_back({std::string("without MTP, without router bias"), plain.value()});
  const bool has_bias = base.moe.router_bias;
  m.moe.router_bias = has_bias;
  const Count with_bias = build_inventory(m).total();
  if (has_bias) t.rows.push_back({std::string("without MTP, with router bias"), with_bias.value()});
  if (base.mtp_layers > 0) {
    ModelSpec full = base;
    const Count all = build_inventory(full).total();
    t.rows.push_back({fmt::format("MTP module ({} depth)", full.mtp_layers), Count(all.value() - with_bias.value()).value()});
    t.rows.push_back({std::string("with MTP (checkpoint)"), all.value()});
  }
  return t;
}

// What one pipeline rank holds, chunk by chunk in model order: under interleaving or DualPipe a
// rank holds several chunks, which one first-last range would misstate.
std::string rank_contents(const Layout& layout, std::size_t rank) {
  std::vector<std::int64_t> held = layout.rank_chunks[rank];
  std::sort(held.begin(), held.end());
  std::string text;
  for (const std::int64_t c : held) {
    const Chunk& ch = layout.chunks[static_cast<std::size_t>(c)];
    std::string part;
    if (ch.embedding) part = "embedding";
    if (ch.num_layers > 0) {
      if (!part.empty()) part += " + ";
      part += ch.num_layers == 1 ? std::to_string(ch.first_layer)
                                 : fmt::format("{}-{}", ch.first_layer, ch.first_layer + ch.num_layers - 1);
    }
    if (ch.mtp_depths > 0) part += (part.empty() ? "" : " + ") + fmt::format("MTP {}", ch.mtp_depths);
    if (ch.loss) part += (part.empty() ? "" : " + ") + std::string("norm + head");
    if (part.empty()) continue;
    text += (text.empty() ? "" : ", ") + part;
  }
  return text.empty() ? "-" : text;
}

Table stages_table(const ModelSpec& m, const Inventory& inv, const Profile& profile, const Layout& layout) {
  Table t;
  t.title = fmt::format("Pipeline stages, PP = {} (reference §3): parameters held by each stage, and their BF16 bytes",
                        layout.config.pp);
  t.columns = {"stage", "layers", "params", "bf16 GiB"};
  // Unsharded parameters of the chunks each rank holds.
  std::vector<Count> per(layout.stages.size());
  for (const auto& x : inv.tensors) {
    if (!profile.accounts(x)) continue;
    const std::int64_t chunk = chunk_holding(x, layout, m.num_layers);
    for (std::size_t r = 0; r < per.size(); ++r) {
      if (layout.rank_holds(static_cast<std::int64_t>(r), chunk)) per[r] += x.params();
    }
  }
  for (std::size_t s = 0; s < per.size(); ++s) {
    t.rows.push_back({static_cast<std::int64_t>(s), rank_contents(layout, s), per[s].value(),
                      GibBytes{bytes_of(per[s], DType::bf16).value()}});
  }
  return t;
}

}  // namespace

void PaperCommand::setup(CLI::App& root) {
  app = root.add_subcommand("paper", "The reference analysis's tables (DeepSeek-V3, PP16/TP2/EP8 by default)");
  // The reference layout and batch are the defaults; every one can be overridden.
  layout.tp = 2;
  layout.pp = 16;
  layout.dp = 32;
  layout.ep = 8;
  layout.etp = 1;
  layout.sp = true;
  add_model_options(*app, model);
  add_layout_options(*app, layout);
  add_int(*app, "--seq-len", training.batch.seq_len, "Sequence length s");
  add_int(*app, "--stage", stage, "Pipeline stage whose device the static, ZeRO and activation tables describe");
  app->add_option("--recipe", recipe,
                  "deepseek-v3: add the V3 report's own run (its recipe, TP1 PP16 DualPipe EP64 DP128, FP8) beside the "
                  "reference analysis, stage by stage; the reference tables are unchanged");
  add_format_option(*app, format);
}

namespace {

// §4: static parameters on one device of the stage, by module (the report's rows).
Table static_table(const Evaluation& e, const StageReport& st, std::int64_t stage) {
  const auto& p = e.layout.config;
  Table t;
  t.title = fmt::format("Static parameters on one device of stage {} (reference §4): TP {}, EP {}, ETP {}, EDP {}", stage,
                        p.tp, p.ep, p.etp_degree(), e.layout.edp);
  t.columns = {"part", "params", "bf16 bytes", "GiB"};
  auto row = [&](const char* name, Count c) {
    const Bytes b = bytes_of(c, DType::bf16);
    t.rows.push_back({std::string(name), c.value(), b.value(), GibBytes{b.value()}});
  };
  row("attention (MLA)", module_sum(st, {Module::attention}));
  row("RMSNorm", module_sum(st, {Module::norms}));
  row("dense MLP", module_sum(st, {Module::dense_mlp}));
  row("MoE (experts, shared experts, routers)", module_sum(st, {Module::router, Module::routed_experts, Module::shared_experts}));
  row("embedding and head", module_sum(st, {Module::embedding, Module::output_head, Module::mtp}));
  row("total", st.params.non_expert + st.params.expert);
  row("  ZeRO non-expert part (over dp*cp)", st.params.non_expert);
  row("  ZeRO expert part (over edp)", st.params.expert);
  return t;
}

// §5: the stage's weights, gradients and optimizer states under each ZeRO stage.
Table zero_table(const Evaluation& e, const TrainingConfig& t0, std::int64_t stage) {
  Table t;
  t.title = fmt::format("Weights, gradients and optimizer states per device of stage {} under ZeRO (reference §5), GiB", stage);
  t.columns = {"ZeRO", "parameters", "gradients", "optimizer", "total"};
  for (int z = 0; z <= 3; ++z) {
    TrainingConfig tz = t0;
    tz.zero = z;
    const MemoryReport rz = analyze(e.model, e.inventory, *e.profile, e.layout, tz);
    const StageBytes& s = rz.stages[idx(stage)].bytes;
    const Bytes total = s.weights + s.gradients + s.optimizer;
    t.rows.push_back({z == 0 ? std::string("none") : std::to_string(z), GibBytes{s.weights.value()},
                      GibBytes{s.gradients.value()}, GibBytes{s.optimizer.value()}, GibBytes{total.value()}});
  }
  return t;
}

// §6: one micro-batch's activations on the stage's device, a view of the stage's ledger
// (activation items, attention's apart from the rest), for b = 1, 2, 4 with and without full
// recomputation.
Table activations_table(const Evaluation& e, const TrainingConfig& t0, std::int64_t stage) {
  Table t;
  t.title = fmt::format("Activations of one micro-batch on one device of stage {} (reference §6), s = {}, GiB", stage,
                        e.training.seq_len);
  t.columns = {"b", "recompute", "attention (MLA)", "MoE / MLP", "total"};
  for (const std::int64_t b : {1, 2, 4}) {
    for (const Recompute rc : {Recompute::none, Recompute::full}) {
      TrainingConfig tb = t0;
      tb.micro_batch = b;
      tb.recompute = rc;
      const MemoryReport r = analyze(e.model, e.inventory, *e.profile, e.layout, tb, Detail::items);
      Bytes attn, rest;
      for (const auto& item : r.stages[idx(stage)].ledger) {
        if (item.category != Category::activations) continue;
        (item.module == name_of(Module::attention) ? attn : rest) += item.bytes;
      }
      t.rows.push_back({b, std::string(name_of(rc)), GibBytes{attn.value()}, GibBytes{rest.value()},
                        GibBytes{(attn + rest).value()}});
    }
  }
  return t;
}

// §7: the report's ranges for buffers and fragmentation.
Table overhead_table(const Profile& prof) {
  Table t;
  t.title = "Buffers and fragmentation (reference §7): the report's ranges, not estimates";
  t.columns = {"term", "low", "high"};
  t.rows.push_back({std::string("communication buffers per device (GiB)"), GibBytes{prof.overhead.buffers_low.value()},
                    GibBytes{prof.overhead.buffers_high.value()}});
  t.rows.push_back({std::string("fragmentation (% of allocated)"), std::int64_t{prof.overhead.fragmentation_pct_low},
                    std::int64_t{prof.overhead.fragmentation_pct_high}});
  return t;
}

void print_tables(const std::vector<Table>& tables, const Evaluation& e, std::int64_t stage, Format f,
                  const std::vector<std::string>& warnings, std::ostream& out) {
  if (f == Format::json) {
    nlohmann::json j = {{"schema", "moemem.paper/1"}, {"model", e.model.name}, {"stage", stage}};
    add_warnings(j, warnings);
    j["tables"] = nlohmann::json::array();
    for (const auto& t : tables) j["tables"].push_back(to_json(t));
    out << json_text(j, 2) << "\n";
    return;
  }
  if (f == Format::table || f == Format::markdown) {
    out << (f == Format::markdown ? "## " : "")
        << fmt::format("moemem paper: {} under the reference analysis's conventions; GiB = 2^30 bytes\n\n", e.model.name);
  }
  for (const auto& t : tables) {
    if (f == Format::csv) out << "# " << t.title << " (sizes here in exact bytes)\n";
    render(t, f, out);
  }
}

}  // namespace

void PaperCommand::run(std::ostream& out, std::ostream& err) const {
  const Format f = parse_format(format);
  TrainingOptions to = training;
  to.profile = "paper";
  to.recompute.recompute = "none";
  const Evaluation e = resolve(model, layout, to);
  const auto warnings = model_warnings(e.model, model, err);
  if (stage < 0 || stage >= e.layout.config.pp) {
    throw InputError("--stage", std::to_string(stage), fmt::format("a stage from 0 to {}", e.layout.config.pp - 1));
  }
  std::vector<Table> tables;
  tables.push_back(per_layer_table(e.model, e.inventory));
  ModelSpec checkpoint = load_model(model.model);  // totals as the checkpoint has them (MTP, bias)
  if (model.mtp) set_mtp_layers(checkpoint, model.mtp);
  tables.push_back(totals_table(checkpoint));
  tables.push_back(stages_table(e.model, e.inventory, *e.profile, e.layout));
  TrainingConfig t0 = e.training;
  t0.overhead = OverheadPoint::none;
  const MemoryReport base = analyze(e.model, e.inventory, *e.profile, e.layout, t0);
  tables.push_back(static_table(e, base.stages[idx(stage)], stage));
  tables.push_back(zero_table(e, t0, stage));
  tables.push_back(activations_table(e, t0, stage));
  tables.push_back(overhead_table(*e.profile));
  if (!recipe.empty()) tables.push_back(recipe_run_table(model, base, recipe));
  print_tables(tables, e, stage, f, warnings, out);
}

}  // namespace moemem::cli
