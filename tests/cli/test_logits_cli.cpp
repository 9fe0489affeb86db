// The last stage's loss and MTP logits through `moemem analyze` (issue 3): --logits-dtype and
// the vocabulary padding (--make-vocab-size-divisible-by) on DeepSeek-V3.
// Expected values are restated from the rules (the issue, Megatron-LM, the DualPipe README),
// and relations between runs, never copied from moemem's output.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/pipeline_cli_helpers.hpp"

namespace {

using nlohmann::json;
using moemem::test::pipeline_cli::Args;
using moemem::test::pipeline_cli::concat;
using moemem::test::pipeline_cli::analyze_json;
using moemem::test::pipeline_cli::u64;

// The last stage's loss and MTP logits through the CLI: with --logits-dtype bf16 each of the two
// (main head, MTP depth 1) shrinks by b*s*V/tp*2 bytes per micro-batch; only stage 15 changes.
// tp 2: V = 129,280 (a multiple of 256); tp 4: padded to 129,536 (253 x 512).
TEST(PipelineCli, LogitsDtypeOnTheLastStage) {
  for (const char* tp : {"2", "4"}) {
    const Args base = {"analyze", "--model", "deepseek-v3", "--tp", tp, "--pp", "16", "--ep", "8", "--dp", "32", "--sp"};
    const json fp32 = analyze_json(base);
    const json bf16 = analyze_json(concat(base, {"--logits-dtype", "bf16"}));
    ASSERT_FALSE(fp32.is_null() || bf16.is_null());
    const std::uint64_t vocab = std::string(tp) == "2" ? 129280 : 129536;
    EXPECT_EQ(u64(fp32.at("training").at("padded_vocab")), vocab);
    const std::uint64_t per_rank = vocab / std::stoull(tp);
    for (std::size_t p = 0; p < 16; ++p) {
      const std::uint64_t a = u64(fp32.at("stages")[p].at("activations_per_microbatch"));
      const std::uint64_t b = u64(bf16.at("stages")[p].at("activations_per_microbatch"));
      EXPECT_EQ(a - b, p == 15 ? 2 * 4096 * per_rank * 2 : 0) << "tp " << tp << " stage " << p;
    }
    // The loss's backward on the last stage: fp32 logits are cast back to bf16 for the head
    // (4096 x V/tp x 2 bytes); bf16 logits take their gradient in place (TE's fused cross
    // entropy before 2.18), so nothing.
    EXPECT_EQ(u64(fp32.at("stages")[15].at("loss_transient")), 4096 * per_rank * 2) << tp;
    EXPECT_EQ(u64(bf16.at("stages")[15].at("loss_transient")), 0u) << tp;
    // Without padding (--make-vocab-size-divisible-by 1) the head has 129,280 rows at any tp.
    const json unpadded = analyze_json(concat(base, {"--make-vocab-size-divisible-by", "1"}));
    ASSERT_FALSE(unpadded.is_null());
    EXPECT_EQ(u64(unpadded.at("training").at("padded_vocab")), 129280u);
    const std::uint64_t fewer_rows = vocab / std::stoull(tp) - 129280 / std::stoull(tp);
    // Per micro-batch: two fp32 logits of 4096 tokens lose fewer_rows columns each.
    EXPECT_EQ(u64(fp32.at("stages")[15].at("activations_per_microbatch")) -
                  u64(unpadded.at("stages")[15].at("activations_per_microbatch")),
              2 * 4096 * fewer_rows * 4)
        << tp;
  }
}

}  // namespace
