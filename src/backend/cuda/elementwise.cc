// Embedding gather (any float table to f32), residual add and silu(a) * b (kernels/elementwise.cu).
#include "backend/arg_checks.h"
#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/tuning.h"

namespace kiln::cuda {

Support Elementwise::supports(const ElementwiseRequest& r) const {
  if (r.op == ElementwiseOp::kEmbed) {
    if (r.dtype != DType::kF32 && r.dtype != DType::kBF16 && r.dtype != DType::kF16)
      return Support::declined("embedding table must be f32, bf16 or f16");
    return Support::native();
  }
  if (r.dtype != DType::kF32) return Support::declined("activations must be f32 on the cuda backend");
  if (r.out_dtype != DType::kF32) {
    if (r.op != ElementwiseOp::kSiluMul || (r.out_dtype != DType::kBF16 && r.out_dtype != DType::kF16))
      return Support::declined("only silu_mul writes a 16-bit (bf16/f16) output");
    if (!tuning().bf16_operands) return Support::declined("16-bit GEMM operands are off (KILN_CUDA_BF16_OPERANDS=0)");
  }
  return Support::native();
}

Status Elementwise::embed(const EmbedArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const ElementwiseRequest r = describe(a);
  EmbeddingParams p;
  p.tokens = r.rows;
  p.width = r.width;
  p.vocab = a.table.dim(0);
  p.ids = a.ids.data<int32_t>();
  p.table = a.table.raw();
  p.table_stride = a.table.stride(0);
  p.table_dtype = a.table.dtype();
  p.out = a.out.data<float>();
  p.out_stride = a.out.stride(0);
  ProfileScope prof(ctx_->profiler.get(), [&] { return "embed tokens=" + std::to_string(r.rows); });
  return in_context(cuda::embedding(p, ctx_->stream), a);
}

Status Elementwise::binary(const BinaryArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const ElementwiseRequest r = describe(a);
  if (r.op == ElementwiseOp::kEmbed) return invalid_argument(r.describe() + ": embed is not a binary op");
  BinaryParams p;
  p.op = r.op == ElementwiseOp::kAdd ? BinaryOp::kAdd : BinaryOp::kSiluMul;
  p.rows = r.rows;
  p.width = r.width;
  p.a = a.a.data<float>();
  p.a_stride = a.a.stride(0);
  p.b = a.b.data<float>();
  p.b_stride = a.b.stride(0);
  p.out = a.out.raw();
  p.out_stride = a.out.stride(0);
  p.out_dtype = a.out.dtype();
  ProfileScope prof(ctx_->profiler.get(), [&] { return "elementwise " + r.describe(); });
  return in_context(cuda::binary(p, ctx_->stream), a);
}

}  // namespace kiln::cuda
