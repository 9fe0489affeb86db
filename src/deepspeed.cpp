// DeepSpeed's JSON configuration (include/moemem/deepspeed.hpp). Facts from deepspeedai/DeepSpeed
// edaa7221: deepspeed/runtime/zero/config.py (keys, defaults), stage_1_and_2.py and stage3.py
// (the buffers each key sizes).
#include "moemem/deepspeed.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "moemem/errors.hpp"
#include "moemem/json_limits.hpp"

namespace moemem {

namespace {

using nlohmann::json;

std::string field(const std::string& source, std::string_view key) { return fmt::format("{}: {}", source, key); }

// A size in elements: a non-negative integer up to 9e15 (5e8 is written as a float in many
// configs; one bound for both forms, so that no size wraps or overflows the byte arithmetic), or
// "auto" where the Hugging Face Trainer fills it in (nullopt).
std::optional<std::int64_t> size_value(const json& v, const std::string& source, std::string_view key, bool auto_ok) {
  constexpr std::int64_t kMaxElements = 9'000'000'000'000'000;
  if (auto_ok && v.is_string() && v.get<std::string>() == "auto") return std::nullopt;
  if (v.is_number_unsigned() && v.get<std::uint64_t>() <= static_cast<std::uint64_t>(kMaxElements)) {
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  }
  if (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() >= 0 &&
      v.get<std::int64_t>() <= kMaxElements) {
    return v.get<std::int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= 0 && d <= static_cast<double>(kMaxElements) && std::floor(d) == d) return static_cast<std::int64_t>(d);
  }
  throw InputError(field(source, key), v.dump(),
                   auto_ok ? "a non-negative integer up to 9e15 or \"auto\"" : "a non-negative integer up to 9e15");
}

// A batch size or step count: a positive integer up to 2^31 (moemem's --micro-batch bound is far
// below), or "auto" (nullopt).
std::optional<std::int64_t> batch_value(const json& v, const std::string& source, std::string_view key) {
  if (v.is_string() && v.get<std::string>() == "auto") return std::nullopt;
  if (v.is_number_unsigned() && v.get<std::uint64_t>() >= 1 && v.get<std::uint64_t>() <= (std::uint64_t{1} << 31)) {
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  }
  throw InputError(field(source, key), v.dump(), "a positive integer or \"auto\"");
}

bool bool_value(const json& v, const std::string& source, std::string_view key) {
  if (!v.is_boolean()) throw InputError(field(source, key), v.dump(), "true or false");
  return v.get<bool>();
}

// A section's "enabled" (bf16, fp16): true, false or "auto" (the Trainer's --bf16/--fp16 decide;
// read as on for bf16, off for fp16).
// The section's other keys (runtime/constants.py, precision_config.py): loss scaling and overflow
// checks change no device memory; bf16_master_weights_and_grads / bf16_optimizer_states /
// fp16_master_weights_and_grads (16-bit master partitions and moments) and fp16's auto_cast (fp32
// weights under autocast) do, and are not modelled: refused when on, like any unknown key.
bool enabled(const json& section, const std::string& source, std::string_view key, bool auto_means) {
  if (!section.is_object()) throw InputError(field(source, key), section.dump(), "an object");
  // check_grad_overflow is DeepSpeedBF16Config's field (e440506be); check_overflow the older constant.
  static const std::set<std::string, std::less<>> kBf16Quiet = {"enabled", "immediate_grad_update", "check_grad_overflow",
                                                                "check_overflow"};
  static const std::set<std::string, std::less<>> kFp16Quiet = {"enabled",    "loss_scale",          "initial_scale_power",
                                                                "loss_scale_window", "hysteresis", "consecutive_hysteresis",
                                                                "min_loss_scale"};
  static const std::set<std::string, std::less<>> kOffWhenFalse = {"bf16_master_weights_and_grads", "bf16_optimizer_states",
                                                                   "fp16_master_weights_and_grads", "auto_cast"};
  const auto& quiet = key == "bf16" ? kBf16Quiet : kFp16Quiet;
  for (const auto& [k, v] : section.items()) {
    if (quiet.contains(k)) continue;
    const std::string name = fmt::format("{}.{}", key, k);
    if (kOffWhenFalse.contains(k) && (key == "bf16") == k.starts_with("bf16")) {
      if (!bool_value(v, source, name)) continue;
      throw InputError(field(source, name), "true",
                       "false or absent (16-bit master weights, 16-bit optimizer states and fp16 autocast over fp32 "
                       "weights are not modelled)");
    }
    throw InputError(field(source, name), "present",
                     fmt::format("a key of the {} section moemem reads: {} (loss scaling and overflow checks change no memory)",
                                 key, key == "bf16" ? "enabled, immediate_grad_update, check_grad_overflow"
                                                    : "enabled, loss_scale, initial_scale_power, loss_scale_window, hysteresis, "
                                                      "consecutive_hysteresis, min_loss_scale"));
  }
  const auto it = section.find("enabled");
  if (it == section.end()) return false;
  if (it->is_string() && it->get<std::string>() == "auto") return auto_means;
  return bool_value(*it, source, fmt::format("{}.enabled", key));
}

// Keys of zero_optimization that change no device memory (communication choices, checkpoint
// loading and saving, checks). stage3_max_reuse_distance does change it: a parameter used again
// within that many elements stays gathered (partitioned_param_coordinator.py __params_to_release),
// which moemem does not model (the hf profile's assumptions say so). sub_group_size is read: it
// bounds the partition ZeRO-3's optimizer steps at once (Adafactor's step temporaries).
const std::set<std::string, std::less<>> kZeroQuietKeys = {
    "allgather_partitions",   "reduce_scatter",     "round_robin_gradients",
    "load_from_fp32_weights", "elastic_checkpoint", "ignore_unused_parameters",
    "stage3_gather_16bit_weights_on_model_save",    "stage3_gather_fp16_weights_on_model_save",
    "stage3_max_reuse_distance", "use_multi_rank_bucket_allreduce", "memory_efficient_linear",
    "log_trace_cache_warnings", "enable_sanity_checks"};

// Top-level keys that change no device memory; bf16, fp16, optimizer and zero_optimization are read.
const std::set<std::string, std::less<>> kQuietKeys = {
    "gradient_clipping",
    "steps_per_print", "wall_clock_breakdown", "scheduler", "zero_allow_untested_optimizer", "prescale_gradients",
    "gradient_predivide_factor", "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comms_logger",
    "zero_force_ds_cpu_optimizer", "dump_state", "memory_breakdown", "checkpoint"};

// offload_optimizer / offload_param: {"device": "none" | "cpu" | "nvme", ...}. Returns whether
// the device is cpu; nvme (and ratio < 1, offload_param) are refused.
bool offload_to_cpu(const json& v, const std::string& source, std::string_view key) {
  if (v.is_null()) return false;
  if (!v.is_object()) throw InputError(field(source, key), v.dump(), "an object with \"device\"");
  const auto d = v.find("device");
  const std::string device = d == v.end() ? "none" : (d->is_string() ? d->get<std::string>() : d->dump());
  if (device == "none") return false;
  if (device != "cpu") throw InputError(field(source, fmt::format("{}.device", key)), device, "none or cpu (NVMe is not modelled)");
  if (const auto r = v.find("ratio"); r != v.end() && !(r->is_number() && r->get<double>() == 1.0)) {
    throw InputError(field(source, fmt::format("{}.ratio", key)), r->dump(), "1 (a partial offload is not modelled)");
  }
  return true;
}

void read_zero(const json& z, const std::string& source, DeepSpeedConfig& ds) {
  if (!z.is_object()) throw InputError(field(source, "zero_optimization"), z.dump(), "an object");
  for (const auto& [key, v] : z.items()) {
    const std::string name = "zero_optimization." + key;
    if (key == "stage") {
      const auto s = size_value(v, source, name, false);
      if (*s > 3) throw InputError(field(source, name), v.dump(), "0, 1, 2 or 3");
      ds.stage = static_cast<int>(*s);
    } else if (key == "reduce_bucket_size") {
      ds.reduce_bucket_size = size_value(v, source, name, true);
    } else if (key == "allgather_bucket_size") {
      ds.allgather_bucket_size = size_value(v, source, name, false).value_or(0);
    } else if (key == "stage3_prefetch_bucket_size" || key == "prefetch_bucket_size") {
      ds.prefetch_bucket_size = size_value(v, source, name, true);
    } else if (key == "stage3_max_live_parameters" || key == "max_live_parameters") {
      ds.max_live_parameters = size_value(v, source, name, false).value_or(0);
    } else if (key == "stage3_param_persistence_threshold" || key == "param_persistence_threshold") {
      ds.param_persistence_threshold = size_value(v, source, name, true);
    } else if (key == "sub_group_size") {
      ds.sub_group_size = size_value(v, source, name, false).value_or(0);
      if (ds.sub_group_size < 1) throw InputError(field(source, name), v.dump(), "a positive number of elements");
    } else if (key == "overlap_comm") {
      ds.overlap_comm = bool_value(v, source, name);
    } else if (key == "contiguous_gradients") {
      ds.contiguous_gradients = bool_value(v, source, name);
    } else if (key == "offload_optimizer") {
      ds.offload_optimizer = offload_to_cpu(v, source, name);
    } else if (key == "offload_param") {
      ds.offload_param = offload_to_cpu(v, source, name);
    } else if (!kZeroQuietKeys.contains(key)) {
      throw InputError(field(source, name), v.dump(),
                       "a zero_optimization key moemem models (stage, reduce_bucket_size, allgather_bucket_size, "
                       "overlap_comm, contiguous_gradients, stage3_prefetch_bucket_size, stage3_max_live_parameters, "
                       "stage3_param_persistence_threshold, sub_group_size, offload_optimizer, offload_param; ZeRO++, MiCS "
                       "and "
                       "quantized weights or gradients are not modelled)");
    }
  }
}

void read_optimizer(const json& o, const std::string& source, DeepSpeedConfig& ds) {
  const auto t = o.is_object() ? o.find("type") : o.end();
  if (t == o.end() || !t->is_string()) throw InputError(field(source, "optimizer.type"), o.dump(), "a string");
  std::string type = t->get<std::string>();
  std::transform(type.begin(), type.end(), type.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  // deepspeed/runtime/config.py optimizer names: Adam and AdamW are FusedAdam (adam_w_mode) unless
  // params.torch_adam asks for torch.optim's (engine.py _configure_basic_optimizer), Lion FusedLion.
  // What the step holds beside the fp32 gradients without ZeRO (hf_deepspeed.cpp stage0_step):
  // FusedAdam under FP16_Optimizer, the flat copy of the converted gradients; torch.optim.AdamW
  // (foreach on CUDA unless params.fused), _foreach_sqrt's copy of exp_avg_sq; fused, nothing.
  if (type == "adam" || type == "adamw") {
    ds.optimizer = OptimizerKind::adamw;
    bool torch_adam = false, fused = false;
    if (const auto p = o.find("params"); p != o.end() && p->is_object()) {
      if (const auto ta = p->find("torch_adam"); ta != p->end()) torch_adam = bool_value(*ta, source, "optimizer.params.torch_adam");
      if (const auto f = p->find("fused"); f != p->end()) fused = bool_value(*f, source, "optimizer.params.fused");
    }
    ds.stage0_step_bytes = torch_adam && fused ? 4 : 8;
    ds.foreach_step = torch_adam && !fused;
    // optimizer.legacy_fusion (config.py get_optimizer_legacy_fusion): FP16_Optimizer then calls
    // step_fused_adam, which hands FusedAdam.step grads/output_params/scale; FusedAdam raises on
    // them ("FusedAdam has been updated", ops/adam/fused_adam.py). Only stage 0 with FusedAdam
    // reaches it; checked once the stage is known.
    if (const auto lf = o.find("legacy_fusion"); lf != o.end()) {
      ds.legacy_fusion = !torch_adam && bool_value(*lf, source, "optimizer.legacy_fusion");
    }
    return;
  }
  if (type == "lion") {
    ds.optimizer = OptimizerKind::lion;
    return;
  }
  throw InputError(field(source, "optimizer.type"), t->get<std::string>(), "Adam, AdamW or Lion");
}

}  // namespace

// Releases read against DeepSpeed's tags back to v0.15.0 (runtime/engine.py get_data_types and
// _do_optimizer_sanity_check, runtime/bf16_optimizer.py); 0.17.6 (889f0ead2) moved bf16 without
// ZeRO to the FP16 optimizers, the default path. A local suffix ("+cu124", "+889f0ead": what a
// source install reports as deepspeed.__version__) is the release it names; no leading zeros.
std::int32_t parse_deepspeed_version(std::string_view text) {
  if (text == "current") return 0;
  const auto refuse = [&] {
    return InputError("--deepspeed-version", std::string(text),
                      "current (0.17.6 and later) or a release X.Y.Z (each part 0 to 99, no leading zeros, an optional "
                      "+local suffix) from 0.15.0 (earlier releases not read)");
  };
  std::string_view release = text;
  if (const auto plus = text.find('+'); plus != std::string_view::npos) {
    const std::string_view local = text.substr(plus + 1);
    const bool ok = !local.empty() && std::all_of(local.begin(), local.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.';
    });
    if (!ok) throw refuse();
    release = text.substr(0, plus);
  }
  std::int32_t part[3] = {0, 0, 0};
  std::size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    const std::size_t start = at;
    while (at < release.size() && at - start < 3 && std::isdigit(static_cast<unsigned char>(release[at]))) {
      part[i] = part[i] * 10 + (release[at] - '0');
      ++at;
    }
    if (at == start || part[i] > 99 || (release[start] == '0' && at - start > 1)) throw refuse();
    if (i < 2) {
      if (at >= release.size() || release[at] != '.') throw refuse();
      ++at;
    }
  }
  if (at != release.size()) throw refuse();
  const std::int32_t code = part[0] * 10000 + part[1] * 100 + part[2];
  if (code < 1500) throw refuse();
  return code >= 1706 ? 0 : code;
}

std::string deepspeed_version_name(std::int32_t release) {
  if (release == 0) return "current";
  return fmt::format("{}.{}.{}", release / 10000, release / 100 % 100, release % 100);
}

DeepSpeedConfig parse_deepspeed_config(std::string_view json_text, const std::string& source) {
  check_json_limits(json_text, kConfigJsonLimits, source);
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception&) {
    throw InputError(source, "malformed JSON", "a DeepSpeed configuration (a JSON object)");
  }
  if (!j.is_object()) throw InputError(source, j.type_name(), "a DeepSpeed configuration (a JSON object)");
  DeepSpeedConfig ds;
  bool bf16 = false, fp16 = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "zero_optimization") read_zero(v, source, ds);
    else if (key == "bf16") {
      bf16 = enabled(v, source, key, true);
      if (const auto it = v.find("immediate_grad_update"); it != v.end()) {
        ds.immediate_grad_update = bool_value(*it, source, "bf16.immediate_grad_update");
      }
    }
    else if (key == "fp16") fp16 = enabled(v, source, key, false);
    else if (key == "optimizer") read_optimizer(v, source, ds);
    else if (key == "train_micro_batch_size_per_gpu") ds.micro_batch = batch_value(v, source, key);
    else if (key == "train_batch_size") ds.train_batch = batch_value(v, source, key);
    else if (key == "gradient_accumulation_steps") ds.grad_accum = batch_value(v, source, key);
    else if (!kQuietKeys.contains(key)) {
      throw InputError(field(source, key), "present",
                       "a key moemem models or knows to change no device memory (activation_checkpointing, "
                       "data_types, amp, communication_data_type and the like are not modelled)");
    }
  }
  if (!j.contains("zero_optimization")) {
    // DeepSpeed alone would run stage 0, but accelerate (the Trainer's path) refuses the config:
    // DeepSpeedPlugin.__post_init__ raises "Please specify the ZeRO optimization config".
    throw InputError(field(source, "zero_optimization"), "absent",
                     "a zero_optimization section (accelerate requires one; {\"stage\": 0} runs without ZeRO)");
  }
  if (ds.offload_optimizer && ds.stage == 0) {
    // ZeRO-Offload lives in ZeRO's optimizers (stage_1_and_2.py, stage3.py); without ZeRO the
    // engine builds no optimizer that reads it.
    throw InputError(field(source, "zero_optimization.offload_optimizer.device"), "cpu", "none at stage 0 (offload is ZeRO's)");
  }
  if (ds.legacy_fusion && ds.stage == 0) {
    throw InputError(field(source, "optimizer.legacy_fusion"), "true",
                     "false with Adam/AdamW at stage 0 (DeepSpeed's FP16_Optimizer then passes gradients to "
                     "FusedAdam.step, which raises)");
  }
  if (ds.offload_param && ds.stage != 3) {
    // DeepSpeed offloads parameters only in stage 3 (stage3.py _configure_offloading; the stage 1
    // and 2 optimizer has no offload_param).
    throw InputError(field(source, "zero_optimization.offload_param.device"), "cpu", "none below stage 3");
  }
  if (bf16 && fp16) throw InputError(field(source, "bf16.enabled/fp16.enabled"), "both", "one of the two");
  if (!bf16 && !fp16) {
    throw InputError(field(source, "bf16.enabled/fp16.enabled"), "neither", "bf16 or fp16 (fp32 training is not modelled)");
  }
  ds.dtype = bf16 ? DType::bf16 : DType::fp16;
  if (ds.train_batch && ds.micro_batch && ds.grad_accum && *ds.train_batch % (*ds.micro_batch * *ds.grad_accum) != 0) {
    // config.py _batch_assertion: train_batch_size == micro x gradient_accumulation_steps x world size.
    throw InputError(field(source, "train_batch_size"), std::to_string(*ds.train_batch),
                     fmt::format("a multiple of train_micro_batch_size_per_gpu x gradient_accumulation_steps = {} "
                                 "(DeepSpeed asserts train_batch_size = micro x steps x world size)",
                                 *ds.micro_batch * *ds.grad_accum));
  }
  return ds;
}

DeepSpeedConfig read_deepspeed_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("--deepspeed", path, "a readable DeepSpeed JSON configuration file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_deepspeed_config(text.str(), path);
}

void apply_deepspeed(const DeepSpeedConfig& ds, TrainingRequest& r) {
  if (r.zero && *r.zero != ds.stage) {
    throw InputError("--zero", std::to_string(*r.zero),
                     fmt::format("no --zero, or the DeepSpeed config's zero_optimization.stage ({})", ds.stage));
  }
  r.zero = ds.stage;
  // The batch the config fixes is the run's: --micro-batch (default 1) must agree with it, and
  // train_batch_size is the global batch (check_training then asks a multiple of micro x dp).
  if (ds.micro_batch && *ds.micro_batch != r.micro_batch) {
    throw InputError("--micro-batch", std::to_string(r.micro_batch),
                     fmt::format("{}, the DeepSpeed config's train_micro_batch_size_per_gpu (pass --micro-batch {}, or "
                                 "make the key \"auto\")",
                                 *ds.micro_batch, *ds.micro_batch));
  }
  if (ds.train_batch) {
    if (r.global_batch && *r.global_batch != *ds.train_batch) {
      throw InputError("--global-batch", std::to_string(*r.global_batch),
                       fmt::format("{}, the DeepSpeed config's train_batch_size (or no --global-batch)", *ds.train_batch));
    }
    r.global_batch = ds.train_batch;
  }
  // bf16/fp16: the module's weights (and so its gradients, stage_1_and_2.py ipg buffers and
  // grads_in_partition of self.dtype); fp32 master partitions (single_partition_of_fp32_groups,
  // stage3.py fp32_partitioned_groups_flat) and optimizer states on them.
  if (!r.params_dtype) r.params_dtype = ds.dtype;
  // Gradients accumulate in data_types.grad_accum_dtype, which defaults to the model's dtype
  // (engine.py get_data_types), so ZeRO's reduce buckets and partitioned gradients
  // (stage_1_and_2.py grads_in_partition of self.dtype, stage3.py grad_partitions_flat_buffer of
  // gradient_accumulation_dtype) are bf16/fp16. With offload_optimizer the gradient partition lives
  // in the host's fp32 buffer (async_inplace_copy_grad_to_fp32_buffer_from_gpu): fp32, in the host
  // column only (zero_states.cpp gradients_on_host).
  if (!r.main_grads_dtype) r.main_grads_dtype = ds.offload_optimizer ? DType::fp32 : ds.dtype;
  if (ds.optimizer) {
    // The config's optimizer is the one DeepSpeed builds (the Trainer passes none of its own then).
    if (r.finetune.optimizer_given && r.finetune.optimizer != *ds.optimizer) {
      throw InputError("--optimizer", std::string(name_of(r.finetune.optimizer)),
                       fmt::format("no --optimizer, or the DeepSpeed config's optimizer.type ({})", name_of(*ds.optimizer)));
    }
    r.finetune.optimizer = *ds.optimizer;
  }
  // ZeRO-Offload: the fp32 master partition, its optimizer states and its fp32 gradient (pinned,
  // stage_1_and_2.py initialize_optimizer_states: pin_memory(single_grad_partition)) in host memory.
  if (ds.offload_optimizer) r.optimizer_offload = 1.0;
  // The settings that size ZeRO's own buffers (src/profiles/hf_deepspeed.cpp).
  r.deepspeed = DeepSpeedBuffers{.reduce_bucket_size = ds.reduce_bucket_size,
                                 .prefetch_bucket_size = ds.prefetch_bucket_size,
                                 .max_live_parameters = ds.max_live_parameters,
                                 .param_persistence_threshold = ds.param_persistence_threshold,
                                 .sub_group_size = ds.sub_group_size,
                                 .overlap_comm = ds.overlap(),
                                 .contiguous_gradients = ds.contiguous_gradients,
                                 .offload_optimizer = ds.offload_optimizer,
                                 .offload_param = ds.offload_param,
                                 .stage0_step_bytes = ds.stage0_step_bytes,
                                 .grad_accum = ds.grad_accum,
                                 .immediate_grad_update = ds.immediate_grad_update,
                                 .config_optimizer = ds.optimizer.has_value(),
                                 .foreach_step = ds.foreach_step};
}

// A DeepSpeed config's gradient_accumulation_steps fixes the step (config.py _batch_assertion:
// train_batch_size = micro x steps x world size): the global batch when none is given, else it
// must agree.
void apply_deepspeed_accumulation(TrainingConfig& t, std::int64_t dp) {
  if (!t.deepspeed || !t.deepspeed->grad_accum) return;
  const std::int64_t steps = *t.deepspeed->grad_accum;
  const std::uint64_t want = checked_mul(checked_mul(static_cast<std::uint64_t>(t.micro_batch),
                                                     static_cast<std::uint64_t>(steps), "global batch"),
                                         static_cast<std::uint64_t>(dp), "global batch");
  if (want > static_cast<std::uint64_t>(std::int64_t{1} << 40)) {
    throw InputError("--deepspeed: gradient_accumulation_steps", std::to_string(steps),
                     "a step of at most 2^40 sequences (micro-batch x steps x dp)");
  }
  const auto global = static_cast<std::int64_t>(want);
  const std::int64_t per_step = t.micro_batch * dp;
  if (!t.global_batch) {
    t.global_batch = global;
  } else if (*t.global_batch % per_step == 0 && *t.global_batch != global) {
    // (A global batch that micro-batch x dp does not divide is refused by validate_training.)
    throw InputError("--deepspeed: gradient_accumulation_steps", std::to_string(steps),
                     fmt::format("{} = global batch {} / (micro-batch {} x dp {}) (DeepSpeed asserts train_batch_size = "
                                 "micro x steps x world size)",
                                 *t.global_batch / per_step,
                                 *t.global_batch, t.micro_batch, dp));
  }
}

}  // namespace moemem
