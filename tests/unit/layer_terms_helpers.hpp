// Shared by the tests that work one layer's activation terms out by hand (test_dsa_activations,
// test_gdn_activations, test_mamba_activations).
#pragma once

#include <cstdint>

#include "moemem/training.hpp"

namespace moemem::test {

// One sequence of `seq` tokens per micro-batch, no dropout (so no mask terms), the rest defaults.
inline TrainingConfig hand_training(std::int64_t seq) {
  TrainingConfig t;
  t.micro_batch = 1;
  t.seq_len = seq;
  t.hidden_dropout = 0;
  t.attention_dropout = 0;
  return t;
}

}  // namespace moemem::test
