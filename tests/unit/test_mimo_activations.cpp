// MiMo-V2-Flash's two attention shapes under the megatron profile (issue 14): its full-attention and
// sliding-window layers are layer classes of their own (model.hpp class_at), each sized by its keys,
// with value heads narrower than query/key heads. Worked out by hand from Megatron-Core's fused
// attention (shapes x dtype sizes).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/run_cli.hpp"
#include "moemem/activation.hpp"
#include "moemem/analyze.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/profile.hpp"
#include "moemem/training.hpp"
#include "unit/inventory_helpers.hpp"
#include "unit/layer_terms_helpers.hpp"

namespace {

using namespace moemem;
using namespace moemem::test;

std::uint64_t attention_bytes(const ModelSpec& m, MixerKind mixer) {
  ParallelConfig p;
  p.dp = 8;
  const TrainingConfig t = hand_training(4096);
  std::uint64_t sum = 0;
  for (const auto& term : layer_activation_terms(get_profile("megatron"), m, resolve_layout(m, p), t, LayerKind::dense, mixer)) {
    if (std::string(term.name).rfind("attn.", 0) == 0 && !term.transient) sum += term.bytes().value();
  }
  return sum;
}

}  // namespace

// h 4096, 64 query heads of 192 (q/k) and 128 (v) in both shapes; key/value heads 4 (full) and 8
// (sliding-window). tp 1, b 1, s 4096, flash attention, bf16:
//   layer input, norm output   2 x 4096 x 4096 x 2      = 67,108,864
//   q                          4096 x 64 x 192 x 2      = 100,663,296
//   k                          4096 x 4|8 x 192 x 2     = 6,291,456 | 12,582,912
//   v                          4096 x 4|8 x 128 x 2     = 4,194,304 | 8,388,608
//   log-sum-exp (fp32)         64 x 4096 x 4            = 1,048,576
//   context (o_proj input)     4096 x 64 x 128 x 2      = 67,108,864
//   full 246,415,360; sliding-window 256,901,120
TEST(MimoActivations, EachAttentionShapeSizedByItsOwnKeys) {
  const ModelSpec m = load_model("mimo-v2-flash");
  EXPECT_EQ(attention_bytes(m, MixerKind::attention), 246415360u);
  EXPECT_EQ(attention_bytes(m, MixerKind::sliding_attention), 256901120u);
  // Layer 0 is full attention and dense (hybrid_layer_pattern 0, moe_layer_freq 0); the MTP layers
  // are sliding-window with a dense MLP.
  EXPECT_EQ(m.class_at(0), layer_class(LayerKind::dense, MixerKind::attention));
  EXPECT_EQ(m.mtp_class(), layer_class(LayerKind::dense, MixerKind::sliding_attention));
}

TEST(MimoActivations, AnalysesUnderMegatronAndRefusesWhatItCannotSize) {
  const auto e = run_cli({"explain", "--stage", "1", "--model", "mimo-v2-flash", "--ep", "8", "--pp", "4", "--dp", "8",
                          "--seq-len", "4096", "--global-batch", "64", "--hidden-dropout", "0", "--attention-dropout", "0"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("moe sliding-window"), std::string::npos) << e.out;
  const auto cp = run_cli({"analyze", "--model", "mimo-v2-flash", "--cp", "2", "--ep", "8", "--dp", "8"});
  EXPECT_EQ(cp.code, 2);
  EXPECT_NE(cp.err.find("--cp"), std::string::npos) << cp.err;
}
