// The Megatron script reader as a library (issue 11): parse_megatron_args gives typed settings,
// each with the script line and flag it came from, and apply_megatron_settings puts them onto a
// Request under the settings given otherwise. The scripts are tests/data/megatron/*.
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "moemem/errors.hpp"
#include "moemem/megatron_args.hpp"
#include "moemem/scenario.hpp"

namespace {

using namespace moemem;

const std::string kDir = std::string(MOEMEM_TEST_DATA_DIR) + "/megatron/";
const std::string kDeepSeek = "deepseek_v3_tp2_pp8_vpp4_ep64.sh";
const std::string kLlama = "llama3_70b_tp8_pp4.args";

MegatronSettings read_script(const std::string& name) {
  std::ifstream in(kDir + name, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_megatron_args(ss.str(), name);
}

// The setting is present with this value, from this line and flag text.
template <class T>
void expect_setting(const Setting<T>& s, const T& value, std::int64_t line, const std::string& text) {
  ASSERT_TRUE(s.has_value()) << text;
  EXPECT_EQ(s->value, value) << text;
  EXPECT_EQ(s->from.line, line) << text;
  EXPECT_EQ(s->from.text, text);
}

TEST(MegatronSettings, DeepSeekScriptLayoutWithItsLines) {
  const MegatronSettings s = read_script(kDeepSeek);
  // Variables (${TP}) are substituted: the text is what the launcher passes on.
  expect_setting<std::int64_t>(s.tp, 2, 51, "--tensor-model-parallel-size 2");
  expect_setting<std::int64_t>(s.pp, 8, 52, "--pipeline-model-parallel-size 8");
  expect_setting<std::int64_t>(s.vpp, 4, 53, "--num-virtual-stages-per-pipeline-rank 4");
  expect_setting<std::string>(s.pipeline_layout, "Et|(tt|)*30mL", 54, "--pipeline-model-parallel-layout Et|(tt|)*30mL");
  expect_setting<std::int64_t>(s.ep, 64, 55, "--expert-model-parallel-size 64");
  expect_setting<std::int64_t>(s.etp, 1, 56, "--expert-tensor-parallel-size 1");
  expect_setting<std::int64_t>(s.cp, 1, 57, "--context-parallel-size 1");
  expect_setting(s.sp, true, 58, "--sequence-parallel");
  expect_setting(s.distributed_optimizer, true, 59, "--use-distributed-optimizer");
  // torchrun --nproc-per-node 8 --nnodes ${NNODES:-128}: 1,024 GPUs.
  expect_setting<std::int64_t>(s.world_size, 1024, 79, "--nproc-per-node 8");
  EXPECT_FALSE(s.first_stage_layers || s.last_stage_layers || s.account_for_embedding || s.account_for_loss);
  EXPECT_EQ(s.world_size->from.describe(), "line 79: --nproc-per-node 8");
}

TEST(MegatronSettings, DeepSeekScriptTrainingWithItsLines) {
  const MegatronSettings s = read_script(kDeepSeek);
  expect_setting<std::int64_t>(s.micro_batch, 1, 65, "--micro-batch-size 1");
  expect_setting<std::int64_t>(s.global_batch, 8192, 66, "--global-batch-size 8192");
  expect_setting<std::int64_t>(s.seq_len, 4096, 67, "--seq-length 4096");
  expect_setting(s.main_grads_dtype, DType::bf16, 70, "--main-grads-dtype bf16");
  expect_setting(s.exp_avg_dtype, DType::bf16, 71, "--exp-avg-dtype bf16");
  expect_setting(s.exp_avg_sq_dtype, DType::bf16, 72, "--exp-avg-sq-dtype bf16");
  expect_setting(s.recompute, Recompute::selective, 73, "--recompute-granularity selective");
  expect_setting<std::uint16_t>(s.recompute_modules, kRecomputeMlaUpProj | kRecomputeMlp, 74,
                                "--recompute-modules mla_up_proj mlp");
  expect_setting(s.attention, AttentionKernel::flash, 76, "--attention-backend fused");
  expect_setting<std::int64_t>(s.vocab_multiple, 128, 30, "--make-vocab-size-divisible-by 128");
  expect_setting<std::int64_t>(s.mtp, 1, 31, "--mtp-num-layers 1");
  EXPECT_EQ(s.recompute->from.describe(), "line 73: --recompute-granularity selective");
  // --bf16 and the alltoall dispatcher are moemem's defaults: nothing to set.
  EXPECT_FALSE(s.params_dtype || s.main_params_dtype || s.fp8 || s.dispatcher || s.moe_capacity_factor);
  EXPECT_FALSE(s.recompute_method || s.recompute_num_layers);
  EXPECT_TRUE(s.repeated.empty());
}

TEST(MegatronSettings, DeepSeekScriptModelAndIgnoredFlags) {
  const MegatronSettings s = read_script(kDeepSeek);
  ASSERT_TRUE(s.model.has_value());
  EXPECT_EQ(s.model->name, "megatron-args:" + kDeepSeek);
  EXPECT_EQ(s.model->num_layers, 61);
  EXPECT_EQ(s.model->attention, AttentionKind::mla);
  EXPECT_EQ(s.model->moe.num_routed_experts, 256);
  EXPECT_EQ(s.model->mtp_layers, 1);
  EXPECT_EQ(s.model->layer_kinds[2], LayerKind::dense);
  EXPECT_EQ(s.model->layer_kinds[3], LayerKind::moe);
  ASSERT_FALSE(s.ignored.empty());
  EXPECT_EQ(s.ignored.front(), "--rotary-scaling-factor 40");
  EXPECT_EQ(s.ignored.back(), "--lr 3.9e-6");
}

TEST(MegatronSettings, LlamaArgumentFileWithItsLines) {
  const MegatronSettings s = read_script(kLlama);
  expect_setting<std::int64_t>(s.tp, 8, 6, "--tensor-model-parallel-size 8");
  expect_setting<std::int64_t>(s.pp, 4, 6, "--pipeline-model-parallel-size 4");
  expect_setting(s.sp, true, 6, "--sequence-parallel");
  expect_setting<std::int64_t>(s.micro_batch, 1, 7, "--micro-batch-size 1");
  expect_setting<std::int64_t>(s.global_batch, 512, 7, "--global-batch-size 512");
  expect_setting<std::int64_t>(s.seq_len, 8192, 7, "--seq-length 8192");
  expect_setting(s.distributed_optimizer, true, 8, "--use-distributed-optimizer");
  expect_setting(s.recompute, Recompute::full, 8, "--recompute-granularity full");
  expect_setting(s.recompute_method, RecomputeMethod::uniform, 8, "--recompute-method uniform");
  expect_setting<std::int64_t>(s.recompute_num_layers, 1, 8, "--recompute-num-layers 1");
  expect_setting<std::int64_t>(s.vocab_multiple, 128, 5, "--make-vocab-size-divisible-by 128");
  EXPECT_FALSE(s.world_size || s.vpp || s.ep || s.attention);
  ASSERT_TRUE(s.model.has_value());
  EXPECT_EQ(s.model->num_kv_heads, 8);
  EXPECT_TRUE(s.ignored.empty());
}

TEST(MegatronSettings, ScriptSettingsFillTheRequest) {
  Request r;
  apply_megatron_settings(read_script(kDeepSeek), r, {});
  EXPECT_EQ(r.parallel.tp, 2);
  EXPECT_EQ(r.parallel.pp, 8);
  EXPECT_EQ(r.parallel.vpp, 4);
  EXPECT_EQ(r.parallel.ep, 64);
  EXPECT_EQ(r.parallel.dp, 64);  // 1,024 GPUs / (tp 2 x pp 8 x cp 1)
  EXPECT_TRUE(r.parallel.sp);
  EXPECT_EQ(r.parallel.pipeline_layout, "Et|(tt|)*30mL");
  EXPECT_EQ(r.training.global_batch, 8192);
  EXPECT_EQ(r.training.recompute, Recompute::selective);
  EXPECT_EQ(r.training.recompute_modules, kRecomputeMlaUpProj | kRecomputeMlp);
  EXPECT_TRUE(r.training.distributed_optimizer);
  EXPECT_EQ(r.training.exp_avg_dtype, DType::bf16);
  EXPECT_EQ(r.training.attention, AttentionKernel::flash);
  EXPECT_EQ(r.model.mtp, 1);
  ASSERT_TRUE(r.model.spec.has_value());
  EXPECT_EQ(r.model.spec->num_layers, 61);
  const Scenario sc = make_scenario(r);
  EXPECT_EQ(sc.layout.world_size, 1024);
  EXPECT_EQ(sc.layout.chunks.size(), 32u);
}

TEST(MegatronSettings, SettingsGivenInlineWin) {
  Request r;
  r.parallel.tp = 4;
  r.training.global_batch = 1024;
  r.training.recompute = Recompute::full;
  r.model.source = "deepseek-v3";
  apply_megatron_settings(read_script(kDeepSeek), r, {"--tp", "--global-batch", "--recompute", "--model"});
  EXPECT_EQ(r.parallel.tp, 4);
  EXPECT_EQ(r.training.global_batch, 1024);
  EXPECT_EQ(r.training.recompute, Recompute::full);
  EXPECT_FALSE(r.model.spec.has_value());  // the named model, not the script's
  EXPECT_EQ(r.parallel.pp, 8);             // not given: the script's
  // dp from the world size with the inline tp: 1,024 / (4 x 8).
  EXPECT_EQ(r.parallel.dp, 32);

  Request d;
  d.parallel.dp = 16;
  apply_megatron_settings(read_script(kDeepSeek), d, {"--dp"});
  EXPECT_EQ(d.parallel.dp, 16);
}

TEST(MegatronSettings, WorldSizeMustDivide) {
  Request r;
  r.parallel.tp = 3;
  try {
    apply_megatron_settings(read_script(kDeepSeek), r, {"--tp"});
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--megatron-args world size: '1024' is not accepted; expected a multiple of tp*pp*cp = 24");
  }
}

// Lines of words written as --flag=value, after continuations, and of quoted values that span
// lines: each setting is found on the line its flag starts.
TEST(MegatronSettings, ProvenanceFollowsTheShellText) {
  const std::string text =
      "#!/bin/bash\n"
      "MB=2\n"
      "torchrun --nproc_per_node=4 --nnodes=2 pretrain_gpt.py \\\n"
      "  --micro-batch-size=$MB \\\n"
      "  --pipeline-model-parallel-layout \"Et|\n"
      "tL\" --tensor-model-parallel-size 2  # a comment --context-parallel-size 8\n"
      "  --fp16 --sequence-parallel\n";
  const MegatronSettings s = parse_megatron_args(text, "inline.sh");
  expect_setting<std::int64_t>(s.world_size, 8, 3, "--nproc_per_node 4");
  expect_setting<std::int64_t>(s.micro_batch, 2, 4, "--micro-batch-size 2");
  expect_setting<std::string>(s.pipeline_layout, "Et|\ntL", 5, "--pipeline-model-parallel-layout Et|\ntL");
  expect_setting<std::int64_t>(s.tp, 2, 6, "--tensor-model-parallel-size 2");
  EXPECT_FALSE(s.cp.has_value());
  expect_setting(s.params_dtype, DType::fp16, 7, "--fp16");
  expect_setting(s.sp, true, 7, "--sequence-parallel");
}

TEST(MegatronSettings, DerivedSettingsNameTheFlagTheyComeFrom) {
  const std::string text =
      "--num-layers 8 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 128\n"
      "--swiglu --disable-bias-linear --num-experts 4 --moe-router-topk 2\n"
      "--pipeline-model-parallel-size 2\n"
      "--num-layers-per-virtual-pipeline-stage 2\n"
      "--fp8-format hybrid\n"
      "--fp8-recipe blockwise\n"
      "--attention-backend unfused --moe-token-dispatcher-type flex --moe-enable-deepep\n"
      "--moe-expert-capacity-factor 1.5\n";
  const MegatronSettings s = parse_megatron_args(text, "derived.args");
  expect_setting<std::int64_t>(s.vpp, 2, 4, "--num-layers-per-virtual-pipeline-stage 2");  // 8 / (2 x 2)
  expect_setting(s.fp8, Fp8Recipe::blockwise, 6, "--fp8-recipe blockwise");
  expect_setting(s.attention, AttentionKernel::eager, 7, "--attention-backend unfused");
  expect_setting(s.dispatcher, Dispatcher::deepep, 7, "--moe-token-dispatcher-type flex");
  expect_setting(s.moe_capacity_factor, 1.5, 8, "--moe-expert-capacity-factor 1.5");
  // Without a recipe FP8 is delayed scaling (Megatron's default), from --fp8-format.
  const MegatronSettings d = parse_megatron_args("\n--fp8-format e4m3\n", "fp8.args");
  expect_setting(d.fp8, Fp8Recipe::delayed, 2, "--fp8-format e4m3");
}

// A flag given twice keeps its last value, and is counted: the CLI refuses it unless the user
// gives the setting inline.
TEST(MegatronSettings, RepeatedFlagsKeepTheLastAndAreCounted) {
  const MegatronSettings s = parse_megatron_args(
      "--tensor-model-parallel-size 2\n--tensor-model-parallel-size 4\n--fp16 --fp16 --fp16\n--sequence-parallel "
      "--sequence-parallel\n",
      "dup.args");
  expect_setting<std::int64_t>(s.tp, 4, 2, "--tensor-model-parallel-size 4");
  EXPECT_EQ(s.repeated, (std::map<std::string, std::int64_t>{{"--tp", 2}, {"--params-dtype", 3}}));
  EXPECT_EQ(s.sp->from.line, 4);
}

// Values are read as moemem's own flags read them, and their errors name those flags.
TEST(MegatronSettings, BadValuesNameTheMoememFlag) {
  const std::pair<const char*, const char*> cases[] = {
      {"--micro-batch-size x", "--micro-batch: 'x' is not accepted; expected an integer"},
      {"--recompute-granularity most", "--recompute: 'most' is not accepted; expected none, selective or full"},
      {"--moe-expert-capacity-factor abc", "--moe-capacity-factor: 'abc' is not accepted; expected a number"},
      {"--attention-backend weird",
       "s.args: --attention-backend: 'weird' is not accepted; expected flash, fused, unfused, local or auto"},
  };
  for (const auto& [text, message] : cases) {
    try {
      (void)parse_megatron_args(text, "s.args");
      ADD_FAILURE() << text;
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
}

// megatron/training/arguments.py validate_args: "if args.expert_tensor_parallel_size is None:
// args.expert_tensor_parallel_size = args.tensor_model_parallel_size". Mixtral-8x7B (8 experts,
// expert FFN 14336, 32 heads, 8 KV heads) at tp 4, ep 2, dp 2: tp*cp*dp = 8 ranks per stage.
Request mixtral_request(const std::string& script, const std::set<std::string>& given = {"--model"}) {
  Request r;
  r.model.source = "mixtral-8x7b";
  r.parallel.tp = 4;
  r.parallel.dp = 2;
  apply_megatron_settings(parse_megatron_args(script, "etp.args"), r, given);
  return r;
}

TEST(MegatronSettings, UnsetEtpIsTheFinalTpLikeMegatron) {
  // No --expert-tensor-parallel-size: etp = tp = 4, edp = 8 / (ep 2 x etp 4) = 1.
  const Scenario unset = make_scenario(mixtral_request("--expert-model-parallel-size 2\n"));
  EXPECT_EQ(unset.layout.config.etp, 4);
  EXPECT_TRUE(unset.layout.etp_defaulted);
  EXPECT_EQ(unset.layout.edp, 1);
  // Given as 1: kept; edp = 8 / (2 x 1) = 4.
  const Scenario one = make_scenario(mixtral_request("--expert-model-parallel-size 2 --expert-tensor-parallel-size 1\n"));
  EXPECT_EQ(one.layout.config.etp, 1);
  EXPECT_FALSE(one.layout.etp_defaulted);
  EXPECT_EQ(one.layout.edp, 4);
  // The script's tp 2 (dp stays 2): etp follows it, edp = 2*2 / (2 x 2) = 1.
  const Scenario script_tp = make_scenario(mixtral_request("--tensor-model-parallel-size 2 --expert-model-parallel-size 2\n"));
  EXPECT_EQ(script_tp.layout.config.tp, 2);
  EXPECT_EQ(script_tp.layout.config.etp, 2);
  EXPECT_EQ(script_tp.layout.edp, 1);
  // The inline tp (4) wins over the script's 2, and etp follows the tp in effect.
  const Scenario inline_tp =
      make_scenario(mixtral_request("--tensor-model-parallel-size 2 --expert-model-parallel-size 2\n", {"--tp", "--model"}));
  EXPECT_EQ(inline_tp.layout.config.etp, 4);
}

TEST(MegatronSettings, EtpDefaultIsOneOutsideMegatronAndForDenseModels) {
  // The reference analysis shards the routed experts over ep alone (Megatron's etp = tp default is
  // Megatron's; torchtitan, which shards them over ep alone too, refuses tp with ep for its
  // DeepSeek-V3 model and does not train Mixtral).
  Request r;
  r.model.source = "deepseek-v2-lite";
  r.parallel.tp = 4;
  r.parallel.dp = 2;
  r.parallel.ep = 2;
  r.profile = "paper";
  EXPECT_EQ(make_scenario(r).layout.config.etp, 1);
  // A dense model has no expert layers: etp stays 1 whatever tp is.
  Request dense;
  dense.model.source = "llama-3.1-8b";
  dense.parallel.tp = 4;
  const Scenario d = make_scenario(dense);
  EXPECT_EQ(d.layout.config.etp, 1);
  EXPECT_EQ(d.layout.edp, 4);  // tp*cp*dp / (ep 1 x etp 1)
}

}  // namespace
