// explain: a view of one stage's ledger.
#include "moemem/explain.hpp"

#include <fmt/format.h>

#include "moemem/errors.hpp"

namespace moemem {

std::vector<ExplainItem> explain_stage(const ModelSpec& m, const Inventory& inv, const Profile& profile,
                                       const Layout& layout, const TrainingConfig& t, std::int64_t stage) {
  const MemoryReport r = analyze(m, inv, profile, layout, t, Detail::items);
  if (stage < 0 || stage >= static_cast<std::int64_t>(r.stages.size())) {
    throw InputError("--stage", std::to_string(stage), fmt::format("a stage from 0 to {}", r.stages.size() - 1));
  }
  std::vector<ExplainItem> out;
  for (const auto& it : r.stages[static_cast<std::size_t>(stage)].ledger) {
    out.push_back({std::string(name_of(it.category)), it.module, it.item, it.rule, it.bytes});
  }
  return out;
}

}  // namespace moemem
