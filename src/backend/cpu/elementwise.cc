// Embedding gather (any float table to f32) and the binary ops of backend/elementwise_ops.h.
#include <cmath>
#include <cstring>

#include "backend/arg_checks.h"
#include "backend/cpu/cpu_facets.h"
#include "core/thread_pool.h"

namespace kiln::cpu {

Support Elementwise::supports(const ElementwiseRequest& r) const {
  if (r.op == ElementwiseOp::kEmbed) {
    if (!is_float(r.dtype)) return Support::declined("embedding table must be f32, bf16 or f16");
    return Support::native();
  }
  if (r.dtype != DType::kF32 || r.out_dtype != DType::kF32)
    return Support::declined("activations must be f32 on the cpu backend");
  return Support::native();
}

Status Elementwise::embed(const EmbedArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cpu", DeviceKind::kHost));
  const ElementwiseRequest r = describe(a);
  const int32_t* ids = a.ids.data<int32_t>();
  const int64_t vocab = a.table.dim(0), W = r.width;
  for (int64_t t = 0; t < r.rows; ++t)
    if (ids[t] < 0 || ids[t] >= vocab)
      return invalid_argument(req + ": token id " + std::to_string(ids[t]) + " at position " + std::to_string(t) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  const size_t esz = dtype_size(a.table.dtype());
  for (int64_t t = 0; t < r.rows; ++t) {
    const char* row = static_cast<const char*>(a.table.raw()) + static_cast<size_t>(ids[t]) * a.table.stride(0) * esz;
    to_f32(a.table.dtype(), row, a.out.data<float>() + t * a.out.stride(0), static_cast<size_t>(W));
  }
  return {};
}

Status Elementwise::binary(const BinaryArgs& a) {
  KILN_RETURN_IF_ERROR(check_call(*this, a, "cpu", DeviceKind::kHost).status());
  const ElementwiseRequest r = describe(a);
  const int64_t W = r.width;
  with_binary_op(r.op, [&](auto op) {
    default_thread_pool().parallel_for(r.rows, 4, [&](int64_t r0, int64_t r1, int) {
      for (int64_t i = r0; i < r1; ++i) {
        const float* x = a.a.data<float>() + i * a.a.stride(0);
        const float* y = a.b.data<float>() + i * a.b.stride(0);
        float* o = a.out.data<float>() + i * a.out.stride(0);
        for (int64_t j = 0; j < W; ++j) o[j] = apply<decltype(op)::value>(x[j], y[j]);
      }
    });
  });
  return {};
}

}  // namespace kiln::cpu
