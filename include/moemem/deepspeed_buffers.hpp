// DeepSpeed ZeRO's own device buffers (hf profile): the settings of a ds_config that size them,
// carried in the training settings (StateSettings::deepspeed) and costed in
// src/profiles/hf_deepspeed.cpp. Defaults are DeepSpeedZeroConfig's (deepspeedai/DeepSpeed
// edaa7221, deepspeed/runtime/zero/config.py); a key given as "auto" is nullopt here and is filled
// at evaluation from the model's hidden size as the Hugging Face Trainer fills it
// (transformers/integrations/deepspeed.py trainer_config_finalize).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>

namespace moemem {

struct DeepSpeedBuffers {
  std::optional<std::int64_t> reduce_bucket_size = 500'000'000;       // config.py Field(pp_int(5e8)); auto: h*h
  std::optional<std::int64_t> prefetch_bucket_size = 50'000'000;      // stage3_prefetch_bucket_size 5e7; auto: 0.9 h*h
  std::int64_t max_live_parameters = 1'000'000'000;                   // stage3_max_live_parameters 1e9
  std::optional<std::int64_t> param_persistence_threshold = 100'000;  // stage3_param_persistence_threshold 1e5; auto: 10 h
  std::int64_t sub_group_size = 1'000'000'000;                        // sub_group_size 1e9 (ZeRO-3's step per sub-group)
  bool overlap_comm = false;         // resolved: config.py overlap_comm_valid makes it true under stage 3 when unset
  bool contiguous_gradients = true;  // config.py default
  bool offload_optimizer = false;    // offload_optimizer.device "cpu"
  bool offload_param = false;        // offload_param.device "cpu" (stage 3)
  // Bytes per trainable parameter of the optimizer step's temporaries without ZeRO (deepspeed.hpp).
  std::int64_t stage0_step_bytes = 4;
  std::optional<std::int64_t> grad_accum;  // gradient_accumulation_steps, when the config fixes it
  // bf16.immediate_grad_update, when the config gives it; and whether the config names the optimizer
  // (DeepSpeed then builds it from one group of the trainable parameters, the Trainer's own has two).
  std::optional<bool> immediate_grad_update;
  bool config_optimizer = false;
  bool foreach_step = false;  // the config's torch_adam without params.fused: a foreach AdamW step
  auto operator<=>(const DeepSpeedBuffers&) const = default;
};

// The sizes with "auto" filled in from `hidden` (HF Trainer: reduce_bucket_size h*h,
// stage3_prefetch_bucket_size int(0.9 h*h), stage3_param_persistence_threshold 10 h).
struct DeepSpeedSizes {
  std::int64_t reduce_bucket, prefetch_bucket, persistence_threshold;
};
[[nodiscard]] DeepSpeedSizes resolve_sizes(const DeepSpeedBuffers& b, std::int64_t hidden);

}  // namespace moemem
