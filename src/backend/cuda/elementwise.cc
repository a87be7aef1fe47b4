// Embedding gather (any float table to f32) and the binary ops of backend/elementwise_ops.h
// (kernels/elementwise.cu).
#include "backend/arg_checks.h"
#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/tuning.h"
#include "backend/cuda/views.h"

namespace kiln::cuda {

Support Elementwise::supports(const ElementwiseRequest& r) const {
  if (r.op == ElementwiseOp::kEmbed) {
    if (r.dtype != DType::kF32 && r.dtype != DType::kBF16 && r.dtype != DType::kF16)
      return Support::declined("embedding table must be f32, bf16 or f16");
    return Support::native();
  }
  if (r.dtype != DType::kF32) return Support::declined("activations must be f32 on the cuda backend");
  if (r.out_dtype != DType::kF32) {
    const BinaryOpInfo* info = binary_op_info(r.op);
    if (info == nullptr || !info->out16 || (r.out_dtype != DType::kBF16 && r.out_dtype != DType::kF16))
      return Support::declined("only ops that feed a GEMM (silu_mul) write a 16-bit (bf16/f16) output");
    if (!tuning().bf16_operands) return Support::declined("16-bit GEMM operands are off");
  }
  return Support::native();
}

Status Elementwise::embed(const EmbedArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const ElementwiseRequest r = describe(a);
  const EmbeddingParams p{r.rows, r.width, a.table.dim(0), a.ids.data<int32_t>(), rows_of<const void>(a.table),
                          a.table.dtype(), rows_of<float>(a.out)};
  ProfileScope prof(ctx_->profiler.get(), [&] { return "embed tokens=" + std::to_string(r.rows); });
  return in_context(cuda::embedding(p, ctx_->stream), a);
}

Status Elementwise::binary(const BinaryArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const ElementwiseRequest r = describe(a);
  const BinaryParams p{r.op, r.rows, r.width, rows_of<const float>(a.a), rows_of<const float>(a.b), rows_of<void>(a.out),
                       a.out.dtype()};
  ProfileScope prof(ctx_->profiler.get(), [&] { return "elementwise " + r.describe(); });
  return in_context(cuda::binary(p, ctx_->stream), a);
}

}  // namespace kiln::cuda
