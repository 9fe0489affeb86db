// A grow-only hash table for the per-thread evaluation cache (EvalCache): entries in one vector,
// found through a power-of-two array of 32-bit slots with linear probing. Search looks a chunk's
// costs up about a million times in a DeepSeek-V3 search; std::unordered_map's nodes made each
// lookup a chain of cache misses (recomputing every visited node's hash, its codes not being
// cached) and its teardown a quarter of a million frees. Entries are never erased; a pointer to
// one is valid until the next insertion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace moemem::detail {

template <class Key, class Value, class Hash>
class FlatTable {
 public:
  // The value stored under `key`, or nullptr.
  [[nodiscard]] Value* find(const Key& key) {
    if (slots_.empty()) return nullptr;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = home(key);; i = (i + 1) & mask) {
      const std::uint32_t s = slots_[i];
      if (s == 0) return nullptr;
      if (entries_[s - 1].first == key) return &entries_[s - 1].second;
    }
  }

  // Stores `value` under `key`, which must not be present; returns the stored value.
  Value& insert(const Key& key, Value value) {
    if (2 * (entries_.size() + 1) > slots_.size()) grow();
    entries_.emplace_back(key, std::move(value));
    place(entries_.size() - 1);
    return entries_.back().second;
  }

  [[nodiscard]] std::size_t size() const { return entries_.size(); }

 private:
  // Fibonacci hashing: the high bits of the product spread keys that differ in low bits only.
  [[nodiscard]] std::size_t home(const Key& key) const {
    const std::uint64_t h = static_cast<std::uint64_t>(Hash{}(key)) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h >> shift_);
  }
  void place(std::size_t entry) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = home(entries_[entry].first);
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = static_cast<std::uint32_t>(entry + 1);
  }
  void grow() {
    const std::size_t n = slots_.empty() ? 64 : 2 * slots_.size();
    slots_.assign(n, 0);
    shift_ = 64;
    for (std::size_t k = n; k > 1; k >>= 1) --shift_;
    for (std::size_t e = 0; e < entries_.size(); ++e) place(e);
  }

  std::vector<std::pair<Key, Value>> entries_;
  std::vector<std::uint32_t> slots_;  // 0: empty; otherwise an index into entries_ plus one
  unsigned shift_ = 64;
};

}  // namespace moemem::detail
