// y[m, n] (+)= x[m, k] * w[n, k]^T on the CPU. Small m (decode) streams the weights once through
// an AVX2 dot-product kernel; larger m converts weight tiles to f32 and calls sgemm per tile.
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backend/arg_checks.h"
#include "backend/cpu/cpu_facets.h"
#include "core/thread_pool.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kGemvMaxRows = 8;  // up to this many x rows share one pass over the weights
constexpr int64_t kTileRows = 64;    // weight rows converted per sgemm tile

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p, DType t) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (t == DType::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float scalar(const uint16_t* p, DType t) { return t == DType::kF16 ? f16_to_f32(*p) : bf16_to_f32(*p); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// out[m, n] for all m < M and one weight row n: the row is read once and stays in L1 for all m.
template <typename W>
void gemv_row(const W* w, DType wt, const float* x, int64_t ldx, int64_t M, int64_t K, float* acc_out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * ldx;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      if constexpr (sizeof(W) == 4) {
        a0 = _mm256_fmadd_ps(load8(w + k), load8(xm + k), a0);
        a1 = _mm256_fmadd_ps(load8(w + k + 8), load8(xm + k + 8), a1);
      } else {
        a0 = _mm256_fmadd_ps(load8(w + k, wt), load8(xm + k), a0);
        a1 = _mm256_fmadd_ps(load8(w + k + 8, wt), load8(xm + k + 8), a1);
      }
    }
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; k < K; ++k) {
      if constexpr (sizeof(W) == 4) s += w[k] * xm[k];
      else s += scalar(w + k, wt) * xm[k];
    }
    acc_out[m] = s;
  }
}

// One x row against four weight rows at a time: four independent accumulator chains share each
// load of x, which keeps the FMA units busy while the weights stream from memory.
template <typename W>
void gemv4(const W* w, DType wt, int64_t K, const float* x, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 xv = load8(x + k);
    for (int r = 0; r < 4; ++r) {
      __m256 wv;
      if constexpr (sizeof(W) == 4) wv = load8(w + r * K + k);
      else wv = load8(w + r * K + k, wt);
      acc[r] = _mm256_fmadd_ps(wv, xv, acc[r]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    float s = hsum(acc[r]);
    for (int64_t j = k; j < K; ++j) {
      if constexpr (sizeof(W) == 4) s += w[r * K + j] * x[j];
      else s += scalar(w + r * K + j, wt) * x[j];
    }
    out[r] = s;
  }
}

}  // namespace

Support Linear::supports(const MatmulRequest& r) const {
  if (r.x_dtype != DType::kF32 || r.out_dtype != DType::kF32)
    return Support::declined("activations must be f32 on the cpu backend");
  if (!is_float(r.w_dtype)) return Support::declined("weight dtype must be f32, bf16 or f16");
  return Support::native();
}

Status Linear::matmul(const MatmulArgs& a) {
  MatmulRequest r = describe(a);
  std::string req = r.describe();
  Support s = supports(r);
  if (!s.runs_natively()) return declined("cpu", req, s.constraint);
  KILN_RETURN_IF_ERROR(validate(a, DeviceKind::kHost, req));
  const int64_t M = r.m, N = r.n, K = r.k, ldx = a.x.stride(0), ldo = a.out.stride(0);
  const float* x = a.x.data<float>();
  float* out = a.out.data<float>();
  const DType wt = a.w.dtype();
  ThreadPool& pool = default_thread_pool();

  if (M <= kGemvMaxRows) {
    pool.parallel_for(N, 16, [&](int64_t n0, int64_t n1, int) {
      float acc[kGemvMaxRows];
      int64_t n = n0;
      if (M == 1) {  // the decode case: four weight rows per pass
        for (; n + 4 <= n1; n += 4) {
          if (wt == DType::kF32) gemv4(a.w.data<float>() + n * K, wt, K, x, acc);
          else gemv4(a.w.data<uint16_t>() + n * K, wt, K, x, acc);
          for (int r = 0; r < 4; ++r) out[n + r] = a.accumulate ? out[n + r] + acc[r] : acc[r];
        }
      }
      for (; n < n1; ++n) {
        if (wt == DType::kF32) gemv_row(a.w.data<float>() + n * K, wt, x, ldx, M, K, acc);
        else gemv_row(a.w.data<uint16_t>() + n * K, wt, x, ldx, M, K, acc);
        for (int64_t m = 0; m < M; ++m) {
          float& o = out[m * ldo + n];
          o = a.accumulate ? o + acc[m] : acc[m];
        }
      }
    });
    return {};
  }

  const float beta = a.accumulate ? 1.f : 0.f;
  const int64_t tiles = (N + kTileRows - 1) / kTileRows;
  pool.parallel_for(tiles, 1, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> buf;
    for (int64_t t = t0; t < t1; ++t) {
      int64_t n0 = t * kTileRows, nt = std::min(kTileRows, N - n0);
      const float* wtile;
      if (wt == DType::kF32) {
        wtile = a.w.data<float>() + n0 * K;
      } else {
        buf.resize(static_cast<size_t>(nt * K));
        to_f32(wt, a.w.data<uint16_t>() + n0 * K, buf.data(), static_cast<size_t>(nt * K));
        wtile = buf.data();
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(nt),
                  static_cast<int>(K), 1.f, x, static_cast<int>(ldx), wtile, static_cast<int>(K), beta, out + n0,
                  static_cast<int>(ldo));
    }
  });
  return {};
}

}  // namespace kiln::cpu
