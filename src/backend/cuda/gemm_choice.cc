#include "backend/cuda/gemm_choice.h"

#include <iterator>

namespace kiln::cuda {

namespace {
constexpr std::string_view kNames[] = {"cublaslt", "gemv", "skinny"};
}  // namespace

std::string_view small_gemm_name(SmallGemm k) { return kNames[static_cast<size_t>(k)]; }

SmallGemm small_gemm_named(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (kNames[i] == name) return static_cast<SmallGemm>(i);
  return SmallGemm::kCublasLt;
}

std::string SmallGemmKey::text() const {
  return "gemm m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
         " w=" + std::string(dtype_name(w)) + " x=" + std::string(dtype_name(x)) + (gemv ? " gemv" : "") +
         (skinny ? " skinny" : "");
}

}  // namespace kiln::cuda
