// Tied embeddings under pipeline parallelism (Megatron-Core): GPTModel skips the output layer's
// weight only where pre_process holds the embedding (gpt_model.py, skip_weight_param_allocation =
// pre_process and share_embeddings_and_output_weights), so a loss stage without the embedding
// allocates and trains its own vocab/tp x h copy (language_module.py zeroes it and the embedding
// group all-reduces its gradient). Its parameters, gradients and optimizer states are therefore
// those of an untied head: the same launch with and without --untie-embeddings-and-output-weights
// holds the same on every stage.
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/run_cli.hpp"

namespace {

using moemem::test::run_cli;

nlohmann::json analyze_script(const std::string& name, const std::string& extra) {
  const std::string path = ::testing::TempDir() + "/" + name;
  {
    std::ofstream f(path);
    f << "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --ffn-hidden-size 11008 "
         "--num-attention-heads 32 --swiglu --normalization RMSNorm --position-embedding-type rope "
         "--disable-bias-linear --vocab-size 32000 --seq-length 4096 --micro-batch-size 1 --global-batch-size 32 "
         "--bf16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --sequence-parallel "
         "--use-distributed-optimizer "
      << extra << "\n";
  }
  const auto r = run_cli({"analyze", "--megatron-args", path, "--format", "json"});
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(TiedEmbeddings, TheLossStageHoldsItsOwnOutputWeight) {
  const auto tied = analyze_script("tied.sh", "");
  const auto untied = analyze_script("untied.sh", "--untie-embeddings-and-output-weights");
  // The checkpoint differs by the head (32000 x 4096), the stages not at all.
  EXPECT_EQ(untied.at("model").at("total_params").get<std::int64_t>() - tied.at("model").at("total_params").get<std::int64_t>(),
            32000 * 4096);
  ASSERT_EQ(tied.at("stages").size(), 4u);
  for (std::size_t s = 0; s < 4; ++s) {
    for (const char* k : {"weights", "gradients", "optimizer"}) {
      EXPECT_EQ(tied.at("stages").at(s).at("bytes").at(k), untied.at("stages").at(s).at("bytes").at(k)) << s << " " << k;
    }
  }
  // vocab 32000 padded to 128 x tp = 256: 32000 already a multiple; 32000/2 x 4096 on the last stage.
  const auto last = tied.at("stages").at(3).at("params").at("by_module").at("output_head").get<std::int64_t>();
  EXPECT_EQ(last, 16000 * 4096 + 4096);  // the copy and the final norm
}

}  // namespace
