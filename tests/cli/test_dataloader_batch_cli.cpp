// The data loader's batch under the megatron profile: Megatron-LM's get_batch hands the ranks that
// hold the embedding or the loss their micro-batch's tensors, and by default a [b, 1, s, s]
// boolean attention mask (create_attention_mask_in_dataloader), which get_batch_on_this_cp_rank
// cuts to this rank's s/cp query rows. Expected sizes are counted by hand from those shapes.
#include <cstdint>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/pipeline_cli_helpers.hpp"
#include "cli/run_cli.hpp"

namespace {

using nlohmann::json;
using moemem::test::Args;
using moemem::test::concat;
using moemem::test::pipeline_cli::analyze_json;
using moemem::test::pipeline_cli::expect_exit_2;
using moemem::test::pipeline_cli::u64;

constexpr std::uint64_t kSeq = 131072;

Args llama(const Args& extra, std::uint64_t seq = kSeq) {
  return concat({"analyze", "--model", "llama-3.1-8b", "--tp", "8", "--micro-batch", "1", "--seq-len", std::to_string(seq),
                 "--recompute", "full", "--hidden-dropout", "0", "--attention-dropout", "0"},
                extra);
}

TEST(DataloaderBatchCli, OneStageHoldsTheMaskAndTheBatchOfTheMicroBatchInForward) {
  const json with = analyze_json(llama({}));
  const json without = analyze_json(llama({"--no-create-attention-mask-in-dataloader"}));
  ASSERT_FALSE(with.is_null());
  ASSERT_FALSE(without.is_null());
  const auto& s = with.at("stages").at(0);
  const auto& n = without.at("stages").at(0);
  // One stage holds the embedding and the loss: position ids and labels (int64), loss mask (fp32),
  // each 1 x s, and the 1 x 1 x s x s mask of one byte per element.
  const std::uint64_t ids = kSeq * (8 + 8 + 4);
  EXPECT_EQ(u64(s.at("input_batch")), kSeq * kSeq + ids);
  EXPECT_EQ(u64(n.at("input_batch")), ids);
  // The 16 GiB mask beside one layer's forward is the stage's largest moment at this length.
  EXPECT_GT(u64(s.at("input_batch_transient")), u64(s.at("recompute_transient")));
  EXPECT_GT(u64(s.at("bytes").at("activations")), u64(n.at("bytes").at("activations")));
  EXPECT_EQ(u64(s.at("bytes").at("activations")) - u64(n.at("bytes").at("activations")),
            u64(s.at("input_batch_transient")) -
                std::max({u64(n.at("recompute_transient")), u64(n.at("loss_transient")), u64(n.at("input_batch_transient"))}));
  // Nothing else changes.
  for (const char* f : {"weights", "gradients", "optimizer"}) EXPECT_EQ(s.at("bytes").at(f), n.at("bytes").at(f)) << f;
}

TEST(DataloaderBatchCli, ContextParallelismKeepsTheRanksQueryRowsAfterTheWholeMaskArrived) {
  const json j = analyze_json(llama({"--cp", "4"}));
  ASSERT_FALSE(j.is_null());
  const auto& s = j.at("stages").at(0);
  // In forward: [1, 1, s/4, s] and the ids' s/4 slices.
  EXPECT_EQ(u64(s.at("input_batch")), kSeq / 4 * kSeq + kSeq / 4 * (8 + 8 + 4));
  // Before the split the whole batch is there; the micro-batch's own activations are not yet: the
  // moment is at least the whole mask less them, and at least the split batch.
  EXPECT_GE(u64(s.at("input_batch_transient")), u64(s.at("input_batch")));
  EXPECT_GE(u64(s.at("input_batch_transient")) + u64(s.at("activations_per_microbatch")), kSeq * kSeq);
}

TEST(DataloaderBatchCli, MiddleStagesReceiveNoBatch) {
  const json j = analyze_json(llama({"--pp", "4"}, 8192));
  ASSERT_FALSE(j.is_null());
  const std::uint64_t s = 8192;
  EXPECT_EQ(u64(j.at("stages").at(0).at("input_batch")), s * s + s * 8);      // position ids
  EXPECT_EQ(u64(j.at("stages").at(1).at("input_batch")), 0u);
  EXPECT_EQ(u64(j.at("stages").at(2).at("input_batch")), 0u);
  EXPECT_EQ(u64(j.at("stages").at(3).at("input_batch")), s * s + s * (8 + 4));  // labels, loss mask
}

TEST(DataloaderBatchCli, LaunchScriptFlagIsRead) {
  const std::string path = ::testing::TempDir() + "/no-mask.sh";
  {
    std::ofstream f(path);
    f << "torchrun pretrain_gpt.py --num-layers 2 --hidden-size 1024 --num-attention-heads 8 --seq-length 8192 "
         "--max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 "
         "--no-create-attention-mask-in-dataloader\n";
  }
  const json j = analyze_json({"analyze", "--megatron-args", path, "--dp", "8"});
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(u64(j.at("stages").at(0).at("input_batch")), 8192u * (8 + 8 + 4));
}

TEST(DataloaderBatchCli, OtherProfilesRefuseTheFlag) {
  for (const char* profile : {"torchtitan", "paper"}) {
    expect_exit_2({"analyze", "--model", "llama-3.1-8b", "--profile", profile, "--no-create-attention-mask-in-dataloader"},
                  {"--no-create-attention-mask-in-dataloader", "megatron"});
  }
}

}  // namespace

namespace {

// While the batch is split for context parallelism, the slices are made beside the whole tensors:
// at that moment the stage holds the whole batch, its slices and the whole token ids.
TEST(DataloaderBatchCli, TheWholeBatchIsHeldBesideItsSlices) {
  const json j = analyze_json(llama({"--cp", "8"}, 1024 * 1024 / 8));
  ASSERT_FALSE(j.is_null());
  const auto& s = j.at("stages").at(0);
  const std::uint64_t seq = 1024 * 1024 / 8, slice = seq / 8;
  const std::uint64_t whole = seq * seq + seq * 20 + slice * seq + slice * 20 + seq * 8;
  EXPECT_GE(u64(s.at("input_batch_transient")) + u64(s.at("activations_per_microbatch")), whole);
  // search takes the flag too, and its commands carry it.
  const auto r = moemem::test::run_cli({"search", "--model", "llama-3.1-8b", "--gpus", "8", "--gpu", "h200-141g",
                                        "--global-batch", "8", "--seq-len", "8192", "--threads", "2", "--top", "1",
                                        "--no-create-attention-mask-in-dataloader", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json found = json::parse(r.out);
  ASSERT_FALSE(found.at("layouts").empty());
  EXPECT_NE(found.at("layouts").at(0).at("command").get<std::string>().find("--no-create-attention-mask-in-dataloader"),
            std::string::npos);
}

}  // namespace
