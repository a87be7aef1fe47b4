// Which kernel runs a decode-sized GEMM on 16-bit weights: the GEMV, the skinny GEMM or cuBLASLt.
// Each candidate that applies to a shape is timed once on the device that runs it (the real
// weight, L2 flushed before each run, best of a few; kernel_timing.h), and the fastest is kept: a
// kernel of ours must beat cuBLASLt by 3%. The H200's measured rules (gemv_beats_cublaslt,
// skinny_beats_cublaslt) decide only where no timing may run.
#pragma once

#include <string>
#include <string_view>

#include "core/dtype.h"

namespace kiln::cuda {

enum class SmallGemm : uint8_t { kCublasLt, kGemv, kSkinny };
std::string_view small_gemm_name(SmallGemm k);
SmallGemm small_gemm_named(std::string_view name);  // cuBLASLt for a name that is none of them

// A shape, and which of our kernels may take it (switches like KILN_CUDA_SKINNY=0 narrow that):
// each candidate set keeps its own choice.
struct SmallGemmKey {
  int64_t m = 0, n = 0, k = 0;
  DType w = DType::kBF16, x = DType::kF32;
  bool gemv = false, skinny = false;
  std::string text() const;  // "gemm m=1 n=4096 k=2560 w=bf16 x=f32 gemv skinny"
};

}  // namespace kiln::cuda
