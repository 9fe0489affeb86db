// --megatron-version (issue 12, defect 8) and --moe-shared-expert-overlap: what older Megatron-Core
// releases and the shared-expert overlap keep in MoE layers. Sizes by hand from the formulas in
// docs/formulas.md (Mixtral 8x7B: h 4096, expert ffn 14336, top-2, 32 MoE layers; Moonlight-16B:
// h 2048, 26 MoE layers).
#include <cstdint>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/activations_cli_helpers.hpp"
#include "cli/run_cli.hpp"

namespace {

using moemem::test::Args;
using moemem::test::concat;
using moemem::test::run_cli;
using moemem::test::activations_cli::explain_json;
using moemem::test::activations_cli::items_of;

// Mixtral on one pipeline stage (32 MoE layers, one micro-batch in flight), no TP: 4096 tokens.
Args mixtral(const Args& extra) {
  return concat({"--model", "mixtral-8x7b", "--ep", "8", "--dp", "8", "--seq-len", "4096", "--micro-batch", "1"}, extra);
}

TEST(MegatronVersion, BeforeThirteenUnpermuteKeepsTheUnweightedExpertOutput) {
  const auto current = items_of(explain_json(mixtral({}), 0), "activations");
  const auto v12 = items_of(explain_json(mixtral({"--megatron-version", "0.12"}), 0), "activations");
  const auto v06 = items_of(explain_json(mixtral({"--megatron-version", "0.6"}), 0), "activations");
  // tokens x top_k x h x 2 bytes per layer: 32 x 4096 x 2 x 4096 x 2 = 2 GiB; fp32 probs 32 x 4096 x 2 x 4.
  EXPECT_EQ(v12.at("experts.unweighted_output (unpermute input)"), 32ull * 4096 * 2 * 4096 * 2);
  EXPECT_EQ(v12.at("unpermute.probs"), 32ull * 4096 * 2 * 4);
  EXPECT_FALSE(v12.contains("experts.probs"));  // the activation takes no probabilities before 0.13
  EXPECT_EQ(current.at("experts.probs"), 32ull * 4096 * 2 * 4);  // R = 8192 fp32 per layer
  EXPECT_FALSE(current.contains("experts.unweighted_output (unpermute input)"));
  // 0.6's unfused glu also keeps silu's output: R x ffn = 8192 x 14336 x 2 bytes per layer.
  EXPECT_EQ(v06.at("experts.silu_output"), 32ull * 8192 * 14336 * 2);
  EXPECT_FALSE(v12.contains("experts.silu_output"));
}

TEST(MegatronVersion, BadValuesAndMoeActBeforeThirteenAreRefused) {
  const auto bad = run_cli(concat({"analyze"}, mixtral({"--megatron-version", "0.9"})));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--megatron-version: '0.9' is not accepted"), std::string::npos) << bad.err;
  const auto act = run_cli(concat({"analyze"}, mixtral({"--megatron-version", "0.12", "--recompute-modules", "moe_act"})));
  EXPECT_EQ(act.code, 2);
  EXPECT_NE(act.err.find("Megatron-Core 0.13 or later"), std::string::npos) << act.err;
  EXPECT_EQ(run_cli({"analyze", "--model", "llama-3.1-8b", "--profile", "torchtitan", "--dp", "8", "--megatron-version", "0.6"}).code, 2);
}

TEST(SharedExpertOverlap, KeepsTheGatheredFullSequenceInput) {
  const Args moon = {"--model", "moonlight-16b", "--tp", "2", "--sp", "--ep", "8", "--etp", "1", "--dp", "4",
                     "--seq-len", "4096", "--micro-batch", "1"};
  const auto with = items_of(explain_json(concat(moon, {"--moe-shared-expert-overlap"}), 0), "activations");
  // 26 MoE layers x 4096 tokens x 2048 x 2 bytes = 436,207,616 (0.44 GB).
  EXPECT_EQ(with.at("shared.gathered_input (overlap)"), 26ull * 4096 * 2048 * 2);
  EXPECT_FALSE(items_of(explain_json(moon, 0), "activations").contains("shared.gathered_input (overlap)"));
  const auto dense = run_cli({"analyze", "--model", "llama-3.1-8b", "--moe-shared-expert-overlap"});
  EXPECT_EQ(dense.code, 2);
  EXPECT_NE(dense.err.find("--moe-shared-expert-overlap"), std::string::npos) << dense.err;
}

}  // namespace
