// Choosing among cuBLASLt's candidate algorithms for one GEMM shape by timing them. cuBLASLt's
// first heuristic pick is a guess from the shape alone; for decode-sized m (a GEMM that streams
// its weight once and is bound by memory) the guess often leaves too few blocks to fill the
// device. The tuner runs every candidate on the real operands, with L2 cleared before each run
// (a decode step streams gigabytes of weights, so none of a GEMM's weight is in L2 when it
// starts), and returns the fastest. It synchronizes the stream, so it must not run while the
// stream is being captured into a graph.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <span>

#include "core/status.h"

namespace kiln::cuda {

struct GemmTrial {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  const void* A = nullptr;  // the real weight
  const void* B = nullptr;  // the real (rounded) input
  void* D = nullptr;        // scratch the size of the output: the real output is never written
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  void* flush = nullptr;  // a buffer larger than L2, overwritten before each timed run
  size_t flush_bytes = 0;
  cudaStream_t stream = nullptr;
};

// The index of the fastest candidate (best of a few runs each) where it beats the first that
// runs (the heuristic's pick) by at least 3%, else of that first one; an error only when none
// runs.
Result<size_t> fastest_algorithm(const GemmTrial& t, std::span<const cublasLtMatmulHeuristicResult_t> candidates);

}  // namespace kiln::cuda
