#include "moemem/ledger.hpp"

namespace moemem {

std::string_view name_of(Category c) {
  switch (c) {
    case Category::weights: return "weights";
    case Category::gradients: return "gradients";
    case Category::optimizer: return "optimizer";
    case Category::activations: return "activations";
    case Category::buffers: return "buffers";
    case Category::fragmentation: return "fragmentation";
    case Category::runtime: return "runtime";
    case Category::host: return "host";
  }
  return "?";
}

void Ledger::drop(Category c) {
  totals_[static_cast<std::size_t>(c)] = Bytes{};
  if (detail_) std::erase_if(*items_, [c](const LedgerItem& it) { return it.category == c; });
}

LedgerItem ledger_item(std::string module, std::string item, std::string rule, Count elements,
                       std::optional<DType> dtype, std::int64_t multiplier) {
  LedgerItem it;
  it.module = std::move(module);
  it.item = std::move(item);
  it.rule = std::move(rule);
  it.elements = elements;
  it.dtype = dtype;
  it.multiplier = multiplier;
  return it;
}

}  // namespace moemem
