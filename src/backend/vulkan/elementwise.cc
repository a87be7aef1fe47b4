// Embedding gather (any float table to f32) and the binary ops of backend/elementwise_ops.h.
#include "backend/elementwise_ops.h"
#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

Support Elementwise::supports(const ElementwiseRequest& r) const {
  if (r.op == ElementwiseOp::kEmbed) {
    if (!is_float(r.dtype)) return Support::declined("embedding table must be f32, bf16 or f16");
    return Support::native();
  }
  if (r.dtype != DType::kF32) return Support::declined("activations must be f32");
  const BinaryOpInfo* info = binary_op_info(r.op);
  if (r.out_dtype != DType::kF32 && !(info && info->out16 && r.out_dtype == DType::kBF16))
    return Support::declined("output must be f32, or bf16 for an op that feeds a GEMM");
  // Indices are 32-bit in the shaders.
  if (r.rows * r.width >= (int64_t{1} << 32)) return Support::declined("more than 2^32 elements");
  return Support::native();
}

Status Elementwise::embed(const EmbedArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  struct {
    uint64_t ids, table, out;
    uint32_t tokens, width, table_stride, out_stride, dtype, vocab;
  } p{address(a.ids), address(a.table), address(a.out), u32(a.out.dim(0)), u32(a.out.dim(1)),
      u32(a.table.stride(0)), u32(a.out.stride(0)), static_cast<uint32_t>(a.table.dtype()), u32(a.table.dim(0))};
  // Ids outside the vocabulary are refused on the host before they get here (the engine, the
  // server); reading them back to name one would cost a synchronisation a step.
  return ctx_->dispatch("embed", p, ctx_->grid((uint64_t{p.tokens} * p.width + 255) / 256));
}

Status Elementwise::binary(const BinaryArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  struct {
    uint64_t a, b, out;
    uint32_t rows, width, a_stride, b_stride, out_stride, out_dtype, op;
  } p{address(a.a), address(a.b), address(a.out), u32(a.out.dim(0)), u32(a.out.dim(1)), u32(a.a.stride(0)),
      u32(a.b.stride(0)), u32(a.out.stride(0)), static_cast<uint32_t>(a.out.dtype()), static_cast<uint32_t>(a.op)};
  return ctx_->dispatch("binary", p, ctx_->grid((uint64_t{p.rows} * p.width + 255) / 256));
}

}  // namespace kiln::vulkan
