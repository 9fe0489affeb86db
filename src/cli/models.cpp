// `moemem models`: the bundled presets, where each config.json comes from, and what it counts.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "moemem/presets.hpp"

namespace moemem::cli {

void ModelsCommand::setup(CLI::App& root) {
  app = root.add_subcommand("models", "The bundled model presets, their sources and parameter totals");
  add_format_option(*app, format);
}

void ModelsCommand::run(std::ostream& out, std::ostream&) const {
  const Format f = parse_format(format);
  Table t;
  t.title = "Bundled presets (--model NAME, in any case, or the repository id); totals as the checkpoint counts them";
  t.columns = {"preset", "hugging face repository", "model_type", "layers", "routed experts", "total params"};
  nlohmann::json list = nlohmann::json::array();
  for (const auto& s : preset_sources()) {
    const ModelSpec m = load_model(std::string(s.preset));
    const Count total = build_inventory(m).checkpoint_total();  // what the checkpoint stores, as count
    const std::string experts = m.is_moe() ? fmt::format("{} (top {})", m.moe.num_routed_experts, m.moe.top_k) : "-";
    t.rows.push_back({std::string(s.preset), std::string(s.repo), m.model_type, m.num_layers, experts, total.value()});
    list.push_back({{"preset", s.preset}, {"repository", s.repo}, {"model_type", m.model_type}, {"layers", m.num_layers},
                    {"routed_experts", m.moe.num_routed_experts}, {"total_params", total.value()}});
  }
  if (f == Format::json) {
    out << nlohmann::json{{"schema", "moemem.models/1"}, {"models", list}}.dump(2) << "\n";
    return;
  }
  render(t, f, out);
}

}  // namespace moemem::cli
