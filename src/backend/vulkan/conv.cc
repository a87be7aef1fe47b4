// Depthwise causal conv1d + silu with per-sequence state (shaders/conv1d.comp).
#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

namespace {

// The window of taps is held in registers, sized by a specialization constant.
constexpr int64_t kMaxKernel = 16;

}  // namespace

Support Conv::supports(const ConvRequest& r) const {
  if (r.kernel < 2 || r.kernel > kMaxKernel)
    return Support::declined("kernel must be 2.." + std::to_string(kMaxKernel));
  // Invocation indices are 32-bit in the shader.
  if (r.rows * r.channels >= (int64_t{1} << 32)) return Support::declined("more than 2^32 (row, channel) pairs");
  return Support::native();
}

Status Conv::causal_conv1d(const ConvArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const ConvRequest r = describe(a);
  struct {
    uint64_t x, weight, state, out, cu_seqlens, state_slots;
    uint32_t rows, channels, x_stride, weight_stride, state_slot_stride, state_tap_stride, out_stride, slots;
  } p{address(a.x),
      address(a.weight),
      address(a.state),
      address(a.out),
      address(a.layout->cu_seqlens),
      address(a.layout->state_slots),
      u32(r.rows),
      u32(r.channels),
      u32(a.x.stride(0)),
      u32(a.weight.stride(0)),
      u32(a.state.stride(0)),
      u32(a.state.stride(1)),
      u32(a.out.stride(0)),
      u32(a.state.dim(0))};
  return ctx_->dispatch("conv1d", p, ctx_->grid((uint64_t{p.rows} * p.channels + 63) / 64), {u32(r.kernel)});
}

}  // namespace kiln::vulkan
