// The gated delta rule (shaders/gdn_recurrent.comp): the recurrent form for every request, each
// head's state columns split over up to four workgroups, a row's tokens loaded in stages as many
// as the device's shared memory holds (up to 32). A chunked request gets the same math token by
// token (the chunk is an algorithmic choice; the result agrees with the CPU's chunked form to
// rounding, within 1e-4 relative to its largest value).
#include <algorithm>

#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

namespace {

constexpr int64_t kMaxHeadDim = 256;
// State entries one invocation holds in registers: 32 wherever the workgroup can be wide enough,
// at most 64.
constexpr int64_t kEntries = 32, kMaxEntries = 64;

// The parts P each state column is split into (a workgroup of dv * P invocations, each holding
// ceil(dk / P) entries of its column); 0 where the device's workgroups are too small.
int64_t parts(int64_t dk, int64_t dv, int64_t max_workgroup) {
  const int64_t widest = max_workgroup / dv;
  const int64_t p = std::min((dk + kEntries - 1) / kEntries, widest);
  if (p < 1 || (dk + p - 1) / p > kMaxEntries) return 0;
  return p;
}

// The tokens a stage of the shader holds in shared memory: q and k (dk each), v's slice (cols),
// four scalars, and the o partial sums (one per invocation) a token, besides the two tokens' u
// partial sums; 0 where not even one fits.
constexpr int64_t kMaxStage = 32;
int64_t staged_tokens(int64_t dk, int64_t cols, int64_t invocations, int64_t shared_bytes) {
  const int64_t fixed = 4 * 2 * invocations, per_token = 4 * (2 * dk + cols + 4 + invocations);
  return std::clamp<int64_t>((shared_bytes - fixed) / per_token, 0, kMaxStage);
}

}  // namespace

Support Gdn::supports(const GdnRequest& r) const {
  if (r.state_dtype != DType::kF32) return Support::declined("the vulkan GDN state is f32");
  if (r.k_heads <= 0 || r.v_heads % r.k_heads != 0) return Support::declined("v_heads must be a multiple of k_heads");
  if (r.form == GdnForm::kChunked && r.chunk < 1) return Support::declined("chunk must be positive");
  if (r.dk < 1 || r.dk > kMaxHeadDim || r.dv < 1 || r.dv > kMaxHeadDim)
    return Support::declined("dk and dv must be 1.." + std::to_string(kMaxHeadDim));
  const DeviceInfo& d = ctx_->info();
  // Workgroups: x over value heads, y over rows (65535 is every device's least limit).
  if (r.rows > 65535 || r.v_heads > d.max_groups_x) return Support::declined("more than 65535 rows or too many heads");
  const int64_t P = parts(r.dk, r.dv, d.max_workgroup_size);
  if (P == 0)
    return Support::declined("one head's state does not fit a workgroup of " + std::to_string(d.max_workgroup_size) +
                             " invocations holding " + std::to_string(kMaxEntries) + " entries each");
  if (staged_tokens(r.dk, r.dv, r.dv * P, d.shared_memory_bytes) == 0)
    return Support::declined("one token's q, k and v do not fit " + std::to_string(d.shared_memory_bytes) +
                             " bytes of shared memory");
  if (r.form == GdnForm::kChunked)
    return Support::constrained("runs the recurrent form, sequential over each row's tokens (the same math)");
  return Support::native();
}

Status Gdn::delta_rule(const GdnArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  auto req = [&] { return describe(a).describe(); };  // for an error's text only
  const GdnRequest r = describe(a);
  if (a.kept != nullptr) *a.kept = Tensor();  // nothing kept for a backward
  // Eleven addresses and ten 32-bit fields fill the 128 bytes of push constants, so q's and k's
  // head strides share one field, 16 bits each (views of a token's projection row have them at
  // dk; a single head's is never used).
  const int64_t q_head_stride = r.k_heads > 1 ? a.q.stride(1) : 0, k_head_stride = r.k_heads > 1 ? a.k.stride(1) : 0;
  if (q_head_stride < 0 || q_head_stride > 0xffff || k_head_stride < 0 || k_head_stride > 0xffff)
    return declined("vulkan", req(), "q's and k's head strides must be 0..65535");
  // The state's columns split over up to 4 workgroups of at least 32 columns each: more of the
  // device at work on each head (a prefill runs its tokens in sequence).
  int64_t slices = 1;
  for (int64_t n : {4, 2})
    if (slices == 1 && r.dv % n == 0 && r.dv / n >= 32 && parts(r.dk, r.dv / n, ctx_->info().max_workgroup_size) > 0)
      slices = n;
  const int64_t cols = r.dv / slices;
  const int64_t P = parts(r.dk, cols, ctx_->info().max_workgroup_size);
  const int64_t stage = staged_tokens(r.dk, cols, cols * P, ctx_->info().shared_memory_bytes);
  struct {
    uint64_t q, k, v, a, b, a_log, dt_bias, state, out, cu_seqlens, state_slots;
    uint32_t q_stride, k_stride, qk_head_strides, v_stride, v_head_stride, a_stride, b_stride, out_stride,
        out_head_stride, slots;
  } p{address(a.q),
      address(a.k),
      address(a.v),
      address(a.a),
      address(a.b),
      address(a.a_log),
      address(a.dt_bias),
      address(a.state),
      address(a.out),
      address(a.layout->cu_seqlens),
      address(a.layout->state_slots),
      u32(a.q.stride(0)),
      u32(a.k.stride(0)),
      u32(q_head_stride | (k_head_stride << 16)),
      u32(a.v.stride(0)),
      u32(a.v.stride(1)),
      u32(a.a.stride(0)),
      u32(a.b.stride(0)),
      u32(a.out.stride(0)),
      u32(a.out.stride(1)),
      u32(a.state.dim(0))};
  static_assert(sizeof(p) == kPushBytes);
  return ctx_->dispatch("gdn_recurrent", p, {u32(r.v_heads), u32(r.rows), u32(slices)},
                        {u32(cols * P), u32(r.dk), u32(cols), u32(r.v_heads / r.k_heads), u32(stage)});
}

}  // namespace kiln::vulkan
