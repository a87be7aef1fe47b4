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

// Eight f32 values from eight weights of compile-time dtype W (f32, bf16 or f16).
template <DType W>
inline __m256 load_w(const void* p) {
  if constexpr (W == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p));
  } else {
    __m128i h = _mm_loadu_si128(static_cast<const __m128i*>(p));
    if constexpr (W == DType::kF16) return _mm256_cvtph_ps(h);
    else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <DType W>
inline float load_w1(const void* p) {
  if constexpr (W == DType::kF32) return *static_cast<const float*>(p);
  else if constexpr (W == DType::kF16) return f16_to_f32(*static_cast<const uint16_t*>(p));
  else return bf16_to_f32(*static_cast<const uint16_t*>(p));
}

// out[r] = dot(x, w row r) for four consecutive weight rows: eight independent accumulator
// chains in registers share each load of x, so the FMA units keep up with the weight stream.
template <DType W>
void gemv4(const char* __restrict w, int64_t K, const float* __restrict x, float* __restrict out) {
  constexpr int64_t es = W == DType::kF32 ? 4 : 2;
  const char* w0 = w;
  const char* w1 = w + K * es;
  const char* w2 = w + 2 * K * es;
  const char* w3 = w + 3 * K * es;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);
    // The next four rows follow these in memory: fetch them while these are summed.
    _mm_prefetch(w0 + 4 * K * es + 4 * k * es, _MM_HINT_T0);
    _mm_prefetch(w0 + 4 * K * es + 4 * k * es + 64, _MM_HINT_T0);
    a0 = _mm256_fmadd_ps(load_w<W>(w0 + k * es), x0, a0);
    a1 = _mm256_fmadd_ps(load_w<W>(w1 + k * es), x0, a1);
    a2 = _mm256_fmadd_ps(load_w<W>(w2 + k * es), x0, a2);
    a3 = _mm256_fmadd_ps(load_w<W>(w3 + k * es), x0, a3);
    b0 = _mm256_fmadd_ps(load_w<W>(w0 + (k + 8) * es), x1, b0);
    b1 = _mm256_fmadd_ps(load_w<W>(w1 + (k + 8) * es), x1, b1);
    b2 = _mm256_fmadd_ps(load_w<W>(w2 + (k + 8) * es), x1, b2);
    b3 = _mm256_fmadd_ps(load_w<W>(w3 + (k + 8) * es), x1, b3);
  }
  float s[4] = {hsum(_mm256_add_ps(a0, b0)), hsum(_mm256_add_ps(a1, b1)), hsum(_mm256_add_ps(a2, b2)),
                hsum(_mm256_add_ps(a3, b3))};
  for (; k < K; ++k) {
    s[0] += load_w1<W>(w0 + k * es) * x[k];
    s[1] += load_w1<W>(w1 + k * es) * x[k];
    s[2] += load_w1<W>(w2 + k * es) * x[k];
    s[3] += load_w1<W>(w3 + k * es) * x[k];
  }
  for (int r = 0; r < 4; ++r) out[r] = s[r];
}

using Gemv4Fn = void (*)(const char*, int64_t, const float*, float*);
Gemv4Fn gemv4_for(DType t) {
  switch (t) {
    case DType::kBF16: return gemv4<DType::kBF16>;
    case DType::kF16: return gemv4<DType::kF16>;
    default: return gemv4<DType::kF32>;
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
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cpu", DeviceKind::kHost));
  const MatmulRequest r = describe(a);
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
        const Gemv4Fn kernel = gemv4_for(wt);
        const char* wbase = static_cast<const char*>(a.w.raw());
        const int64_t row_bytes = K * static_cast<int64_t>(dtype_size(wt));
        for (; n + 4 <= n1; n += 4) {
          kernel(wbase + n * row_bytes, K, x, acc);
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
