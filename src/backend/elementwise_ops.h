// The elementwise ops, declared once for every backend. A binary op is a row of kBinaryOps (its
// name, and whether its result may be stored rounded to 16 bits for the next GEMM) and its math,
// `apply<op>`, written once for host and device code: the CPU loop and the CUDA kernel are
// instantiated for every row of the table (with_binary_op), so adding a binary op is an
// enumerator, a row, an apply and a test, and its GLSL line in the Vulkan shader (binary.comp).
// Embedding gather is the one non-binary op.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KILN_HOST_DEVICE inline
#endif

namespace kiln {

// kEmbed first; every other enumerator is a binary op, in kBinaryOps' order.
enum class ElementwiseOp : uint8_t { kEmbed, kAdd, kSiluMul };

struct BinaryOpInfo {
  ElementwiseOp op;
  std::string_view name;
  bool out16;  // the output may be bf16 / f16: the f32 result rounded to nearest even
};

inline constexpr BinaryOpInfo kBinaryOps[] = {
    {ElementwiseOp::kAdd, "add", false},
    {ElementwiseOp::kSiluMul, "silu_mul", true},  // the MLP's activation, feeding the down projection
};

template <ElementwiseOp op>
KILN_HOST_DEVICE float apply(float a, float b);
template <>
KILN_HOST_DEVICE float apply<ElementwiseOp::kAdd>(float a, float b) { return a + b; }
template <>
KILN_HOST_DEVICE float apply<ElementwiseOp::kSiluMul>(float a, float b) { return a / (1.f + expf(-a)) * b; }

// The table's row of `op`, or null (kEmbed).
constexpr const BinaryOpInfo* binary_op_info(ElementwiseOp op) {
  for (const BinaryOpInfo& i : kBinaryOps)
    if (i.op == op) return &i;
  return nullptr;
}

// Calls f(std::integral_constant<ElementwiseOp, op>{}) for the binary op `op`, so that f is
// instantiated for every op of the table; false where `op` is not a binary op.
template <typename F, size_t... I>
bool with_binary_op(ElementwiseOp op, F&& f, std::index_sequence<I...>) {
  return ((op == kBinaryOps[I].op ? (f(std::integral_constant<ElementwiseOp, kBinaryOps[I].op>{}), true) : false) || ...);
}
template <typename F>
bool with_binary_op(ElementwiseOp op, F&& f) {
  return with_binary_op(op, std::forward<F>(f), std::make_index_sequence<std::size(kBinaryOps)>{});
}

}  // namespace kiln
