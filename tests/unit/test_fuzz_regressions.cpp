// Every input the fuzzers found to crash, saved in tests/data/fuzz/<target>/, runs through the
// same function as the fuzzer (fuzz/targets.hpp): it must be accepted or refused with InputError;
// an escaping exception fails here, and a sanitizer report fails the sanitize build.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "targets.hpp"

namespace {

TEST(FuzzRegressions, EverySavedInputIsAcceptedOrRefusedByName) {
  int inputs = 0;
  for (const auto& target : moemem::fuzz::targets()) {
    const std::filesystem::path dir = std::filesystem::path(MOEMEM_FUZZ_DATA_DIR) / target.name;
    ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
    for (const auto& file : std::filesystem::directory_iterator(dir)) {
      if (!file.is_regular_file() || file.path().filename() == "README.md") continue;
      std::ifstream in(file.path(), std::ios::binary);
      const std::string input((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      SCOPED_TRACE(file.path().string());
      EXPECT_NO_THROW(target.run(input));
      ++inputs;
    }
  }
  EXPECT_GT(inputs, 0);
}

}  // namespace
