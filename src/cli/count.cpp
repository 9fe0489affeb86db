#include <map>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "moemem/errors.hpp"
#include "moemem/megatron_args.hpp"

namespace moemem::cli {

namespace {

// A decoder layer's kind: moe or dense; a Nemotron-H block (one mixer each) names its Mamba-2 or
// attention mixer, its MLP and MoE blocks read dense and moe.
std::string_view layer_kind(const ModelSpec& m, std::int64_t layer) {
  if (m.naming == NamingStyle::nemotron_h && m.mixer_at(layer) == MixerKind::mamba2) return "mamba2";
  if (m.naming == NamingStyle::nemotron_h && m.mixer_at(layer) == MixerKind::attention) return "attention";
  return m.layer_kinds[static_cast<std::size_t>(layer)] == LayerKind::moe ? "moe" : "dense";
}

std::string layer_label(const Tensor& t, const ModelSpec& m) {
  switch (t.placement) {
    case Placement::embedding: return t.module == Module::vision ? "vision" : "embedding";  // Llama-4's tower
    case Placement::head: return "head";
    case Placement::decoder:
      return fmt::format("layer {} ({})", t.layer, layer_kind(m, t.layer));
    case Placement::mtp: return fmt::format("mtp {} (layer {})", t.layer - m.num_layers, t.layer);
  }
  return "?";
}

std::string shape_of(const Tensor& t) {
  std::string s = t.is_vector() ? fmt::format("{}", t.rows) : fmt::format("{}x{}", t.rows, t.cols);
  if (t.copies > 1) s = fmt::format("{} x {}", t.copies, s);
  return s;
}

}  // namespace

void CountCommand::setup(CLI::App& root) {
  app = root.add_subcommand("count", "Parameter inventory and totals");
  add_model_options(*app, model);
  app->add_option("--megatron-args", megatron_args,
                  "A Megatron-LM launch script or argument file: count the model its flags give (--num-layers, ...)");
  app->add_flag("--no-router-bias", no_router_bias, "Leave out DeepSeek-V3's router score-correction bias");
  app->add_option("--by", by, "Group rows by layer|module|tensor")->capture_default_str();
  add_format_option(*app, format);
}

void CountCommand::run(std::ostream& out, std::ostream& err) const {
  const Format f = parse_format(format);
  if (by != "layer" && by != "module" && by != "tensor") throw InputError("--by", by, "one of layer, module, tensor");
  ModelSpec m = model.spec ? *model.spec : load_model(model.model);
  std::optional<std::int64_t> script_mtp;
  if (app != nullptr && app->count("--megatron-args") > 0) {
    // The script's model, as analyze reads it; a --model given too must be the same model.
    const MegatronSettings s = parse_megatron_args(read_text_file(megatron_args, "--megatron-args"), megatron_args);
    if (!s.model) {
      throw InputError(fmt::format("--megatron-args {}", megatron_args), "no model",
                       "a script that gives its model (--num-layers, --hidden-size, --num-attention-heads, ...)");
    }
    if (app->count("--model") > 0) {
      if (auto e = model_disagreement(*s.model, m)) throw *e;
    } else {
      if (s.model->vocab == 0) {
        throw InputError(fmt::format("{}: --vocab-size", megatron_args), "missing",
                         fmt::format("the vocabulary size ({}; Megatron reads it from the tokenizer): add --vocab-size N "
                                     "to the script, or give --model",
                                     s.vocab_missing));
      }
      m = *s.model;
    }
    if (s.mtp) script_mtp = s.mtp->value;
  }
  set_mtp_layers(m, model.mtp ? model.mtp : script_mtp);
  if (no_router_bias) m.moe.router_bias = false;
  const auto warnings = model_warnings(m, model, err);
  const Inventory inv = build_inventory(m);

  Table t;
  t.title = fmt::format("Parameters of {} by {}", m.name, by);
  if (by == "tensor") {
    t.columns = {"tensor", "part", "role", "module", "shape", "params"};
    for (const auto& x : inv.tensors) {
      if (!x.in_checkpoint) continue;
      t.rows.push_back({x.name, std::string(x.part.empty() ? "-" : x.part), std::string(name_of(x.role)),
                        std::string(name_of(x.module)), shape_of(x), x.params().value()});
    }
  } else {
    // Ordered as they first appear in the inventory.
    std::vector<std::string> order;
    std::map<std::string, Count> sums;
    for (const auto& x : inv.tensors) {
      if (!x.in_checkpoint) continue;
      const std::string key = by == "layer" ? layer_label(x, m) : std::string(name_of(x.module));
      if (!sums.contains(key)) order.push_back(key);
      sums[key] += x.params();
    }
    t.columns = {by, "params"};
    for (const auto& k : order) t.rows.push_back({k, sums[k].value()});
  }
  // The checkpoint's tensors: GLM-5's MTP copies of the embedding and head are held in training
  // (analyze counts them) but not stored.
  const Count total = inv.checkpoint_total();
  if (f == Format::json) {
    nlohmann::json j = {{"schema", "moemem.count/1"},
                        {"model", m.name},
                        {"total_params", total.value()},
                        {"active_params", active_params(inv, m).value()},
                        {"mtp_layers", m.mtp_layers},
                        {"router_bias", m.moe.router_bias},
                        {"by", by},
                        {"rows", to_json(t)["rows"]}};
    add_warnings(j, warnings);
    out << json_text(j, 2) << "\n";
    return;
  }
  if (f != Format::csv) {
    t.rows.push_back({std::string("total"), total.value()});
    t.rows.push_back({std::string("active per token (top-k routed experts, MTP excluded)"), active_params(inv, m).value()});
  }
  if (by == "tensor" && f != Format::csv) {
    t.rows.pop_back();
    t.rows.back() = {std::string("total"), std::string(""), std::string(""), std::string(""), std::string(""), total.value()};
    t.rows.push_back({std::string("active per token"), std::string(""), std::string(""), std::string(""), std::string(""),
                      active_params(inv, m).value()});
  }
  render(t, f, out);
}

}  // namespace moemem::cli
