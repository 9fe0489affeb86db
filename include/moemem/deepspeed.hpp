// DeepSpeed's JSON configuration (--deepspeed ds_config.json, hf profile): the keys that decide
// memory, read with their defaults from deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig) and
// the training settings they set. Keys that change memory and are not modelled are refused by
// name; keys that do not change device memory (logging, schedules) are accepted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "moemem/dtype.hpp"
#include "moemem/finetune.hpp"
#include "moemem/scenario.hpp"

namespace moemem {

struct DeepSpeedConfig {
  int stage = 0;  // zero_optimization.stage (0 to 3; DeepSpeed's default 0: no ZeRO, engine.py's DDP mode)
  // Bucket and threshold sizes in elements (DeepSpeedZeroConfig defaults); nullopt: "auto", which
  // the Hugging Face Trainer fills from the model (transformers/integrations/deepspeed.py
  // HfTrainerDeepSpeedConfig.trainer_config_finalize: hidden^2, 0.9 hidden^2, 10 hidden). Read and
  // checked; apply_deepspeed passes them on as DeepSpeedBuffers, whose buffers
  // src/profiles/hf_deepspeed.cpp costs (allgather_bucket_size sizes none: it is read only).
  std::optional<std::int64_t> reduce_bucket_size = 500'000'000;
  std::int64_t allgather_bucket_size = 500'000'000;
  std::optional<std::int64_t> prefetch_bucket_size = 50'000'000;      // stage3_prefetch_bucket_size
  std::int64_t max_live_parameters = 1'000'000'000;                   // stage3_max_live_parameters
  std::optional<std::int64_t> param_persistence_threshold = 100'000;  // stage3_param_persistence_threshold
  std::int64_t sub_group_size = 1'000'000'000;                        // ZeRO-3's optimizer step, per sub-group
  std::optional<bool> overlap_comm;  // unset: true under stage 3 only (config.py overlap_comm_valid)
  bool contiguous_gradients = true;
  bool offload_optimizer = false;  // offload_optimizer.device "cpu"
  bool offload_param = false;      // offload_param.device "cpu" (stage 3 only)
  DType dtype = DType::bf16;       // bf16.enabled (or "auto"), else fp16.enabled
  std::optional<OptimizerKind> optimizer;  // optimizer.type, when given
  // Bytes per trainable parameter the optimizer step adds without ZeRO: 4 (the fp32 gradients) for
  // the Trainer's fused AdamW and for Lion, 8 for the config's Adam/AdamW (FusedAdam's flat copy,
  // or torch AdamW's foreach temporaries) unless params.torch_adam with params.fused.
  std::int64_t stage0_step_bytes = 4;
  bool foreach_step = false;  // torch.optim's AdamW without params.fused (torch_adam): foreach on CUDA
  // optimizer.legacy_fusion true with DeepSpeed's FusedAdam (refused at stage 0, ignored by ZeRO).
  bool legacy_fusion = false;
  // bf16.immediate_grad_update, when given (BF16_Optimizer before 0.17.6; its default by release:
  // hf_deepspeed.cpp).
  std::optional<bool> immediate_grad_update;
  // Batch keys, positive integers or "auto" (nullopt: the Trainer fills them from its arguments).
  // DeepSpeed requires train_batch_size = micro x accumulation steps x data-parallel world
  // (config.py _batch_assertion); apply_deepspeed makes them agree with --micro-batch/--global-batch.
  std::optional<std::int64_t> micro_batch;   // train_micro_batch_size_per_gpu
  std::optional<std::int64_t> train_batch;   // train_batch_size
  std::optional<std::int64_t> grad_accum;    // gradient_accumulation_steps

  [[nodiscard]] bool overlap() const { return overlap_comm.value_or(stage == 3); }
};

// Parses a DeepSpeed config's text; `source` names the file in errors (InputError naming the key,
// e.g. "ds_config.json: zero_optimization.offload_param").
[[nodiscard]] DeepSpeedConfig parse_deepspeed_config(std::string_view json_text, const std::string& source);
// Reads and parses the file at `path`.
[[nodiscard]] DeepSpeedConfig read_deepspeed_config(const std::string& path);

// Sets the ZeRO stage, weight and gradient dtypes, optimizer, optimizer offload and DeepSpeed's
// buffer settings (TrainingRequest::deepspeed) of `r` from the config;
// a --zero given as well must agree with the config's stage.
void apply_deepspeed(const DeepSpeedConfig& ds, TrainingRequest& r);

// With the data-parallel degree known: the config's gradient_accumulation_steps sets the global
// batch when none is given, else it must agree (DeepSpeed's train_batch_size = micro x steps x dp).
void apply_deepspeed_accumulation(TrainingConfig& t, std::int64_t dp);

}  // namespace moemem
