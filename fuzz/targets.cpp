#include "targets.hpp"

#include "cli/commands.hpp"
#include "moemem/analyze.hpp"
#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/scenario.hpp"
#include "moemem/validate.hpp"

namespace moemem::fuzz {

void config_json(std::string_view input) {
  try {
    const ModelSpec m = parse_hf_config(input, "fuzz.config.json");
    (void)build_inventory(m).total();
    // Analyzing takes time in the layers; the parser and inventory are what is fuzzed here.
    if (m.num_layers > 64) return;
    Request r;
    r.model.spec = m;
    const Scenario s = make_scenario(r);
    (void)analyze(s.model, s.inventory, *s.profile, s.layout, s.training);
  } catch (const InputError&) {
    // refused with a named error: fine
  }
}

void validation_line(std::string_view input) {
  try {
    const RequestBuilder build = [](const RecordSpec& spec) { return cli::record_request_of(spec, ""); };
    (void)validate_records(input, "fuzz.jsonl", Confidence::low, build);
  } catch (const InputError&) {
    // refused with a named error: fine
  }
}

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {{"config", config_json}, {"validation_line", validation_line}};
  return all;
}

}  // namespace moemem::fuzz
