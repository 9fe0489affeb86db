#include "moemem/scenario.hpp"

#include <algorithm>
#include <string>
#include <tuple>
#include <fmt/format.h>

#include "moemem/config.hpp"
#include "moemem/deepspeed.hpp"
#include "moemem/errors.hpp"

namespace moemem {

void apply_zero_stage(StateSettings& s, int zero) {
  s.zero = zero;
  if (s.gradients_follow_zero) s.precision.gradients = s.precision.weights;
}

ModelSpec load_requested_model(const ModelRequest& r, const Profile& profile) {
  ModelSpec m = r.spec ? *r.spec : load_model(r.source);
  if (r.mtp) set_mtp_layers(m, r.mtp);
  else if (!profile.include_mtp_by_default) m.mtp_layers = 0;
  return m;
}

namespace {

void resolve_states(const TrainingRequest& r, const Profile& profile, TrainingConfig& t) {
  const std::int64_t zero = r.zero.value_or(0);
  if (zero < 0 || zero > 3) throw InputError("--zero", std::to_string(zero), "0, 1, 2 or 3");
  t.zero = static_cast<int>(zero);
  if (r.distributed_optimizer) {
    if (zero > 1) {
      throw InputError("--distributed-optimizer", "with --zero " + std::to_string(zero),
                       "no --zero, or --zero 1, with it (the distributed optimizer is ZeRO-1)");
    }
    t.zero = 1;
  }
  t.precision = profile.default_precision;
  if (r.params_dtype) t.precision.weights = *r.params_dtype;
  // A bare --zero under the hf profile is DeepSpeed's defaults with bf16: gradients accumulate in
  // the model's dtype (engine.py get_data_types: grad_accum_dtype None -> the model's; without ZeRO
  // too since 889f0ead2, DeepSpeed 0.17.6, whose non-ZeRO mode keeps bf16 gradients and steps fp32
  // master copies: hf_deepspeed.cpp), in the host's fp32 partition with offload, as a ds_config
  // gives them (deepspeed.cpp).
  t.gradients_follow_zero = profile.name == "hf" && !r.deepspeed && !r.main_grads_dtype && !r.fsdp.hf_ddp &&
                            !r.fsdp.accelerate_fsdp() && r.optimizer_offload.value_or(0) == 0;
  apply_zero_stage(t, t.zero);
  if (r.main_grads_dtype) t.precision.gradients = *r.main_grads_dtype;
  if (r.main_params_dtype) t.precision.master = *r.main_params_dtype;
  if (r.exp_avg_dtype) t.precision.exp_avg = *r.exp_avg_dtype;
  if (r.exp_avg_sq_dtype) t.precision.exp_avg_sq = *r.exp_avg_sq_dtype;
  if (profile.fixed_precision) {
    // torchtitan: FSDP2 mixed precision (parallelize apply_fsdp, MixedPrecisionPolicy param_dtype
    // bfloat16, reduce_dtype float32) keeps fp32 sharded parameters (the master weights), gradients
    // and AdamW moments (the states take the parameters' dtype) and bf16 working copies.
    const auto& d = profile.default_precision;
    for (const auto& [flag, given, fixed] : {std::tuple{"--params-dtype", r.params_dtype, d.weights},
                                             std::tuple{"--main-grads-dtype", r.main_grads_dtype, d.gradients},
                                             std::tuple{"--main-params-dtype", r.main_params_dtype, d.master},
                                             std::tuple{"--exp-avg-dtype", r.exp_avg_dtype, d.exp_avg},
                                             std::tuple{"--exp-avg-sq-dtype", r.exp_avg_sq_dtype, d.exp_avg_sq}}) {
      if (given && *given != fixed) {
        throw InputError(flag, std::string(name_of(*given)),
                         fmt::format("{} with the {} profile (FSDP2: bf16 working copies; fp32 sharded parameters, "
                                     "gradients and AdamW moments)",
                                     name_of(fixed), profile.name));
      }
    }
  }
  t.deepspeed = r.deepspeed;
}

void resolve_recompute(const TrainingRequest& r, TrainingConfig& t) {
  t.recompute = r.recompute.value_or(Recompute::none);
  if (r.recompute_modules) {
    if (t.recompute == Recompute::none) t.recompute = Recompute::selective;  // modules imply selective
    if (t.recompute != Recompute::selective) {
      throw InputError("--recompute-modules", recompute_modules_text(*r.recompute_modules), "to be used with --recompute selective");
    }
    t.recompute_modules = *r.recompute_modules;
  }
  // Megatron-Core reads --recompute-method and --recompute-num-layers for full recomputation only:
  // with selective recomputation it asserts against them (arguments.py validate_args;
  // TransformerConfig.__post_init__), without recomputation nothing reads them. moemem would
  // silently drop them, so they are refused unless --recompute full.
  if (t.recompute != Recompute::full) {
    const char* granularity = t.recompute == Recompute::selective ? "selective" : "none";
    if (r.recompute_method) {
      throw InputError("--recompute-method", std::string(name_of(*r.recompute_method)),
                       fmt::format("to be used with --recompute full (the recomputation here is {}; Megatron refuses a "
                                   "method with selective recomputation and reads none without recomputation)",
                                   granularity));
    }
    if (r.recompute_num_layers) {
      throw InputError("--recompute-num-layers", std::to_string(*r.recompute_num_layers),
                       fmt::format("to be used with --recompute full (the recomputation here is {})", granularity));
    }
  }
  t.recompute_method = r.recompute_method.value_or(RecomputeMethod::uniform);
  t.recompute_num_layers = r.recompute_num_layers.value_or(1);
  if (r.cpu_offload_layers < 0) {
    throw InputError("--cpu-offloading-num-layers", std::to_string(r.cpu_offload_layers), "0 or more decoder layers");
  }
  t.cpu_offload_layers = r.cpu_offload_layers;
}

// torchtitan's activation checkpointing. Its default differs by release: up to 0.2.2
// (job_config.py ActivationCheckpoint: mode "selective", selective_ac_option "2") every second
// block is checkpointed whole (activation_checkpoint.py _apply_layer_sac: a process-wide counter,
// the block checkpointed when it is a multiple of the option); from c5d93d109 (2026-06-15,
// `current`) the Trainer's default policy is SelectiveAC, per-op SAC. A run without --recompute
// gets its release's default, as torchtitan would, and says so.
void resolve_titan_checkpointing(const TrainingRequest& r, const Profile& profile, TrainingConfig& t) {
  const bool titan = profile.name == "torchtitan";
  const bool current = r.torchtitan_version == TorchtitanVersion::current;
  if (r.selective_ac_option) {
    const std::string& text = *r.selective_ac_option;
    if (!titan) {
      throw InputError("--selective-ac-option", text,
                       fmt::format("the torchtitan profile (its activation_checkpoint.selective_ac_option), not {}", profile.name));
    }
    if (r.recompute && *r.recompute != Recompute::selective) {
      throw InputError("--selective-ac-option", text,
                       fmt::format("--recompute selective or no --recompute (torchtitan reads the option in mode "
                                   "selective; here it is {})",
                                   name_of(*r.recompute)));
    }
    if (text == "op") {
      t.recompute = Recompute::selective;
      return;
    }
    std::int64_t every = -1;
    if (!text.empty() && text.size() <= 6 && std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      every = std::stoll(text);
    }
    if (every < 0) throw InputError("--selective-ac-option", text, "op, or a block frequency N >= 0 (at most 6 digits)");
    if (current) {
      throw InputError("--selective-ac-option", text,
                       "op with --torchtitan-version current (layer SAC went with c5d93d109, 2026-06-15); a block "
                       "frequency with --torchtitan-version 0.2.2 or earlier");
    }
    // 0 checkpoints every block, as 1 does (`not ac_freq or count % ac_freq == 0`).
    t.recompute = Recompute::full;
    t.recompute_method = RecomputeMethod::every;
    t.recompute_num_layers = std::max<std::int64_t>(every, 1);
    return;
  }
  if (!titan) return;
  // Megatron's grouping: torchtitan has none but its default (each block alone, uniform 1).
  if (t.recompute == Recompute::full && (t.recompute_method != RecomputeMethod::uniform || t.recompute_num_layers != 1)) {
    throw InputError(r.recompute_method ? "--recompute-method" : "--recompute-num-layers",
                     r.recompute_method ? std::string(name_of(*r.recompute_method)) : std::to_string(*r.recompute_num_layers),
                     "not with the torchtitan profile (it checkpoints whole blocks: --recompute full for every one, "
                     "--selective-ac-option N for every N-th)");
  }
  if (!r.recompute && !r.recompute_modules) {
    t.recompute_defaulted = true;
    if (current) {
      t.recompute = Recompute::selective;
    } else {
      t.recompute = Recompute::full;
      t.recompute_method = RecomputeMethod::every;
      t.recompute_num_layers = 2;
    }
  }
}

}  // namespace

TrainingConfig resolve_training(const TrainingRequest& request, const Profile& profile) {
  TrainingRequest r = request;
  if (r.recipe) apply_recipe(*r.recipe, r);
  TrainingConfig t;
  t.micro_batch = r.micro_batch;
  t.seq_len = r.seq_len;
  t.global_batch = r.global_batch;
  resolve_states(r, profile, t);
  t.vocab_multiple = r.vocab_multiple;
  t.attention = r.attention;
  if (t.attention == AttentionKernel::sdpa && !profile.supports_sdpa) {
    throw InputError("--attention", "sdpa",
                     fmt::format("flash or eager with the {} profile (sdpa names Hugging Face's attn_implementation: "
                                 "--profile hf)",
                                 profile.name));
  }
  t.logits_dtype = r.logits_dtype;
  t.fp8 = r.fp8.value_or(Fp8Recipe::none);
  if (r.recipe) {
    const auto foreign = static_cast<std::uint16_t>(r.recipe_off & ~techniques_of(*r.recipe));
    if (foreign != 0) {
      throw InputError("--recipe-off", techniques_text(foreign),
                       fmt::format("techniques of recipe {}: {}", name_of(*r.recipe), techniques_text(techniques_of(*r.recipe))));
    }
    apply_recipe_numerics(*r.recipe, r.recipe_off, t);
  } else if (r.recipe_off != 0) {
    throw InputError("--recipe-off", "given", "a --recipe whose techniques to leave out");
  }
  if (r.optimizer_offload) {
    const double f = *r.optimizer_offload;
    if (!(f >= 0 && f <= 1)) throw InputError("--optimizer-offload-fraction", fmt::format("{}", f), "a fraction from 0 to 1");
    t.optimizer_offload = f;
  }
  t.hidden_dropout = r.hidden_dropout.value_or(profile.default_dropout);
  t.attention_dropout = r.attention_dropout.value_or(profile.default_dropout);
  t.rope_fusion = !r.no_rope_fusion;
  t.megatron_version = r.megatron_version;
  t.torchtitan_version = r.torchtitan_version;
  t.transformers_version = r.transformers_version;
  t.deepspeed_release = r.deepspeed_release;
  t.experts_implementation = r.experts_implementation;
  t.moe_imbalance = r.moe_imbalance.value_or(1.0);
  t.moe_capacity_factor = r.moe_capacity_factor;
  t.deepep = r.dispatcher == Dispatcher::deepep;
  t.allgather = r.dispatcher == Dispatcher::allgather;
  t.shared_expert_overlap = r.shared_expert_overlap;
  t.ep_overlap = r.ep_overlap;
  t.delay_wgrad = r.delay_wgrad;
  t.tp_comm_overlap = r.tp_comm_overlap;
  t.gradient_accumulation_fusion = !r.no_grad_accum_fusion;
  t.dataloader_attention_mask = !r.no_dataloader_attention_mask;
  t.cuda_graphs = r.cuda_graphs;
  t.overhead = r.overhead;
  t.fragmentation_pct = r.fragmentation_pct;
  t.cuda_context = r.cuda_context;
  t.nccl_per_group = r.nccl_per_group;
  static_cast<FsdpSettings&>(t) = r.fsdp;
  static_cast<FinetuneSettings&>(t) = r.finetune;
  // The Trainer's SGD (trainer.py get_optimizer_cls_and_kwargs, optim "sgd": torch.optim.SGD with
  // the learning rate only) has torch's default momentum 0, so no momentum buffer.
  if (profile.name == "hf" && t.optimizer == OptimizerKind::sgd && !t.sgd_momentum_given) t.sgd_momentum = 0;
  resolve_recompute(r, t);
  resolve_titan_checkpointing(r, profile, t);
  // torchtitan's selective checkpointing is per-op SAC over a fixed op list (its
  // activation_checkpoint.selective_ac_option "op"): it takes no module list, which would be
  // echoed and ignored.
  if (r.recompute_modules && profile.name == "torchtitan") {
    throw InputError("--recompute-modules", recompute_modules_text(*r.recompute_modules),
                     "no module list with the torchtitan profile (--recompute selective is torchtitan's per-op SAC, "
                     "which saves a fixed set of ops' outputs)");
  }
  return t;
}

namespace {

void check_one_pipeline_split(const ParallelConfig& p) {
  const int ways = (p.pipeline_layout.empty() ? 0 : 1) + (p.layers_per_stage.empty() ? 0 : 1) +
                   (p.first_stage_layers || p.last_stage_layers ? 1 : 0) +
                   (p.account_for_embedding || p.account_for_loss ? 1 : 0);
  if (ways > 1) {
    throw InputError("pipeline split", "several ways given",
                     "one of --pipeline-model-parallel-layout, --layers-per-stage, --decoder-first/last-pipeline-num-layers, "
                     "--account-for-embedding/loss-in-pipeline-split");
  }
}

// The layout with etp, when not given, at the profile's default (Megatron: tp for a model with
// routed experts, megatron/training/arguments.py validate_args); an error about etp then says
// where its value came from.
Layout resolve_layout_with_default_etp(const ModelSpec& m, const ParallelConfig& given, const Profile& profile) {
  ParallelConfig p = given;
  // torchtitan reads expert_tensor_parallel_degree only with ep > 1 (parallel_dims.py); at ep 1
  // apply_moe_ep_tp shards the routed experts over the TP mesh whatever it says, and its shipped
  // tomls write 1: a given etp there is the TP degree.
  if (given.etp && profile.etp_follows_tp_without_ep && p.ep == 1 && m.is_moe()) p.etp = p.tp;
  if (given.etp) return resolve_layout(m, p);
  const bool follows = profile.etp_follows_tp || (profile.etp_follows_tp_without_ep && p.ep == 1);
  p.etp = follows && m.is_moe() ? p.tp : 1;
  LayoutVerdict v = check_layout(m, p);
  if (v.error) {
    const InputError& e = *v.error;
    if (*p.etp == 1 || e.field().find("--etp") == std::string::npos) throw e;
    throw InputError(e.field(), e.value(),
                     fmt::format("{}; etp was not given and is tp = {}, Megatron's default (--etp sets it)", e.accepted(), *p.etp));
  }
  v.layout->etp_defaulted = true;
  return std::move(*v.layout);
}

}  // namespace

Scenario make_scenario(const Request& r) {
  Scenario s;
  s.profile = &get_profile(r.profile);
  s.model = load_requested_model(r.model, *s.profile);
  s.inventory = build_inventory(s.model);
  check_one_pipeline_split(r.parallel);
  ParallelConfig parallel = r.parallel;
  // A DeepSeek recipe's default split balances the embedding, MTP and loss as a layer each, as the
  // V3 report's DualPipe places them (the ends carry fewer layers); a split given is kept.
  const bool split_given = !parallel.pipeline_layout.empty() || !parallel.layers_per_stage.empty() ||
                           parallel.first_stage_layers || parallel.last_stage_layers || parallel.account_for_embedding ||
                           parallel.account_for_loss;
  if (r.training.recipe && !split_given) parallel.balance_units = true;
  // torchtitan's own default split (its first and last stages one layer fewer).
  if (s.profile->name == "torchtitan" && !split_given) parallel.titan_split = true;
  if (s.profile->sp_with_tp && parallel.tp > 1) parallel.sp = true;
  // Sequence parallelism splits over the TP group: at tp 1 there is nothing to split, and
  // Megatron turns it off (arguments.py: "Disabling sequence parallelism because tensor model
  // parallelism is disabled"), so the header says "sp off" rather than echo the flag.
  if (parallel.tp == 1) parallel.sp = false;
  s.layout = resolve_layout_with_default_etp(s.model, parallel, *s.profile);
  s.training = resolve_training(r.training, *s.profile);
  apply_deepspeed_accumulation(s.training, s.layout.config.dp);
  validate_training(s.training, s.layout);
  if (auto problem = s.profile->check(s.model, s.layout, s.training)) throw *problem;
  s.training.linear_routers = s.profile->peft_modules && hf_router_is_linear(s.model.model_type);
  s.training.linear_experts = !s.profile->peft_modules || hf_experts_are_linear(s.model.model_type);
  s.inventory = apply_finetune(s.inventory, s.training);  // LoRA: the base frozen, adapters added
  check_peft_on_experts(*s.profile, s.model, s.training, s.inventory);
  return s;
}

// transformers 5 holds routed experts as 3-D parameters, which PEFT (0.21) adapts through its own
// wrapper: on a GPU a Qwen3-MoE layer's all-linear r 16 trained 20,760,576 parameters where one
// adapter per expert linear gives 17,614,848, and the step allocated 11.6% more than moemem's
// per-expert adapters (docs/validation.md); bitsandbytes' NF4 replacement (QLoRA) takes nn.Linear
// modules only. Neither is modelled: refused, not mis-costed.
void check_peft_on_experts(const Profile& profile, const ModelSpec& m, const TrainingConfig& t, const Inventory& inv) {
  if (!profile.peft_modules || t.transformers_version != TransformersVersion::v5 || m.moe.num_routed_experts == 0) return;
  if (t.finetune == Finetune::qlora) {
    throw InputError("--finetune", "qlora",
                     "lora or full for an MoE model under transformers 5 (bitsandbytes' 4-bit replacement takes nn.Linear "
                     "modules, not its 3-D expert parameters; not modelled), or --transformers-version 4");
  }
  for (const Tensor& x : inv.tensors) {
    if (x.adapter == Adapter::none || !x.is_routed_expert) continue;
    throw InputError("--lora-targets", t.lora_targets,
                     "targets that leave out the routed experts under transformers 5 (PEFT adapts its 3-D expert "
                     "parameters through a wrapper moemem does not model: e.g. q_proj,k_proj,v_proj,o_proj), or "
                     "--transformers-version 4 (one adapter per expert nn.Linear)");
  }
}

}  // namespace moemem
