#include "moemem/enums.hpp"

namespace moemem {

namespace {

constexpr std::array<EnumName<Recompute>, 3> kRecompute{{{Recompute::none, "none"},
                                                         {Recompute::selective, "selective"},
                                                         {Recompute::full, "full"}}};
constexpr std::array<EnumName<RecomputeMethod>, 2> kRecomputeMethod{
    {{RecomputeMethod::uniform, "uniform"}, {RecomputeMethod::block, "block"}}};
constexpr std::array<EnumName<OverheadPoint>, 3> kOverheadPoint{
    {{OverheadPoint::none, "none"}, {OverheadPoint::low, "low"}, {OverheadPoint::high, "high"}}};
constexpr std::array<EnumName<AttentionKernel>, 3> kAttention{
    {{AttentionKernel::flash, "flash"}, {AttentionKernel::eager, "eager"}, {AttentionKernel::sdpa, "sdpa"}}};
constexpr std::array<EnumName<Dispatcher>, 3> kDispatcher{
    {{Dispatcher::alltoall, "alltoall"}, {Dispatcher::allgather, "allgather"}, {Dispatcher::deepep, "deepep"}}};

}  // namespace

Recompute parse_recompute(std::string_view text, std::string_view field) {
  return parse_enum(text, field, kRecompute, "none, selective or full");
}
RecomputeMethod parse_recompute_method(std::string_view text, std::string_view field) {
  return parse_enum(text, field, kRecomputeMethod, "uniform or block");
}
std::string_view name_of(RecomputeMethod m) {
  switch (m) {
    case RecomputeMethod::uniform: return "uniform";
    case RecomputeMethod::block: return "block";
    case RecomputeMethod::every: return "every";
  }
  return "?";
}
OverheadPoint parse_overhead_point(std::string_view text, std::string_view field) {
  return parse_enum(text, field, kOverheadPoint, "none, low or high");
}
AttentionKernel parse_attention_kernel(std::string_view text, std::string_view field) {
  return parse_enum(text, field, kAttention, "flash, eager or sdpa");
}
Dispatcher parse_dispatcher(std::string_view text, std::string_view field) {
  return parse_enum(text, field, kDispatcher, "alltoall, allgather or deepep");
}

}  // namespace moemem
