// analyze_into: every stage of a layout costed under one training configuration. Each stage's
// bytes are recorded in its ledger (itemised with Detail::items) and its totals are the ledger's
// sums by category.
#include <algorithm>
#include <span>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "analyze/internal.hpp"
#include "moemem/errors.hpp"

namespace moemem {

using detail::idx;

namespace {

constexpr std::string_view kMegatronProfileName = "megatron";

// The megatron profile's line on optimizer sharding for a ZeRO stage other than 1 (its listed line
// describes the distributed optimizer, = --zero 1): what zero_states.cpp shards at that stage.
std::string zero_assumption(int zero) {
  switch (zero) {
    case 0: return "no distributed optimizer (--zero 0): master weights, moments and main gradients whole on every data-parallel rank";
    case 2: return "ZeRO-2 (--zero 2): master weights, moments and main gradients over dp*cp, routed experts' over edp";
    default: return "ZeRO-3 (--zero 3): working weights too, besides master weights, moments and main gradients, over dp*cp, "
                    "routed experts' over edp";
  }
}

// The stage's chunks and what they hold; every other field zeroed.
void init_stage(const detail::EvalContext& c, std::size_t s, StageReport& st) {
  const auto& layout = c.layout;
  st.reset(static_cast<std::int64_t>(s));
  st.layers = layout.stages[s];
  st.chunks.assign(layout.rank_chunks[s].begin(), layout.rank_chunks[s].end());
  st.model_chunks = static_cast<std::int64_t>(st.chunks.size());
  for (const auto ci : st.chunks) {
    const auto& ch = layout.chunks[idx(ci)];
    st.has_embedding = st.has_embedding || ch.embedding;
    st.has_head = st.has_head || ch.loss;
    st.mtp_depths += ch.mtp_depths;
    if (ch.num_layers > 0) st.last_layer = std::max(st.last_layer, ch.first_layer + ch.num_layers - 1);
  }
}

// Every report field is (re)assigned: `r` may hold a previous evaluation whose storage is reused.
void init_report(const detail::EvalContext& c, MemoryReport& r) {
  r.model_name = c.model.name;
  r.profile = c.profile.name;
  r.layout = c.layout;
  r.training = c.t;
  r.attention = c.attention;
  r.microbatches = c.microbatches;
  r.padded_vocab = c.vocab;
  r.peak_stage = 0;
  r.overhead = c.profile.overhead;
  r.total_params = c.cm.total_params;
  r.trainable_params = c.cm.trainable_params;
  r.assumptions.assign(c.profile.assumptions.begin(), c.profile.assumptions.end());
  if (c.profile.name == kMegatronProfileName && c.t.zero != 1) {
    for (auto& a : r.assumptions) {
      if (a.starts_with("distributed optimizer (--distributed-optimizer, = --zero 1)")) a = zero_assumption(c.t.zero);
    }
  }
  if (c.t.recipe) {
    for (auto& a : recipe_assumptions(*c.t.recipe, c.t)) r.assumptions.push_back(std::move(a));
    const Schedule sched = c.layout.config.schedule;
    if (c.model.mtp_layers > 0 && (sched == Schedule::dualpipe || sched == Schedule::dualpipev)) {
      r.assumptions.push_back(fmt::format("recipe {}: with DualPipe the embedding and the output head sit on the MTP module's "
                                          "rank, which uses them without a copy of its own (DeepSeek-V3 §3.2.3)",
                                          name_of(*c.t.recipe)));
    }
    if (sched == Schedule::dualpipe) {
      r.assumptions.push_back("DualPipe (DeepSeek-V3 §3.2.1, Table 2): two copies of the model's parameters (rank r holds "
                              "stages r and pp-1-r) and pp+1 micro-batches in flight");
    }
    if (c.layout.config.balance_units) {
      r.assumptions.push_back(fmt::format("recipe {}: default split with the embedding, each MTP depth and the loss counted as "
                                          "a layer each, so the end stages carry fewer decoder layers (DeepSeek publishes no "
                                          "split; --layers-per-stage or a layout string overrides it)",
                                          name_of(*c.t.recipe)));
    }
  }
  if (c.model.has_vision()) {
    // The multimodal configs (Qwen3.5's released ones, Gemma-3's 4B-27B, Llama-4's
    // ConditionalGeneration): the vision tower and projector (inventory.cpp, inventory_gemma3.cpp,
    // inventory_qwen3_5.cpp) sit with the embedding, as Megatron-LM places the encoder on the first
    // pipeline stage (pretrain_vlm.py at d98e8a64: add_encoder=is_pipeline_first_stage()), and
    // train with the rest; replicated over tp, which errs high (Megatron's encoder splits over tp).
    // What the tower saves for images is not modelled.
    r.assumptions.push_back("vision tower (vision_config): its parameters held beside the embedding, replicated over tensor "
                            "parallelism, and trained with their gradients and optimizer states; text-only micro-batches "
                            "(what it saves for images is not modelled)");
  }
  if (c.model.has_indexer()) {
    r.assumptions.push_back(fmt::format(
        "DeepSeek sparse attention as Megatron-Core trains it (--experimental-attention-variant dsa): absorbed MLA, "
        "--dsa-kernel-backend tilelang, the indexer trained by its KL loss on the selected keys "
        "(--dsa-indexer-loss-coeff > 0 --dsa-indexer-use-sparse-loss), top-k {} in every layer (--dsa-indexer-topk-freq 1); "
        "not modelled: the dense warm-up (dense KL over all keys) and the PyTorch reference path",
        c.model.dsa.index_topk));
  }
  if (const auto& p = c.layout.config; c.profile.name == "megatron" && p.pp > 1 && p.pipeline_layout.empty() &&
                                       p.layers_per_stage.empty() && !p.first_stage_layers && !p.last_stage_layers &&
                                       !p.balance_units) {
    // megatron/training/arguments.py validate_args: without --decoder-first/last-pipeline-num-layers
    // or a layout, "Number of layers should be divisible by the pipeline-model-parallel size"
    // (the layers plus E and L where accounted; by the chunks' count under VPP).
    const std::int64_t units = c.model.num_layers + (p.account_for_embedding ? 1 : 0) + (p.account_for_loss ? 1 : 0);
    const std::int64_t chunks = static_cast<std::int64_t>(c.layout.chunks.size());
    if (units % chunks != 0) {
      r.assumptions.push_back(fmt::format(
          "{} pipeline units do not divide over {} chunks: Megatron-LM refuses that launch unless it sets "
          "--decoder-first/last-pipeline-num-layers or --pipeline-model-parallel-layout; moemem cuts ceil({}/{}) per chunk, "
          "the last taking the rest (give --layers-per-stage or a layout to cost the split you will launch)",
          units, chunks, units, chunks));
    }
  }
  if (c.profile.name == "megatron" && c.t.zero >= 2) {
    // Megatron-LM's distributed optimizer is ZeRO-1; sharding gradients or weights too is
    // Megatron-FSDP (--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads or
    // optim_grads_params), which gathers a module's parameters (and reduce-scatters its gradients)
    // in buffers of its own.
    r.assumptions.push_back(fmt::format(
        "ZeRO {}: Megatron-LM shards {} only under Megatron-FSDP (--use-megatron-fsdp "
        "--data-parallel-sharding-strategy {}); its per-module gather and reduce-scatter buffers are not counted "
        "(errs low by about two layers' weights and gradients)",
        c.t.zero, c.t.zero == 2 ? "gradients" : "gradients and weights", c.t.zero == 2 ? "optim_grads" : "optim_grads_params"));
  }
  if (c.profile.name == "hf" && c.t.zero == 0 && c.t.deepspeed_release != 0 && !c.t.hf_ddp && !c.t.accelerate_fsdp() &&
      c.t.precision.weights == DType::bf16) {
    // src/profiles/hf_deepspeed.cpp bf16_optimizer.
    r.assumptions.push_back(fmt::format(
        "DeepSpeed {}: bf16 without ZeRO runs BF16_Optimizer, not the ZeRO 0 path above: bf16 and fp32 gradients of "
        "every trainable parameter (the fp32 buffer padded per flat group to 2 x dp), fp32 master copies and moments "
        "partitioned over dp; after backward the largest of the all-reduce's bf16 bucket copy, one gradient's fp32 copy "
        "and the foreach step's copy{}",
        deepspeed_version_name(c.t.deepspeed_release),
        (c.t.deepspeed && c.t.deepspeed->config_optimizer) || c.t.optimizer != OptimizerKind::adamw
            ? ""
            : c.t.transformers_version == TransformersVersion::v4
                ? " (the Trainer's AdamW taken as adamw_torch, its default before torch 2.8: foreach, whose step copies "
                  "each group's exp_avg_sq partition; with torch 2.8 or later, adamw_torch_fused copies nothing and this "
                  "errs high by that copy)"
                : " (the Trainer's AdamW taken as adamw_torch_fused, its default from torch 2.8, which transformers 5 "
                  "runs with: no step copy; under torch before 2.8 adamw_torch's foreach step copies each group's "
                  "exp_avg_sq partition: --transformers-version 4 charges it)"));
  } else if (c.profile.name == "hf" && c.t.deepspeed_release != 0) {
    r.assumptions.push_back(fmt::format("DeepSpeed {}: modelled as the current release; the release changes what is "
                                        "modelled only for bf16 without ZeRO (BF16_Optimizer)",
                                        deepspeed_version_name(c.t.deepspeed_release)));
  }
  if (c.layout.etp_defaulted && c.profile.etp_follows_tp && c.model.is_moe() && c.layout.config.tp > 1) {
    // megatron/training/arguments.py validate_args: expert_tensor_parallel_size defaults to tp
    // (named when it differs from 1, the value it would otherwise be taken for).
    r.assumptions.push_back(fmt::format("expert tensor parallel = tp = {} (Megatron's default when --etp is not given)",
                                        c.layout.config.tp));
  }
  if (c.profile.states == &detail::kFsdp2States && c.t.torchtitan_version <= TorchtitanVersion::v0_2_0 && c.layout.config.pp > 1) {
    r.assumptions.push_back(fmt::format("torchtitan {}: the last pipeline stage keeps every micro-batch's output (bf16 "
                                        "logits) until the step ends (step() returns them; return_outputs=False from 0.2.1)",
                                        name_of(c.t.torchtitan_version)));
  }
  if (c.t.recompute_defaulted) {
    r.assumptions.push_back(
        c.t.torchtitan_version == TorchtitanVersion::current
            ? std::string("activation checkpointing: torchtitan's default, per-op SAC (the Trainer's SelectiveAC policy since "
                          "c5d93d109); give --recompute to choose")
            : fmt::format("activation checkpointing: torchtitan {}'s default, layer SAC (mode selective, "
                          "selective_ac_option 2: every second block of a rank checkpointed whole); give --recompute to choose",
                          name_of(c.t.torchtitan_version)));
  }
  if (c.profile.states == &detail::kFsdp2States && c.model.attention == AttentionKind::mla) {
    // src/profiles/torchtitan_moe.cpp: torchtitan's deepseek_v3 model as PR 1373 added it.
    r.assumptions.push_back(
        "torchtitan's deepseek_v3 model as added in d54d05a5 (PR 1373): eager blocks (MLA through SDPA's fused kernel, "
        "grouped-GEMM experts with rows padded to 16 per local expert, an fp32 copy of the routed "
        "output); routed experts 1/ep per rank and FSDP-sharded over dp/ep (dp_shard_mod_ep); the largest block kept "
        "unsharded after forward");
    if (c.layout.config.tp > 1) {
      r.assumptions.push_back(
          "its TP plan (apply_non_moe_tp, apply_moe_ep_tp): sequence-parallel norms, attention and MoE inputs "
          "all-gathered; wq/wq_b and wkv_b column-parallel, wkv_a, kv_norm, wq_a, q_norm and the router replicated, wo "
          "row-parallel; routed and shared experts split on their hidden width (TensorParallel, etp = tp); loss parallel");
    }
  }
  if (c.t.fsdp_float8_all_gather && !detail::fsdp_float8_all_gather_active(c)) {
    r.assumptions.push_back("--fsdp-float8-all-gather has no effect with one data-parallel shard: torchtitan enables it "
                            "only where dp_shard > 1 (float8.py, parallel_dims.dp_shard_enabled), so FSDP all-gathers "
                            "bf16 weights over cp");
  }
  if (c.t.hf_ddp) {
    r.assumptions.push_back(
        "--ddp: the Trainer without DeepSpeed or FSDP on a model loaded in bf16 (bf16 autocast): every rank holds the "
        "weights, the gradients (none at the start of backward: zero_grad(set_to_none)) and torch AdamW's moments in "
        "the parameters' dtype, no master copy; PEFT upcasts LoRA's adapters to fp32 and each adapted linear saves "
        "autocast's bf16 copies of its fp32-cast input and of the adapter weights; with dp > 1 DDP's buckets hold a "
        "second copy of every gradient (gradient_as_bucket_view False)");
  }
  if (c.t.accelerate_fsdp1) {
    r.assumptions.push_back(
        "--fsdp1: FSDP1 (FullyShardedDataParallel) through accelerate as the Trainer runs it with mixed_precision bf16: "
        "every decoder layer a unit and the root unit (embedding, final norm, lm_head) never freed after forward; "
        "FlatParameters upcast to fp32 and sharded over dp with their optimizer states (fused AdamW: no step "
        "temporary); bf16 all-gathers and reduce-scatters; two layers gathered at backward (the one running and the "
        "one prefetched, limit_all_gathers), every layer with SHARD_GRAD_OP; with gradient accumulation no_sync keeps a "
        "bf16 gradient of every parameter unsharded until the last micro-batch; FlatParameter padding left out");
  }
  if (c.t.accelerate_fsdp1 && c.t.fsdp_offload_params) {
    r.assumptions.push_back("--fsdp-offload-params: CPUOffload(offload_params=True) keeps the parameter and gradient "
                            "shards and the optimizer states in pinned host memory (the host column) and steps on the CPU");
  }
  if (c.t.accelerate_fsdp2) {
    r.assumptions.push_back(
        "--fsdp2: FSDP2 through accelerate (>= 1.14) as the Trainer runs it with mixed_precision bf16: every decoder layer, "
        "the embedding and the tail (final norm, lm_head; never resharded after forward) are units; trainable parameters "
        "upcast to fp32 and sharded over dp with their optimizer states (fused AdamW: no step temporary), frozen ones "
        "sharded in their dtype; bf16 all-gathers and reduce-scatters; two layers gathered at backward (the one running "
        "and the one prefetched); with gradient accumulation the Trainer's no_sync keeps a bf16 gradient of every "
        "trainable parameter unsharded until the last micro-batch");
    if (c.t.fsdp_offload_params) {
      r.assumptions.push_back("--fsdp-offload-params: CPUOffloadPolicy keeps the parameter and gradient shards and the "
                              "optimizer states in pinned host memory (the host column) and steps on the CPU");
    }
  }
  r.stages.resize(c.layout.rank_chunks.size());
  for (std::size_t s = 0; s < r.stages.size(); ++s) init_stage(c, s, r.stages[s]);
}

// One stage's ledger, in the order explain shows it: states, activations, buffers, fragmentation,
// runtime. Activations are recorded first (FSDP2's peak depends on them), then moved after the states.
void cost_stage(const detail::EvalContext& c, const detail::ChunkActivations& chunks, Bytes cp_block, const detail::Runtime& runtime,
                StageReport& st) {
  Ledger ledger(&st.ledger, c.detail == Detail::items);
  detail::stage_activations(c, chunks, cp_block, st);
  detail::record_activations(c, st, ledger);
  if (c.profile.states->cost(c, st, ledger.total(Category::activations))) ledger.drop(Category::activations);
  const auto activation_items = static_cast<std::ptrdiff_t>(st.ledger.size());
  c.profile.states->record(c, st, ledger);
  std::rotate(st.ledger.begin(), st.ledger.begin() + activation_items, st.ledger.end());
  detail::record_cuda_graphs(c, st, ledger);
  detail::record_userbuffers_and_wgrad(c, st, ledger);
  if (c.t.ema_on_host || c.t.ema_on_device) {
    // DeepSeek-V3 §3.2.3: the EMA of the parameters lives in CPU memory; an fp32 copy of every
    // parameter the rank holds (the report does not say whether it is sharded over DP). Without
    // that technique (--recipe-off ema-on-cpu) the same copy is on the GPU.
    const Count params(st.params.non_expert.value() + st.params.expert.value());
    ledger.add(c.t.ema_on_host ? Category::host : Category::weights, bytes_of(params, DType::fp32), [&] {
      return ledger_item("ema", c.t.ema_on_host ? "EMA of the parameters (CPU memory)" : "EMA of the parameters (GPU memory)",
                         fmt::format("{} parameters on this device x fp32", params.value()), params, DType::fp32);
    });
  }
  detail::record_overheads(c, st, runtime, ledger);
  st.bytes = StageBytes{ledger.total(Category::weights),       ledger.total(Category::gradients),
                        ledger.total(Category::optimizer),     ledger.total(Category::activations),
                        ledger.total(Category::buffers),       ledger.total(Category::fragmentation),
                        ledger.total(Category::runtime),       ledger.total(Category::host)};
}

}  // namespace

void StageReport::reset(std::int64_t s) {
  stage = s;
  layers = StageRange{};
  last_layer = -1;
  has_embedding = has_head = false;
  mtp_depths = 0;
  chunks.clear();
  params = ParamSplit{};
  trainable = TrainableSplit{};
  params_by_module = {};
  chunk_activations.clear();
  chunk_in_flight.clear();
  transient = LayerTransient{};
  activations_per_microbatch = cp_ring_buffers = combined_forward = fp8_weight_copies = Bytes{};
  input_batch = BatchMoment{};
  fp8_weight_params = nf4_params = Count{};
  nf4_bytes = Bytes{};
  in_flight_microbatches = model_chunks = 1;
  loss = LossPeak{};
  fsdp.reset();
  ledger.clear();
  bytes = StageBytes{};
}

void EvalCacheDeleter::operator()(EvalCache* c) const { delete c; }
EvalCachePtr make_eval_cache() { return EvalCachePtr(new EvalCache()); }

MemoryReport analyze(const ModelSpec& m, const Inventory& inv, const Profile& profile, const Layout& layout,
                     const TrainingConfig& t, Detail detail) {
  return analyze(compile_model(m, inv, profile), layout, t, detail);
}

MemoryReport analyze(const CompiledModel& cm, const Layout& layout, const TrainingConfig& t, Detail detail) {
  MemoryReport r;
  analyze_into(cm, layout, t, r, nullptr, detail);
  return r;
}

namespace {

// The checks every evaluation makes (an InputError names what cannot be honoured) and the context
// its stages share.
detail::EvalContext make_context(const CompiledModel& cm, const Layout& layout, const TrainingConfig& t, Detail detail,
                                 Checks checks) {
  const ModelSpec& m = *cm.model;
  const Profile& profile = *cm.profile;
  if (checks == Checks::run) {
    validate_training(t, layout);
    if (auto problem = profile.check(m, layout, t)) throw *problem;
  }
  // DeepSeek sparse attention (V3.2): the indexer's parameters are counted (inventory.cpp) under
  // every profile; only the megatron profile models what its training saves (Megatron-Core's
  // DSAttention with absorbed MLA: src/profiles/megatron_dsa.cpp), so the others refuse it.
  if (m.has_indexer() && profile.name != kMegatronProfileName) {
    throw InputError("--model", m.model_type,
                     fmt::format("a model without DeepSeek sparse attention's indexer under the {} profile: the "
                                 "activations of DSA training are modelled under the megatron profile only (count is exact)",
                                 profile.name));
  }
  const AttentionKernel attention = attention_kernel(profile, m, t);
  if (auto problem = detail::check_model_variants(m, profile, layout, t, attention)) throw *problem;
  if (checks == Checks::run && m.is_moe() && m.moe.top_k > 0) {
    // The hottest expert-parallel rank receives at most every rank's tokens, each once per local
    // expert it picks: ep x min(top_k, experts per rank) copies per token against top_k on average.
    // Search (Checks::passed) applies one factor to layouts of every ep and is not refused by it:
    // where it exceeds this bound it errs high.
    const std::int64_t ep = layout.config.ep, local = std::max<std::int64_t>(1, m.moe.num_routed_experts / ep);
    const double most = static_cast<double>(ep * std::min(m.moe.top_k, local)) / static_cast<double>(m.moe.top_k);
    if (t.moe_imbalance > most * (1 + 1e-12)) {
      throw InputError("--moe-imbalance", fmt::format("{}", t.moe_imbalance),
                       fmt::format("a factor from 1 to {:g}: at ep {} with top-{} routing over {} experts a rank receives at most "
                                   "ep x min(top_k, experts per rank) / top_k times the average",
                                   most, ep, m.moe.top_k, m.moe.num_routed_experts));
    }
  }
  const std::int64_t vocab = padded_vocab(m.vocab, t.vocab_multiple.value_or(profile.vocab_multiple), layout.config.tp);
  detail::EvalContext c{cm, m, profile, layout, t, attention, vocab, microbatches_per_step(t, layout), detail};
  c.allowance = detail::allowance(c);
  return c;
}

// Parameters, activations and every ledger category of the stages in `stages` (all of a report's,
// or one).
void cost_stages(const detail::EvalContext& c, EvalCache* cache, std::span<StageReport> stages) {
  thread_local detail::Shares local;  // used without a cache only; large, so not built per call
  const detail::Shares& shares = detail::shares_for(c, cache, local);
  for (auto& st : stages) detail::assign_params(c, shares, st);
  if (c.profile.states->prepare != nullptr) {
    for (auto& st : stages) c.profile.states->prepare(c, shares, st);
  }
  thread_local detail::ChunkActivations chunks;
  detail::chunk_activations(c, cache, chunks, stages.size() == 1 ? &stages[0] : nullptr);
  try {
    const detail::Runtime runtime = detail::runtime_bytes(c);
    const Bytes cp_block = detail::cp_kv_block(c);
    for (auto& st : stages) cost_stage(c, chunks, cp_block, runtime, st);
  } catch (const OverflowError& e) {
    // Each layer's tensors fit (chunk_activations checks them), but a stage's sum of them over
    // its layers and micro-batches in flight does not: the input that scales it is named, not the
    // ledger line where the sum overflowed.
    // With the micro-batches per step given (--global-batch), the schedule may hold all of them
    // (GPipe): that count is named too.
    if (c.t.global_batch) {
      throw InputError("--micro-batch/--seq-len/--global-batch",
                       fmt::format("{} x {}, global batch {}", c.t.micro_batch, c.t.seq_len, *c.t.global_batch),
                       fmt::format("a batch, sequence and micro-batch count whose per-GPU byte totals fit in 64 bits "
                                   "(a stage's {} overflows)",
                                   e.field()));
    }
    throw InputError("--micro-batch/--seq-len", fmt::format("{} x {}", c.t.micro_batch, c.t.seq_len),
                     fmt::format("a batch and sequence whose per-GPU byte totals fit in 64 bits (a stage's {} overflows)",
                                 e.field()));
  }
}

}  // namespace

void analyze_into(const CompiledModel& cm, const Layout& layout, const TrainingConfig& t, MemoryReport& r,
                  EvalCache* cache, Detail detail, Checks checks) {
  detail::EvalContext c = make_context(cm, layout, t, detail, checks);
  c.cache = cache;
  init_report(c, r);
  cost_stages(c, cache, r.stages);
  for (const auto& st : r.stages) {
    if (st.bytes.total() > r.stages[idx(r.peak_stage)].bytes.total()) r.peak_stage = st.stage;
  }
}

Bytes analyze_stage_total(const CompiledModel& cm, const Layout& layout, const TrainingConfig& t, std::int64_t stage,
                          StageReport& st, EvalCache* cache, Checks checks) {
  detail::EvalContext c = make_context(cm, layout, t, Detail::totals, checks);
  c.cache = cache;
  if (stage < 0 || stage >= static_cast<std::int64_t>(layout.rank_chunks.size())) {
    throw std::logic_error("analyze_stage_total: no such stage");
  }
  init_stage(c, idx(stage), st);
  cost_stages(c, cache, std::span<StageReport>(&st, 1));
  return st.bytes.total();
}

std::vector<StageFit> fit(const MemoryReport& r, Bytes capacity) {
  std::vector<StageFit> out;
  for (const auto& st : r.stages) {
    const std::uint64_t total = st.bytes.total().value(), cap = capacity.value();
    StageFit f;
    f.stage = st.stage;
    f.fits = total <= cap;
    // Both are far below 2^63 for any real report; saturate rather than wrap otherwise.
    const auto diff = [](std::uint64_t a, std::uint64_t b) {
      return static_cast<std::int64_t>(std::min<std::uint64_t>(a - b, static_cast<std::uint64_t>(INT64_MAX)));
    };
    f.headroom_bytes = f.fits ? diff(cap, total) : -diff(total, cap);
    out.push_back(f);
  }
  return out;
}

}  // namespace moemem
