// DeepEP's communication buffers as Megatron-Core allocates them (src/analyze/deepep.cpp).
#pragma once

#include <cstdint>
#include <optional>

#include "moemem/errors.hpp"
#include "moemem/units.hpp"

namespace moemem::detail {

// For a model of this hidden size over an expert group of `ranks` (ep x etp): the NVLink buffer with
// its workspace, and the NVSHMEM (RDMA) heap when the group spans nodes; both outside PyTorch's
// allocator. Zero for a group size DeepEP has no config for (deepep_group_check refuses those).
struct DeepEpBuffers {
  Bytes nvlink, rdma;
};
[[nodiscard]] DeepEpBuffers deepep_buffers(std::int64_t hidden, std::int64_t ranks);
// An expert group size DeepEP has no config for, as an error naming --ep/--etp.
[[nodiscard]] std::optional<InputError> deepep_group_check(std::int64_t ranks);

}  // namespace moemem::detail
