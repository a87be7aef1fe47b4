// cuBLAS and cuBLASLt opened on first use (dlopen) instead of at process start. Linked normally,
// their ~700 MB are mapped and relocated by every process that links the CUDA backend, ~0.4 s
// each, whether or not it ever runs a GEMM: each test process of the CPU suite, each `kiln`
// command. The functions the backend calls are defined here with the libraries' own signatures
// (their headers check them) and forward to the libraries' definitions, resolved once.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "backend/cuda/blas.h"

namespace kiln::cuda {

namespace {

struct Library {
  explicit Library(const char* name) : soname(name) {}
  const char* soname;
  void* handle = nullptr;
  std::string error;
  std::once_flag once;
};

Library& lt_library() {
  static Library lib("libcublasLt.so." KILN_CUBLAS_MAJOR);
  return lib;
}

Library& blas_library() {
  static Library lib("libcublas.so." KILN_CUBLAS_MAJOR);
  return lib;
}

// The library, opened on first use: from the toolkit's directory at build time, else by the
// loader's search (LD_LIBRARY_PATH, the cache).
void* open(Library& lib) {
  std::call_once(lib.once, [&] {
    const std::string built = std::string(KILN_CUDA_LIBRARY_DIR) + "/" + lib.soname;
    lib.handle = dlopen(built.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle == nullptr) lib.handle = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL);
    if (lib.handle == nullptr) {
      const char* e = dlerror();
      lib.error = std::string(lib.soname) + " could not be opened: " + (e ? e : "unknown error");
    }
  });
  return lib.handle;
}

// The library's definition of `name` with the type F, or null (open() or dlsym failed).
template <typename F>
F resolve(Library& lib, const char* name) {
  void* h = open(lib);
  return h == nullptr ? nullptr : reinterpret_cast<F>(dlsym(h, name));
}

}  // namespace

std::string blas_load_error() {
  for (Library* lib : {&lt_library(), &blas_library()}) {
    open(*lib);
    if (!lib->error.empty()) return lib->error;
  }
  return {};
}

}  // namespace kiln::cuda

// Each forwarder resolves its function once; a library that did not open answers
// CUBLAS_STATUS_NOT_INITIALIZED (blas_status then names blas_load_error()).
#define KILN_BLAS_FORWARD(lib, name, params, args)                                  \
  cublasStatus_t CUBLASWINAPI name params {                                         \
    using Fn = cublasStatus_t(CUBLASWINAPI*) params;                                \
    static const Fn real = kiln::cuda::resolve<Fn>(kiln::cuda::lib(), #name);       \
    return real == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : real args;             \
  }

extern "C" {

KILN_BLAS_FORWARD(lt_library, cublasLtCreate, (cublasLtHandle_t * h), (h))
KILN_BLAS_FORWARD(lt_library, cublasLtDestroy, (cublasLtHandle_t h), (h))
KILN_BLAS_FORWARD(lt_library, cublasLtMatmulDescCreate,
                  (cublasLtMatmulDesc_t * d, cublasComputeType_t compute, cudaDataType_t scale), (d, compute, scale))
KILN_BLAS_FORWARD(lt_library, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))
KILN_BLAS_FORWARD(lt_library, cublasLtMatmulDescSetAttribute,
                  (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t bytes),
                  (d, attr, buf, bytes))
KILN_BLAS_FORWARD(lt_library, cublasLtMatrixLayoutCreate,
                  (cublasLtMatrixLayout_t * l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
                  (l, type, rows, cols, ld))
KILN_BLAS_FORWARD(lt_library, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))
KILN_BLAS_FORWARD(lt_library, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * p), (p))
KILN_BLAS_FORWARD(lt_library, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p), (p))
KILN_BLAS_FORWARD(lt_library, cublasLtMatmulPreferenceSetAttribute,
                  (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                   size_t bytes),
                  (p, attr, buf, bytes))
KILN_BLAS_FORWARD(lt_library, cublasLtMatmulAlgoGetHeuristic,
                  (cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                   cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
                   cublasLtMatmulHeuristicResult_t results[], int* found),
                  (h, op, a, b, c, d, pref, requested, results, found))
KILN_BLAS_FORWARD(lt_library, cublasLtMatmul,
                  (cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                   cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta, const void* C,
                   cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t* algo,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream),
                  (h, desc, alpha, A, a, B, b, beta, C, c, D, d, algo, workspace, workspace_bytes, stream))

KILN_BLAS_FORWARD(blas_library, cublasCreate_v2, (cublasHandle_t * h), (h))
KILN_BLAS_FORWARD(blas_library, cublasDestroy_v2, (cublasHandle_t h), (h))
KILN_BLAS_FORWARD(blas_library, cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s), (h, s))
KILN_BLAS_FORWARD(blas_library, cublasSetMathMode, (cublasHandle_t h, cublasMath_t mode), (h, mode))
KILN_BLAS_FORWARD(blas_library, cublasGemmEx,
                  (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                   const void* alpha, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt, int ldb,
                   const void* beta, void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                   cublasGemmAlgo_t algo),
                  (h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute, algo))
KILN_BLAS_FORWARD(blas_library, cublasGemmStridedBatchedEx,
                  (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                   const void* alpha, const void* A, cudaDataType at, int lda, long long int sa, const void* B,
                   cudaDataType bt, int ldb, long long int sb, const void* beta, void* C, cudaDataType ct, int ldc,
                   long long int sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo),
                  (h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, compute,
                   algo))

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  using Fn = const char*(CUBLASWINAPI*)(cublasStatus_t);
  static const Fn real = kiln::cuda::resolve<Fn>(kiln::cuda::blas_library(), "cublasGetStatusName");
  return real == nullptr ? "CUBLAS_STATUS_(cuBLAS not loaded)" : real(status);
}

}  // extern "C"
