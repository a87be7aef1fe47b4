// What every cuBLAS and cuBLASLt caller of the CUDA backend shares: the Status of a call (naming
// the call and cuBLAS's status) and the cudaDataType_t of a weight dtype.
#pragma once

#include <cublas_api.h>
#include <library_types.h>

#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln::cuda {

// Empty, or why cuBLAS or cuBLASLt could not be opened (blas_loader.cc: they load on first use).
std::string blas_load_error();

// OK, or "what: CUBLAS_STATUS_... (n)" as an internal error, with the reason where the library
// could not be opened.
inline Status blas_status(cublasStatus_t s, const std::string& what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  std::string msg = what + ": " + cublasGetStatusName(s) + " (" + std::to_string(static_cast<int>(s)) + ")";
  if (s == CUBLAS_STATUS_NOT_INITIALIZED) {
    if (const std::string e = blas_load_error(); !e.empty()) msg += ": " + e;
  }
  return internal_error(msg);
}

// bf16 and f16 as themselves, everything else as f32.
inline cudaDataType_t cuda_data_type(DType t) {
  switch (t) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

}  // namespace kiln::cuda
