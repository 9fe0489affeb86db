// moemem_layer_terms: prints, as JSON, the activation terms one decoder layer of each kind keeps
// for one micro-batch under the given flags (the analyze command's model, layout and training
// flags), and their sum under the flags' recomputation. tests/groundtruth/check_hf.py compares
// these sums with what PyTorch autograd saves.
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "moemem/analyze.hpp"
#include "moemem/errors.hpp"

int main(int argc, char** argv) {
  using namespace moemem;
  CLI::App app{"Per-layer activation terms of a decoder layer"};
  cli::ModelOptions mo;
  cli::LayoutOptions lo;
  cli::TrainingOptions to;
  cli::add_model_options(app, mo);
  cli::add_layout_options(app, lo);
  cli::add_training_options(app, to);
  try {
    app.parse(argc, argv);
    const Scenario s = cli::resolve(mo, lo, to);
    nlohmann::json out = nlohmann::json::object();
    for (const LayerKind kind : {LayerKind::dense, LayerKind::moe}) {
      bool present = false;
      for (const auto k : s.model.layer_kinds) present = present || k == kind;
      if (!present) continue;
      const auto terms = layer_activation_terms(*s.profile, s.model, s.layout, s.training, kind);
      nlohmann::json list = nlohmann::json::array();
      for (const auto& t : terms) {
        if (!is_kept(t, s.training.recompute, s.training.recompute_modules)) continue;
        list.push_back({{"name", std::string(t.name)}, {"bytes", t.bytes().value()}});
      }
      out[kind == LayerKind::moe ? "moe" : "dense"] = {
          {"kept_bytes", kept_bytes(terms, s.training.recompute, s.training.recompute_modules).value()}, {"terms", list}};
    }
    std::cout << out.dump(1) << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const InputError& e) {
    std::cerr << "moemem_layer_terms: error: " << e.what() << "\n";
    return 2;
  }
}
