// record_request (issue 11, item 6): a measurement record becomes the Request the CLI would
// build from flags — degrees, micro-batch, recomputation, profile and the model (a preset when
// the record names one and agrees with it, else the record's own architecture, head_dim
// included) — or the reason moemem cannot represent it.
#include <string>
#include <string_view>
#include <variant>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "moemem/scenario.hpp"
#include "moemem/validate.hpp"

namespace {

using namespace moemem;
using nlohmann::json;

// The record of the public set with this id.
json public_record(std::string_view id) {
  const std::string_view set = public_measurement_set();
  std::size_t start = 0;
  while (start < set.size()) {
    const std::size_t end = std::min(set.find('\n', start), set.size());
    const std::string_view line = set.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json r = json::parse(line);
    if (r.value("id", "") == id) return r;
  }
  ADD_FAILURE() << "no record " << id;
  return json::object();
}

// A torchtitan record of a dense decoder, the fields the public set's records give.
json titan_record(json arch) {
  return json{{"id", "synthetic"},
              {"framework", "torchtitan"},
              {"model", arch.value("name", "")},
              {"model_arch", std::move(arch)},
              {"dp", 8},
              {"micro_batch_size", 1},
              {"global_batch_size", 8},
              {"seq_len", 4096},
              {"recompute", "full AC"},
              {"metric_kind", "max reserved"},
              {"measured_gib_normalized", 40.0}};
}

RecordRequest request_of(const json& record) {
  const auto r = record_request(record);
  if (const auto* why = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << record.value("id", "") << " not representable: " << *why;
    return {};
  }
  return std::get<RecordRequest>(r);
}

std::string reason_of(const json& record) {
  const auto r = record_request(record);
  if (std::holds_alternative<RecordRequest>(r)) {
    ADD_FAILURE() << record.value("id", "") << " is representable";
    return "";
  }
  return std::get<std::string>(r);
}

TEST(RecordRequest, TorchtitanLlamaRecordUsesThePreset) {
  const RecordRequest r = request_of(public_record("TT24-T1-1"));
  EXPECT_EQ(r.request.profile, "torchtitan");
  EXPECT_EQ(r.request.model.source, "llama-3.1-8b");
  EXPECT_FALSE(r.request.model.spec.has_value());
  EXPECT_NE(r.notes.find("preset llama-3.1-8b"), std::string::npos) << r.notes;
  EXPECT_EQ(r.request.parallel.dp, 8);
  EXPECT_EQ(r.request.parallel.tp, 1);
  EXPECT_EQ(r.request.parallel.pp, 1);
  EXPECT_EQ(r.request.parallel.cp, 1);
  EXPECT_FALSE(r.request.parallel.sp);
  EXPECT_EQ(r.request.training.micro_batch, 2);
  EXPECT_EQ(r.request.training.seq_len, 8192);
  EXPECT_EQ(r.request.training.global_batch, 16);
  EXPECT_EQ(r.request.training.recompute, Recompute::selective);
  EXPECT_EQ(r.request.training.fsdp.loss, LossImpl::upcast);  // no torch.compile
  EXPECT_EQ(r.metric, "reserved");
  EXPECT_FALSE(r.last_rank);
  EXPECT_EQ(make_scenario(r.request).model.head_dim, 128);
}

TEST(RecordRequest, MegatronCiRecordBuildsItsOwnModel) {
  const RecordRequest r = request_of(public_record("MG-CI-gpt7b-tp1pp4-h100"));
  EXPECT_EQ(r.request.profile, "megatron");
  ASSERT_TRUE(r.request.model.spec.has_value());  // GeLU, LayerNorm, biases, learned positions: no preset
  const ModelSpec& m = *r.request.model.spec;
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_FALSE(m.gated_mlp);
  EXPECT_TRUE(m.norm_bias);
  EXPECT_EQ(m.learned_positions, 8192);
  EXPECT_NE(r.notes.find("model_arch"), std::string::npos) << r.notes;
  EXPECT_NE(r.notes.find("learned position table"), std::string::npos) << r.notes;
  EXPECT_EQ(r.request.parallel.tp, 1);
  EXPECT_EQ(r.request.parallel.pp, 4);
  EXPECT_EQ(r.request.parallel.vpp, 8);
  EXPECT_EQ(r.request.parallel.dp, 2);
  EXPECT_EQ(r.request.parallel.schedule, Schedule::interleaved);
  EXPECT_EQ(r.request.training.micro_batch, 1);
  EXPECT_EQ(r.request.training.global_batch, 8);
  EXPECT_EQ(r.request.training.recompute, Recompute::none);  // stated, not defaulted
  EXPECT_TRUE(r.request.training.distributed_optimizer);
  EXPECT_EQ(r.metric, "allocated");
  EXPECT_TRUE(r.last_rank);
}

TEST(RecordRequest, FlagPerfRecordKeepsItsTiedEmbeddingsAndSequenceParallelism) {
  const RecordRequest r = request_of(public_record("FP-L3-8B-A800-PP2DP2TP2-bf16"));
  EXPECT_EQ(r.request.profile, "megatron");
  ASSERT_TRUE(r.request.model.spec.has_value());
  EXPECT_TRUE(r.request.model.spec->tie_embeddings);
  EXPECT_TRUE(r.request.model.spec->gated_mlp);
  EXPECT_EQ(r.request.model.spec->head_dim, 128);
  EXPECT_EQ(r.request.parallel.tp, 2);
  EXPECT_EQ(r.request.parallel.pp, 2);
  EXPECT_EQ(r.request.parallel.dp, 2);
  EXPECT_TRUE(r.request.parallel.sp);
  EXPECT_EQ(r.request.training.micro_batch, 1);
  EXPECT_EQ(r.request.training.recompute, Recompute::none);
  EXPECT_TRUE(r.request.training.distributed_optimizer);
  EXPECT_EQ(r.metric, "device-used");
}

TEST(RecordRequest, HeadDimIsHonouredWhenGiven) {
  // Qwen3-32B: 64 heads of 128 on a 5120-wide residual (hidden / heads would be 80).
  json arch = {{"name", "Qwen3-32B"}, {"layers", 64},     {"hidden", 5120},   {"ffn", 25600},
               {"heads", 64},         {"kv_heads", 8},    {"head_dim", 128},  {"vocab", 151936}};
  const RecordRequest given = request_of(titan_record(arch));
  ASSERT_TRUE(given.request.model.spec.has_value());
  EXPECT_EQ(given.request.model.spec->head_dim, 128);
  arch.erase("head_dim");
  const RecordRequest derived = request_of(titan_record(arch));
  ASSERT_TRUE(derived.request.model.spec.has_value());
  EXPECT_EQ(derived.request.model.spec->head_dim, 80);
}

TEST(RecordRequest, PresetOnlyWhereTheRecordAgreesWithIt) {
  json arch = {{"name", "Qwen3-8B"}, {"layers", 36}, {"hidden", 4096},  {"ffn", 12288},
               {"heads", 32},        {"kv_heads", 8}, {"head_dim", 128}, {"vocab", 151936}};
  const RecordRequest agrees = request_of(titan_record(arch));
  EXPECT_EQ(agrees.request.model.source, "qwen3-8b");
  EXPECT_FALSE(agrees.request.model.spec.has_value());

  arch["tied_embeddings"] = true;
  arch["layers"] = 40;
  const RecordRequest differs = request_of(titan_record(arch));
  ASSERT_TRUE(differs.request.model.spec.has_value());
  EXPECT_TRUE(differs.request.model.spec->tie_embeddings);
  EXPECT_EQ(differs.request.model.spec->num_layers, 40);
  EXPECT_NE(differs.notes.find("layers, tied_embeddings disagree with preset qwen3-8b"), std::string::npos) << differs.notes;
}

TEST(RecordRequest, UnrepresentableRecordsCarryTheirReason) {
  // torchtitan's DeepSeek-V3 16B: dense_ffn and moe_ffn, no per-layer ffn.
  EXPECT_NE(reason_of(public_record("TT-DS16B-PR1373-fsdp8-ep2")).find("layer by layer"), std::string::npos);
  json moe = public_record("TT24-T1-1");
  moe["model_arch"]["experts"] = 8;
  EXPECT_NE(reason_of(moe).find("mixture-of-experts"), std::string::npos);
  EXPECT_NE(reason_of(public_record("TT24-T6-CP1")).find("global batch"), std::string::npos);
  EXPECT_NE(reason_of(public_record("TT24-T5-i1f1b")).find("virtual stages"), std::string::npos);

  json unstated = public_record("TT24-T1-1");
  unstated.erase("recompute");
  EXPECT_EQ(reason_of(unstated), "recomputation not stated");
  unstated["recompute"] = "some layers";
  EXPECT_NE(reason_of(unstated).find("not understood"), std::string::npos);

  // A preset that is a mixture of experts, named by a record that states no experts.
  json mixtral = titan_record({{"name", "Mixtral-8x7B"}, {"layers", 32}, {"hidden", 4096}, {"ffn", 14336},
                               {"heads", 32}, {"kv_heads", 8}, {"vocab", 32000}});
  EXPECT_NE(reason_of(mixtral).find("mixture-of-experts"), std::string::npos);

  json no_arch = titan_record({{"layers", 32}, {"ffn", 14336}});
  EXPECT_NE(reason_of(no_arch).find("configuration not representable"), std::string::npos);
}

}  // namespace

namespace {

// Why a record is refused: the reason it carries (a bad architecture is reported that way).
std::string refusal_of(const json& record) {
  const auto r = record_request(record);
  if (const auto* why = std::get_if<std::string>(&r)) return *why;
  ADD_FAILURE() << "accepted";
  return "";
}

// Issue 13's findings: "128K" read as 128; 2^40 layers or kv_heads beyond heads accepted (a huge
// layer list, or products that overflow).
TEST(RecordRequest, ArchitectureSizesAreCheckedBeforeUse) {
  const json base = {{"name", "Synthetic"}, {"layers", 4}, {"hidden", 256}, {"ffn", 512},
                     {"heads", 4},          {"kv_heads", 2}, {"vocab", "1000 (a remark)"}};
  EXPECT_EQ(request_of(titan_record(base)).request.model.spec->vocab, 1000);
  json k = base;
  k["vocab"] = "128K";
  EXPECT_NE(refusal_of(titan_record(k)).find("model_arch.vocab: '128K' is not accepted"), std::string::npos);
  json layers = base;
  layers["layers"] = std::int64_t{1} << 40;
  EXPECT_NE(refusal_of(titan_record(layers)).find("layers (1 to 65536)"), std::string::npos);
  json kv = base;
  kv["kv_heads"] = 8;
  EXPECT_NE(refusal_of(titan_record(kv)).find("kv_heads (1 to heads)"), std::string::npos);
  json hd = base;
  hd["head_dim"] = 0;
  EXPECT_NE(refusal_of(titan_record(hd)).find("model_arch.head_dim: '0'"), std::string::npos);
}

}  // namespace
