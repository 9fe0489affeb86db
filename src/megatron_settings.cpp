// A Megatron script's settings onto a Request, under the settings given otherwise.
#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "moemem/megatron_args.hpp"

namespace moemem {

std::string Provenance::describe() const { return fmt::format("line {}: {}", line, text); }

namespace {

using Given = std::set<std::string>;

// The script's setting onto `target`, unless `flag` is given.
template <class T, class Target>
void put(const Setting<T>& s, const char* flag, const Given& given, Target& target) {
  if (s && !given.contains(flag)) target = s->value;
}

void apply_layout(const MegatronSettings& s, ParallelConfig& p, const Given& given) {
  put(s.tp, "--tp", given, p.tp);
  put(s.pp, "--pp", given, p.pp);
  put(s.cp, "--cp", given, p.cp);
  put(s.ep, "--ep", given, p.ep);
  put(s.etp, "--etp", given, p.etp);  // unset: make_scenario makes it the final tp (Megatron's default)
  put(s.vpp, "--vpp", given, p.vpp);
  put(s.sp, "--sp", given, p.sp);
  put(s.pipeline_layout, "--pipeline-model-parallel-layout", given, p.pipeline_layout);
  put(s.first_stage_layers, "--decoder-first-pipeline-num-layers", given, p.first_stage_layers);
  put(s.last_stage_layers, "--decoder-last-pipeline-num-layers", given, p.last_stage_layers);
  put(s.account_for_embedding, "--account-for-embedding-in-pipeline-split", given, p.account_for_embedding);
  put(s.account_for_loss, "--account-for-loss-in-pipeline-split", given, p.account_for_loss);
}

void apply_training(const MegatronSettings& s, TrainingRequest& t, const Given& given) {
  put(s.micro_batch, "--micro-batch", given, t.micro_batch);
  put(s.global_batch, "--global-batch", given, t.global_batch);
  put(s.seq_len, "--seq-len", given, t.seq_len);
  put(s.recompute, "--recompute", given, t.recompute);
  put(s.recompute_modules, "--recompute-modules", given, t.recompute_modules);
  // Megatron reads the method and group size only with a granularity (and asserts against them
  // with selective, which resolve_training refuses in the same way); without one it ignores them
  // (parse_megatron_args notes it), and so does moemem. A granularity given inline other than full
  // replaces the script's, and its method with it.
  if (t.recompute && (*t.recompute == Recompute::full || !given.contains("--recompute"))) {
    put(s.recompute_method, "--recompute-method", given, t.recompute_method);
    put(s.recompute_num_layers, "--recompute-num-layers", given, t.recompute_num_layers);
  }
  put(s.cpu_offload_layers, "--cpu-offloading-num-layers", given, t.cpu_offload_layers);
  put(s.params_dtype, "--params-dtype", given, t.params_dtype);
  put(s.main_grads_dtype, "--main-grads-dtype", given, t.main_grads_dtype);
  put(s.main_params_dtype, "--main-params-dtype", given, t.main_params_dtype);
  put(s.exp_avg_dtype, "--exp-avg-dtype", given, t.exp_avg_dtype);
  put(s.exp_avg_sq_dtype, "--exp-avg-sq-dtype", given, t.exp_avg_sq_dtype);
  put(s.fp8, "--fp8", given, t.fp8);
  // An inline --zero says how the optimizer is sharded: it wins over the script's
  // --use-distributed-optimizer as any inline flag wins over the script.
  if (!given.contains("--zero")) put(s.distributed_optimizer, "--distributed-optimizer", given, t.distributed_optimizer);
  put(s.optimizer_offload, "--optimizer-cpu-offload", given, t.optimizer_offload);
  put(s.shared_expert_overlap, "--moe-shared-expert-overlap", given, t.shared_expert_overlap);
  put(s.ep_overlap, "--overlap-moe-expert-parallel-comm", given, t.ep_overlap);
  put(s.delay_wgrad, "--delay-wgrad-compute", given, t.delay_wgrad);
  put(s.tp_comm_overlap, "--tp-comm-overlap", given, t.tp_comm_overlap);
  put(s.no_rope_fusion, "--no-rope-fusion", given, t.no_rope_fusion);
  put(s.no_grad_accum_fusion, "--no-gradient-accumulation-fusion", given, t.no_grad_accum_fusion);
  put(s.no_attention_mask, "--no-create-attention-mask-in-dataloader", given, t.no_dataloader_attention_mask);
  put(s.cuda_graph_impl, "--cuda-graph-impl", given, t.cuda_graphs.impl);
  put(s.cuda_graph_scope, "--cuda-graph-scope", given, t.cuda_graphs.scope);
  put(s.vocab_multiple, "--make-vocab-size-divisible-by", given, t.vocab_multiple);
  put(s.attention, "--attention", given, t.attention);
  put(s.dispatcher, "--moe-token-dispatcher", given, t.dispatcher);
  put(s.moe_capacity_factor, "--moe-capacity-factor", given, t.moe_capacity_factor);
  put(s.hidden_dropout, "--hidden-dropout", given, t.hidden_dropout);
  put(s.attention_dropout, "--attention-dropout", given, t.attention_dropout);
}

// Megatron derives dp from the world size; so does moemem when the script gives it.
void derive_dp(const MegatronSettings& s, ParallelConfig& p, const Given& given) {
  if (!s.world_size || given.contains("--dp")) return;
  const std::int64_t world = s.world_size->value;
  std::int64_t per_replica = 0;
  if (__builtin_mul_overflow(p.tp, p.pp, &per_replica) || __builtin_mul_overflow(per_replica, p.cp, &per_replica)) {
    throw InputError("--megatron-args world size", std::to_string(world), "a multiple of tp*pp*cp (which overflows 64 bits)");
  }
  if (per_replica < 1 || world % per_replica != 0) {
    throw InputError("--megatron-args world size", std::to_string(world), fmt::format("a multiple of tp*pp*cp = {}", per_replica));
  }
  p.dp = world / per_replica;
}

// What the script must say, unless the command line says it: a flag moemem cannot model is
// refused, and a script without a model, a vocabulary or a layout is an error, never a default.
void refuse_incomplete(const MegatronSettings& s, const Given& given) {
  if (!s.unmodelled.empty()) {
    const auto& u = s.unmodelled.front();
    throw InputError(fmt::format("{}: {}", s.source, u.flag), u.value,
                     fmt::format("a launch without it: {} changes memory and is not modelled yet", u.what));
  }

  const bool named = given.contains("--model");
  if (!s.model && !named) {
    // A file the script sources but moemem could not read is the usual reason: say which.
    std::string unread;
    for (const auto& n : s.notes) {
      if (n.find(" not read (") != std::string::npos) unread += "; " + n;
    }
    throw InputError(fmt::format("--megatron-args {}", s.source), "no model",
                     "a script that gives its model (--num-layers, --hidden-size, --num-attention-heads, ...), or "
                     "--model" + unread);
  }
  if (s.model && s.model->vocab == 0 && !named) {
    throw InputError(fmt::format("{}: --vocab-size", s.source), "missing",
                     fmt::format("the vocabulary size ({}; Megatron reads it from the tokenizer): add --vocab-size N "
                                 "to the script, or give --model",
                                 s.vocab_missing));
  }
  const bool script_layout = s.tp || s.pp || s.cp || s.ep || s.etp || s.world_size || s.pipeline_layout;
  const bool inline_layout = given.contains("--tp") || given.contains("--pp") || given.contains("--dp") ||
                             given.contains("--ep") || given.contains("--cp");
  if (!script_layout && !inline_layout) {
    throw InputError(fmt::format("--megatron-args {}", s.source), "no layout",
                     "a script that gives its parallel layout (--tensor-model-parallel-size, "
                     "--pipeline-model-parallel-size, --expert-model-parallel-size, torchrun --nproc-per-node "
                     "--nnodes ...), or the layout given inline (--tp, --pp, --dp, --ep, --cp)");
  }
}

// validate_args: without a layout string, virtual stages or first/last-stage counts, the layers
// (with the embedding and the loss where the script accounts for them) must divide over the
// pipeline: "Number of layers should be divisible by the pipeline-model-parallel size".
void refuse_indivisible_layers(const Request& r) {
  const ParallelConfig& p = r.parallel;
  if (!r.model.spec || p.pp <= 1 || !p.pipeline_layout.empty() || p.vpp > 1 || p.first_stage_layers || p.last_stage_layers ||
      !p.layers_per_stage.empty()) {
    return;
  }
  const std::int64_t n = r.model.spec->num_layers + (p.account_for_embedding ? 1 : 0) + (p.account_for_loss ? 1 : 0);
  if (n % p.pp != 0) {
    throw InputError("--megatron-args --num-layers", std::to_string(r.model.spec->num_layers),
                     fmt::format("a layer count Megatron can split over pipeline-model-parallel size {} ({} units do not "
                                 "divide; add --decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers or "
                                 "--pipeline-model-parallel-layout, as Megatron would need)",
                                 p.pp, n));
  }
}

}  // namespace

void apply_megatron_settings(const MegatronSettings& s, Request& r, const std::set<std::string>& given) {
  refuse_incomplete(s, given);
  if (s.model && !given.contains("--model")) r.model.spec = s.model;
  put(s.mtp, "--mtp", given, r.model.mtp);
  apply_layout(s, r.parallel, given);
  apply_training(s, r.training, given);
  derive_dp(s, r.parallel, given);
  refuse_indivisible_layers(r);
  // validate_args: args.global_batch_size = micro_batch_size * data_parallel_size when not given.
  if (s.micro_batch && !s.global_batch && !given.contains("--global-batch")) {
    std::int64_t gbs = 0;
    if (__builtin_mul_overflow(r.training.micro_batch, r.parallel.dp, &gbs)) {
      throw InputError("--megatron-args global batch", "micro-batch x dp", "a product that fits in 64 bits");
    }
    r.training.global_batch = gbs;
  }
}

}  // namespace moemem
