// What the model-type tests share: a tensor by name, per-role and per-module parameter totals,
// the text of a config file under tests/data/configs, and the check that a config is refused.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"

namespace moemem::test {

// Tensors a checkpoint stores: each routed-expert entry counts once per expert.
inline std::uint64_t tensor_count(const Inventory& inv) {
  std::uint64_t n = 0;
  for (const auto& t : inv.tensors) n += static_cast<std::uint64_t>(t.copies);
  return n;
}

inline std::string config_path(const std::string& name) {
  return std::string(MOEMEM_TEST_DATA_DIR) + "/configs/" + name + ".config.json";
}

inline std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline const Tensor& tensor(const Inventory& inv, const std::string& name) {
  const auto it = std::find_if(inv.tensors.begin(), inv.tensors.end(), [&](const Tensor& t) { return t.name == name; });
  if (it == inv.tensors.end()) throw std::runtime_error("no tensor " + name);
  return *it;
}

inline std::uint64_t role_total(const Inventory& inv, Role r) {
  std::uint64_t n = 0;
  for (const auto& t : inv.tensors) {
    if (t.role == r) n += t.params().value();
  }
  return n;
}

inline std::uint64_t module_total(const Inventory& inv, Module m) {
  std::uint64_t n = 0;
  for (const auto& t : inv.tensors) {
    if (t.module == m) n += t.params().value();
  }
  return n;
}

// The config text is refused, and the message names `word` (the field).
inline void expect_error(const std::string& json_text, const std::string& word) {
  try {
    (void)parse_hf_config(json_text, "bad.json");
    FAIL() << "accepted: " << json_text;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

}  // namespace moemem::test
