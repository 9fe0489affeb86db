// The evaluation cache's hash table (src/analyze/flat_table.hpp): every stored key is found with
// its value across growth, absent keys are not, and colliding hashes probe on.
#include <cstddef>
#include <cstdint>

#include <gtest/gtest.h>

#include "../../src/analyze/flat_table.hpp"

namespace {

struct Identity {
  std::size_t operator()(std::int64_t k) const noexcept { return static_cast<std::size_t>(k); }
};
struct Constant {  // every key in one home slot: only probing tells them apart
  std::size_t operator()(std::int64_t) const noexcept { return 7; }
};

template <class Hash>
void check_table() {
  moemem::detail::FlatTable<std::int64_t, std::int64_t, Hash> t;
  EXPECT_EQ(t.find(0), nullptr);
  constexpr std::int64_t n = 1000;  // past several doublings of the initial 64 slots
  for (std::int64_t k = 0; k < n; ++k) {
    EXPECT_EQ(t.insert(3 * k, k * k), k * k);
    ASSERT_NE(t.find(3 * k), nullptr);
  }
  EXPECT_EQ(t.size(), static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t* v = t.find(3 * k);
    ASSERT_NE(v, nullptr) << k;
    EXPECT_EQ(*v, k * k);
    EXPECT_EQ(t.find(3 * k + 1), nullptr);
  }
  *t.find(0) = 42;  // values are stored, not copied out
  EXPECT_EQ(*t.find(0), 42);
}

TEST(FlatTable, FindsEveryKeyAcrossGrowth) { check_table<Identity>(); }
TEST(FlatTable, CollidingHashesProbeOn) { check_table<Constant>(); }

}  // namespace
