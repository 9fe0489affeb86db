// The ledger: every byte of one pipeline stage as an itemised list. Each item names its category
// (weights, gradients, optimizer, activations, buffers, fragmentation, runtime), its module, the
// tensor or term, the rule that gives its size, the elements of one instance, their dtype and the
// number of instances (layers x in-flight micro-batches). A stage's totals are sums over it;
// explain and paper are views of it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moemem/dtype.hpp"
#include "moemem/units.hpp"

namespace moemem {

// host: CPU memory the run keeps per GPU (not part of the device's total).
enum class Category : std::uint8_t { weights, gradients, optimizer, activations, buffers, fragmentation, runtime, host };
inline constexpr std::size_t kCategoryCount = static_cast<std::size_t>(Category::host) + 1;
[[nodiscard]] std::string_view name_of(Category c);

struct LedgerItem {
  Category category{};
  std::string module;  // e.g. "attention", "non-expert (dp*cp)", "fsdp", "allocator"
  std::string item;    // tensor role, saved tensor or term
  std::string rule;    // how the bytes follow: shape or rule, dtype, multipliers
  Count elements;      // of one instance (zero where the item is not a count of elements)
  std::optional<DType> dtype;
  std::int64_t multiplier = 1;  // instances: layers x in-flight micro-batches
  Bytes bytes;
};

// Per-category sums, and the items when detail is on. `add` calls `describe` (which returns the
// item's module, name and rule) only with detail on, so an evaluation without detail (search)
// runs the same code without formatting text.
class Ledger {
 public:
  Ledger(std::vector<LedgerItem>* items, bool detail) : items_(items), detail_(detail) {}
  [[nodiscard]] bool detail() const { return detail_; }
  template <class Describe>
  void add(Category c, Bytes b, Describe&& describe) {
    totals_[static_cast<std::size_t>(c)] += b;
    if (detail_) {
      LedgerItem it = describe();
      it.category = c;
      it.bytes = b;
      items_->push_back(std::move(it));
    }
  }
  [[nodiscard]] Bytes total(Category c) const { return totals_[static_cast<std::size_t>(c)]; }
  // Removes a category: its total and its items (a phase in which none of it is alive).
  void drop(Category c);

 private:
  std::vector<LedgerItem>* items_;
  bool detail_;
  std::array<Bytes, kCategoryCount> totals_{};
};

// An item's text fields; elements, dtype and multiplier where they apply.
[[nodiscard]] LedgerItem ledger_item(std::string module, std::string item, std::string rule, Count elements = Count{},
                                     std::optional<DType> dtype = std::nullopt, std::int64_t multiplier = 1);

}  // namespace moemem
