// Profiles as complete strategies (issue 11): each profile's `check` refuses what the profile
// does not model with the messages, and in the order, that analyze() and the CLI use today, and
// lets good settings through. analyze() and the CLI are the reference: every expectation below
// compares against what they throw or print, never against a copied string, except where a case
// is pinned by hand and says so.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/run_cli.hpp"
#include "moemem/activation.hpp"
#include "moemem/config.hpp"
#include "moemem/errors.hpp"
#include "moemem/inventory.hpp"
#include "moemem/parallel.hpp"
#include "moemem/analyze.hpp"
#include "moemem/profile.hpp"
#include "moemem/report.hpp"

namespace {

using namespace moemem;

struct World {
  ModelSpec model;
  Inventory inventory;
  Layout layout;
};

World world(const std::string& preset) {
  World w{load_model(preset), {}, {}};
  w.inventory = build_inventory(w.model);
  ParallelConfig p;
  p.dp = 8;
  // ep 2 for the MoE model: a --moe-imbalance of 1.5 is only possible with ep > 1 (at ep 1 a rank
  // holds every expert, so routing cannot be imbalanced across ranks).
  if (w.model.is_moe()) p.ep = 2;
  w.layout = resolve_layout(w.model, p);
  return w;
}

TrainingConfig base_training(const Profile& profile) {
  TrainingConfig t;
  t.micro_batch = 1;
  t.seq_len = 1024;
  t.precision = profile.default_precision;
  return t;
}

// The message of the InputError `f` throws, or nullopt; the field too, for analyze's later errors.
struct Thrown {
  std::string what, field;
};
template <class F>
std::optional<Thrown> thrown(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return Thrown{e.what(), e.field()};
  }
  return std::nullopt;
}

// One setting each profile may refuse; applied alone and in pairs, so that any two checks meet
// in both orders of application and the first one reported must be the same.
struct Setting {
  const char* name;
  void (*apply)(TrainingConfig&);
};

const std::vector<Setting>& settings() {
  static const std::vector<Setting> s = {
      {"fp8", [](TrainingConfig& t) { t.fp8 = Fp8Recipe::tensorwise; }},
      {"moe-imbalance", [](TrainingConfig& t) { t.moe_imbalance = 1.5; }},
      {"moe-capacity-factor", [](TrainingConfig& t) { t.moe_capacity_factor = 1.25; }},
      {"deepep", [](TrainingConfig& t) { t.deepep = true; }},
      {"zero 1", [](TrainingConfig& t) { t.zero = 1; }},
      {"compile", [](TrainingConfig& t) { t.compile = true; }},
      {"loss chunked", [](TrainingConfig& t) { t.loss = LossImpl::chunked; }},
      {"reshard never", [](TrainingConfig& t) { t.reshard = ReshardPolicy::never; }},
      {"fsdp-float8-all-gather", [](TrainingConfig& t) { t.fsdp_float8_all_gather = true; }},
      {"dp-replicate 2", [](TrainingConfig& t) { t.dp_replicate = 2; }},
  };
  return s;
}

// For each profile, a dense GQA model and a MoE model, every setting alone and every pair, under
// each attention choice: when analyze() refuses the settings in its profile checks, check()
// throws the same message; when check() lets them through, analyze() succeeds (or, for
// torchtitan with a MoE model, refuses the model itself, which is not one of these checks).
TEST(ProfileCheck, ThrowsWhatAnalyzeThrowsFirst) {
  int refused = 0, passed = 0;
  for (const char* preset : {"llama-3.1-8b", "mixtral-8x7b"}) {
    const World w = world(preset);
    for (const auto& name : profile_names()) {
      const Profile& profile = get_profile(name);
      ASSERT_NE(profile.check, nullptr) << name;
      const CompiledModel cm = compile_model(w.model, w.inventory, profile);
      const auto n = settings().size();
      for (std::size_t i = 0; i <= n; ++i) {
        for (std::size_t j = i; j <= n; ++j) {
          for (const std::optional<AttentionKernel> attention :
               {std::optional<AttentionKernel>{}, std::optional{AttentionKernel::eager},
                std::optional{AttentionKernel::flash}}) {
            TrainingConfig t = base_training(profile);
            std::string label = std::string(preset) + " " + std::string(name);
            for (const std::size_t k : {i, j}) {
              if (k == n) continue;
              settings()[k].apply(t);
              label += std::string(" + ") + settings()[k].name;
            }
            t.attention = attention;
            if (attention) label += std::string(" + attention ") + std::string(name_of(*attention));
            const auto by_check = thrown([&] { if (auto e = profile.check(w.model, w.layout, t)) throw *e; });
            const auto by_analyze = thrown([&] { (void)analyze(cm, w.layout, t); });
            if (by_check) {
              ++refused;
              ASSERT_TRUE(by_analyze.has_value()) << label << ": check threw " << by_check->what;
              EXPECT_EQ(by_check->what, by_analyze->what) << label;
            } else {
              ++passed;
              if (by_analyze) {
                EXPECT_EQ(std::string(name), "torchtitan") << label << ": analyze threw " << by_analyze->what;
                EXPECT_EQ(by_analyze->field, "--profile") << label << ": analyze threw " << by_analyze->what;
              }
            }
          }
        }
      }
    }
  }
  // Both branches are exercised.
  EXPECT_GT(refused, 100);
  EXPECT_GT(passed, 100);
}

// The paper profile's recomputation restriction, today in the CLI's option parsing: the CLI's
// error line is "moemem: error: " + the message check() throws for the same typed settings, and
// it comes before the profile's other refusals (here --fp8).
TEST(ProfileCheck, PaperRecomputeRefusalMatchesTheCli) {
  const World w = world("llama-3.1-8b");
  const Profile& paper = paper_profile();
  struct Case {
    std::vector<std::string> args;
    Recompute recompute;
    RecomputeMethod method;
    std::int64_t num_layers;
    Fp8Recipe fp8 = Fp8Recipe::none;
  };
  const std::vector<Case> cases = {
      {{"--recompute", "selective"}, Recompute::selective, RecomputeMethod::uniform, 1},
      {{"--recompute", "selective", "--recompute-modules", "core_attn"}, Recompute::selective, RecomputeMethod::uniform, 1},
      {{"--recompute", "full", "--recompute-method", "block"}, Recompute::full, RecomputeMethod::block, 1},
      {{"--recompute", "full", "--recompute-num-layers", "2"}, Recompute::full, RecomputeMethod::uniform, 2},
      {{"--recompute", "full", "--recompute-method", "block", "--recompute-num-layers", "4"}, Recompute::full,
       RecomputeMethod::block, 4},
      {{"--recompute", "selective", "--fp8", "tensorwise"}, Recompute::selective, RecomputeMethod::uniform, 1,
       Fp8Recipe::tensorwise},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"analyze", "--model", "llama-3.1-8b", "--profile", "paper", "--dp", "8"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto cli = test::run_cli(args);
    ASSERT_EQ(cli.code, kExitBadInput) << cli.err;
    TrainingConfig t = base_training(paper);
    t.recompute = c.recompute;
    t.recompute_method = c.method;
    t.recompute_num_layers = c.num_layers;
    t.fp8 = c.fp8;
    const auto by_check = thrown([&] { if (auto e = paper.check(w.model, w.layout, t)) throw *e; });
    ASSERT_TRUE(by_check.has_value()) << cli.err;
    EXPECT_EQ("moemem: error: " + by_check->what + "\n", cli.err);
    EXPECT_EQ(by_check->field, "--recompute");
  }
}

// Pinned by hand: where the CLI was not given --recompute, check() names the mode in effect
// ("none"), where the CLI's message printed the empty option text.
TEST(ProfileCheck, PaperRecomputeRefusalNamesTheModeInEffect) {
  const World w = world("llama-3.1-8b");
  TrainingConfig t = base_training(paper_profile());
  t.recompute_method = RecomputeMethod::block;
  const auto e = thrown([&] { if (auto problem = paper_profile().check(w.model, w.layout, t)) throw *problem; });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->what,
            "--recompute: 'none block' is not accepted; expected none or full (uniform, one layer) in the paper profile, "
            "as the report analyses");
}

// What each profile is for passes its check.
TEST(ProfileCheck, GoodSettingsPass) {
  const World dense = world("llama-3.1-8b"), moe = world("mixtral-8x7b");
  {
    TrainingConfig t = base_training(paper_profile());
    t.recompute = Recompute::full;
    t.zero = 3;
    t.attention = AttentionKernel::eager;
    EXPECT_FALSE(paper_profile().check(moe.model, moe.layout, t).has_value());
    EXPECT_FALSE(paper_profile().check(dense.model, dense.layout, t).has_value());
  }
  {
    TrainingConfig t = base_training(megatron_profile());
    t.recompute = Recompute::selective;
    t.recompute_method = RecomputeMethod::block;
    t.recompute_num_layers = 2;
    t.zero = 1;
    t.fp8 = Fp8Recipe::blockwise;
    t.moe_imbalance = 2.0;
    t.moe_capacity_factor = 1.5;
    t.attention = AttentionKernel::flash;
    EXPECT_FALSE(megatron_profile().check(moe.model, moe.layout, t).has_value());
    // DeepEP needs an expert group it has a config for (deep_ep Buffer.get_dispatch_config: 2 to
    // 160 ranks); at ep 1 (and no imbalance, which ep 1 cannot have) ep x etp is 1.
    t.deepep = true;
    t.moe_imbalance = 1.0;
    ParallelConfig ep1;
    ep1.dp = 8;
    const auto e = megatron_profile().check(moe.model, resolve_layout(moe.model, ep1), t);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->field(), "--ep/--etp");
  }
  {
    TrainingConfig t = base_training(torchtitan_profile());
    t.recompute = Recompute::selective;
    t.compile = true;
    t.loss = LossImpl::chunked;
    t.reshard = ReshardPolicy::never;
    t.fp8 = Fp8Recipe::tensorwise;
    t.fsdp_float8_all_gather = true;
    t.dp_replicate = 2;
    EXPECT_FALSE(torchtitan_profile().check(dense.model, dense.layout, t).has_value());
  }
}

// The registry hands out each profile under its own name.
TEST(ProfileRegistry, NamesMatchAndEveryProfileHasItsFunctions) {
  for (const auto& name : profile_names()) {
    const Profile& p = get_profile(name);
    EXPECT_EQ(p.name, name);
    EXPECT_NE(p.check, nullptr);
    EXPECT_NE(p.tp_split, nullptr);
    EXPECT_NE(p.zero_group, nullptr);
    EXPECT_NE(p.accounts, nullptr);
    EXPECT_NE(p.layer_activations, nullptr);
    EXPECT_NE(p.chunk_activations, nullptr);
  }
  EXPECT_EQ(&get_profile("paper"), &paper_profile());
  EXPECT_EQ(&get_profile("megatron"), &megatron_profile());
  EXPECT_EQ(&get_profile("torchtitan"), &torchtitan_profile());
  EXPECT_THROW((void)get_profile("deepspeed"), InputError);
}

}  // namespace
