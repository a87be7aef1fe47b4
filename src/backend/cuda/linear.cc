// y[m, n] (+)= x[m, k] w[n, k]^T. Small m with 16-bit weights: the GEMV kernel, the tensor-core
// skinny GEMM (bf16, x rounded as it loads) or cuBLASLt, whichever timed fastest on this device
// for the shape (gemm_choice.h). Otherwise cuBLASLt; in column-major terms y^T = w^T-op * x^T: A = w
// (k x n, ld k, transposed), B = x (k x m, ld = row stride), C = D = y (n x m, ld = row
// stride). The algorithm cache is keyed by everything the heuristic sees; for decode-sized m the
// cached algorithm is the fastest of the heuristic's candidates as timed on the first call's
// operands (gemm_autotune.h).
// An x already in the weight's 16-bit dtype (written so by its producer, BinaryArgs) is the
// GEMM's operand as it is; an f32 x is rounded to it first (the contract of every bf16 GEMM).
#include <algorithm>
#include <functional>

#include "backend/arg_checks.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/gemm_autotune.h"
#include "backend/cuda/gemm_choice.h"
#include "backend/cuda/kernel_timing.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/gemv.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/skinny_gemm.h"
#include "backend/cuda/tuning.h"
#include "backend/cuda/views.h"

namespace kiln::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kCandidates = 8;  // heuristic candidates the autotuner times

// The largest power of two (up to 256) dividing the address: what cuBLASLt may assume.
int alignment_of(const void* p) {
  auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

}  // namespace

// Timed choices, shared by every Linear of the process: two backends (or one made again) run a
// shape with the same algorithm, so their results agree bit for bit.
struct Linear::TunedAlgorithms {
  std::mutex mu;
  std::unordered_map<Key, cublasLtMatmulAlgo_t, KeyHash> algos;
};

Linear::TunedAlgorithms& Linear::tuned_algorithms() {
  static TunedAlgorithms t;
  return t;
}

size_t Linear::KeyHash::operator()(const Key& k) const {
  size_t h = 0;
  for (int64_t v : {k.m, k.n, k.k, k.ldb, k.ldc, int64_t(k.w_dtype), int64_t(k.align_a), int64_t(k.align_b),
                    int64_t(k.align_c)})
    h = h * 1000003u ^ std::hash<int64_t>()(v);
  return h;
}

Linear::~Linear() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
  }
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

MatmulCacheStats Linear::cache_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {hits_, misses_, plans_.size(), timed_};
}

Support Linear::supports(const MatmulRequest& r) const {
  if (r.x_dtype != DType::kF32 && r.x_dtype == r.w_dtype && r.out_dtype == DType::kF32 &&
      (r.w_dtype == DType::kBF16 || r.w_dtype == DType::kF16)) {
    // x written by its producer in the weight's dtype: the GEMM's operand as it is (cuBLASLt).
    if (!tuning().bf16_operands) return Support::declined("16-bit GEMM operands are off");
    if (r.m <= kGemvMaxM) return Support::declined("decode-sized x goes to the GEMV, which reads f32 x");
    return Support::native();  // the skinny GEMM (up to 64 rows, bf16) or cuBLASLt
  }
  if (r.x_dtype != DType::kF32 || r.out_dtype != DType::kF32)
    return Support::declined(
        "activations and outputs must be f32 on the cuda backend (or x in the weight's 16-bit dtype)");
  if (r.w_dtype != DType::kF32 && r.w_dtype != DType::kBF16 && r.w_dtype != DType::kF16)
    return Support::declined("weight dtype must be f32, bf16 or f16");
  if (r.w_dtype != DType::kF32) {
    if (tuning().gemv && r.m <= kGemvMaxM && gemv_beats_cublaslt(r.m, r.n))
      return Support::constrained("GEMV kernel on f32 x where k % 8 == 0 and rows are 16-byte aligned, else cuBLASLt "
                                  "with x rounded to " + std::string(dtype_name(r.w_dtype)));
    return Support::constrained("x is rounded to " + std::string(dtype_name(r.w_dtype)) +
                                " for the tensor-core GEMM; f32 accumulation and output");
  }
  return Support::native();
}

Status Linear::ensure_handle() {
  if (handle_ != nullptr) return {};
  KILN_RETURN_IF_ERROR(blas_status(cublasLtCreate(&handle_), "cublasLt create"));
  KILN_ASSIGN_OR_RETURN(workspace_, ctx_->empty({static_cast<int64_t>(kWorkspaceBytes)}, DType::kU8));
  return {};
}

Result<void*> Linear::scratch(size_t bytes) {
  if (!scratch_.defined() || scratch_.nbytes() < bytes) {
    scratch_ = Tensor();  // back to the pool first: stream order makes the reuse safe
    KILN_ASSIGN_OR_RETURN(scratch_, ctx_->empty({static_cast<int64_t>(std::max<size_t>(bytes, 1 << 20))}, DType::kU8));
  }
  return scratch_.raw();
}

Result<const Linear::Plan*> Linear::plan_for(const Key& key, const std::string& req, const void* w, const void* in) {
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    ++hits_;
    return &it->second;
  }
  ++misses_;
  const DType wt = static_cast<DType>(key.w_dtype);
  const cudaDataType_t ab = cuda_data_type(wt);
  Plan p;
  auto destroy = [&p] {
    if (p.a != nullptr) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b != nullptr) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c != nullptr) cublasLtMatrixLayoutDestroy(p.c);
    if (p.desc != nullptr) cublasLtMatmulDescDestroy(p.desc);
  };
  Status st = [&]() -> Status {
    KILN_RETURN_IF_ERROR(blas_status(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLt desc " + req));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    KILN_RETURN_IF_ERROR(blas_status(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "cublasLt transa " + req));
    KILN_RETURN_IF_ERROR(blas_status(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "cublasLt transb " + req));
    KILN_RETURN_IF_ERROR(blas_status(cublasLtMatrixLayoutCreate(&p.a, ab, key.k, key.n, key.k), "cublasLt layout A " + req));
    KILN_RETURN_IF_ERROR(blas_status(cublasLtMatrixLayoutCreate(&p.b, ab, key.k, key.m, key.ldb), "cublasLt layout B " + req));
    KILN_RETURN_IF_ERROR(blas_status(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, key.n, key.m, key.ldc), "cublasLt layout C " + req));

    cublasLtMatmulPreference_t pref = nullptr;
    KILN_RETURN_IF_ERROR(blas_status(cublasLtMatmulPreferenceCreate(&pref), "cublasLt preference " + req));
    const uint64_t ws = kWorkspaceBytes;
    const uint32_t aa = key.align_a, ba = key.align_b, ca = key.align_c;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ba, sizeof ba);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ca, sizeof ca);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ca, sizeof ca);
    // Timing needs a synchronizing stream: never inside a recording (its eager first step has
    // already made the plan), and only where m is decode-sized (few distinct shapes). Only 16-bit
    // weights: which candidate wins a timing can change from run to run, and f32 weights are the
    // reference precision (fixtures, gradient checks) where the same bits every run matter more
    // than the ~1% (an ill-conditioned f32 gradient check moved from 2.5e-3 to 4e-3 between runs).
    const bool timed = tuning().gemm_autotune && wt != DType::kF32 && key.m <= tuning().gemm_autotune_max_m &&
                       !ctx_->recording();
    cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
    int found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref,
                                                             timed ? kCandidates : 1, results, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (hs != CUBLAS_STATUS_SUCCESS) return blas_status(hs, "cublasLt heuristic " + req);
    if (found == 0) return unsupported("cublasLt has no algorithm for " + req);
    p.algo = results[0].algo;
    if (!timed || found < 2) return {};
    TunedAlgorithms& tuned = tuned_algorithms();
    std::lock_guard<std::mutex> lock(tuned.mu);
    if (auto t = tuned.algos.find(key); t != tuned.algos.end()) {
      p.algo = t->second;
      return {};
    }
    KILN_ASSIGN_OR_RETURN(Tensor d, ctx_->empty({key.m * key.ldc}, DType::kF32));
    const int64_t flush_bytes = l2_flush_bytes();
    KILN_ASSIGN_OR_RETURN(Tensor flush, ctx_->empty({flush_bytes}, DType::kU8));
    GemmTrial t{handle_, p.desc, p.a, p.b, p.c, w, in, d.raw(), workspace_.raw(), kWorkspaceBytes,
                flush.raw(), static_cast<size_t>(flush_bytes), ctx_->stream};
    KILN_ASSIGN_OR_RETURN(const size_t pick, fastest_algorithm(t, std::span(results, static_cast<size_t>(found))));
    p.algo = results[pick].algo;
    tuned.algos.emplace(key, p.algo);
    ++timed_;
    return {};
  }();
  if (!st.ok()) {
    destroy();
    return st.with_context("cublasLt plan");
  }
  return &plans_.emplace(key, p).first->second;
}

// The GEMV of one matmul: x, its weight and output as the first segment, the tuning's choices.
GemvParams Linear::gemv_params(const MatmulArgs& a, const MatmulRequest& r) const {
  GemvParams g;
  g.m = r.m;
  g.k = r.k;
  g.x = rows_of<const float>(a.x);
  g.w_dtype = a.w.dtype();
  g.seg[0] = {a.w.raw(), rows_of<float>(a.out), r.n};
  g.accumulate = a.accumulate;
  g.multiprocessors = device_target().multiprocessors;
  g.rows_per_warp = tuning().gemv_rows;
  return g;
}

// One GEMV launch for every projection of the group where the decode GEMV applies to each
// (m <= 2, one 16-bit weight dtype and k, at most kGemvMaxSegments), else one call each.
Status Linear::matmul_group(const MatmulGroupArgs& a) {
  const size_t count = a.w.size();
  bool one_launch = tuning().gemv && count >= 2 && count <= static_cast<size_t>(kGemvMaxSegments) &&
                    a.out.size() == count && a.x.defined() && a.x.dtype() == DType::kF32 && a.x.rank() == 2 &&
                    a.x.dim(0) <= 2;
  GemvParams g;
  for (size_t i = 0; one_launch && i < count; ++i) {
    const MatmulArgs m{a.x, a.w[i], a.out[i], a.accumulate};
    KILN_RETURN_IF_ERROR(check_args(*this, m));
    const MatmulRequest r = describe(m);
    if (i == 0) g = gemv_params(m, r);
    one_launch = r.m > 0 && r.n > 0 && a.w[i].dtype() == g.w_dtype && r.k == g.k;
    g.seg[i] = {a.w[i].raw(), rows_of<float>(a.out[i]), r.n};
  }
  g.segments = static_cast<int>(count);
  if (!one_launch || !gemv_applies(g)) return cublaslt_group(a);
  ProfileScope prof(ctx_->profiler.get(), [&] {
    return "matmul gemv group m=" + std::to_string(g.m) + " n=" + std::to_string(g.rows()) + " k=" + std::to_string(g.k) +
           " segments=" + std::to_string(count);
  });
  Status st = gemv(g, ctx_->stream);
  return st.ok() ? st : st.with_context("matmul_group of " + std::to_string(count));
}

Status Linear::matmul(const MatmulArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const MatmulRequest r = describe(a);
  if (r.m == 0 || r.n == 0) return {};
  KILN_ASSIGN_OR_RETURN(const SmallGemm kernel, kernel_for(a, r));
  if (kernel == SmallGemm::kGemv) {
    ProfileScope prof(ctx_->profiler.get(), [&] {
      return "matmul gemv m=" + std::to_string(r.m) + " n=" + std::to_string(r.n) + " k=" + std::to_string(r.k);
    });
    return in_context(gemv(gemv_params(a, r), ctx_->stream), a);
  }
  if (kernel == SmallGemm::kSkinny) {
    ProfileScope prof(ctx_->profiler.get(), [&] {
      return "matmul skinny m=" + std::to_string(r.m) + " n=" + std::to_string(r.n) + " k=" + std::to_string(r.k);
    });
    return in_context(skinny_gemm(skinny_params(a, r), ctx_->stream), a);
  }
  return cublaslt(a, r, 1.f);
}

SkinnyGemmParams Linear::skinny_params(const MatmulArgs& a, const MatmulRequest& r) const {
  SkinnyGemmParams p;
  p.m = r.m;
  p.n = r.n;
  p.k = r.k;
  p.x = rows_of<const void>(a.x);
  p.x_dtype = a.x.dtype();
  p.w = a.w.raw();
  p.w_dtype = a.w.dtype();
  p.out = rows_of<float>(a.out);
  p.accumulate = a.accumulate;
  p.splits = tuning().skinny_splits;
  p.wgmma = tuning().skinny_wgmma && device_target().sm90_features;
  return p;
}

// Whether the skinny GEMM may run this matmul: bf16 weights, its layout conditions, up to 16 rows
// (past 16 whole decode steps measured slower with it though the kernel alone timed faster:
// docs/decisions.md), or up to kSkinnyMaxM rows where a test or the kernel bench forces it.
bool Linear::skinny_candidate(const MatmulArgs& a, const MatmulRequest& r) const {
  const int64_t max_m = tuning().skinny_everywhere ? kSkinnyMaxM : 16;
  if (!tuning().skinny || a.w.dtype() != DType::kBF16 || r.m > max_m || r.out_dtype != DType::kF32) return false;
  return skinny_gemm_applies(skinny_params(a, r));
}

// Whether the decode GEMV kernel may run this matmul (16-bit weights, f32 x, few rows, its layout
// conditions).
bool Linear::gemv_candidate(const MatmulArgs& a, const MatmulRequest& r) const {
  if (a.w.dtype() == DType::kF32 || a.x.dtype() != DType::kF32 || !tuning().gemv || r.m > kGemvMaxM)
    return false;
  return gemv_applies(gemv_params(a, r));
}

Result<SmallGemm> Linear::kernel_for(const MatmulArgs& a, const MatmulRequest& r) {
  const bool gemv_ok = gemv_candidate(a, r), skinny_ok = skinny_candidate(a, r);
  if (!gemv_ok && !skinny_ok) return SmallGemm::kCublasLt;
  if (skinny_ok && !gemv_ok && tuning().skinny_everywhere) return SmallGemm::kSkinny;
  // The H200's rules, where no timing may run.
  const SmallGemm rule = gemv_ok && gemv_beats_cublaslt(r.m, r.n) ? SmallGemm::kGemv
                         : skinny_ok && device_target().sm90_features && skinny_beats_cublaslt(r.m, r.n)
                             ? SmallGemm::kSkinny
                             : SmallGemm::kCublasLt;
  // Each candidate on the call's own weight and x, into a scratch output.
  MatmulArgs t{a.x, a.w, Tensor(), false};
  auto scratch = [&]() -> Status {
    KILN_ASSIGN_OR_RETURN(t.out, ctx_->empty({r.m, r.n}, DType::kF32));
    return {};
  };
  std::vector<Candidate> candidates{{"cublaslt", [&] { return cublaslt(t, r, 1.f); }}};
  if (gemv_ok) candidates.push_back({"gemv", [&] { return gemv(gemv_params(t, r), ctx_->stream); }});
  if (skinny_ok) candidates.push_back({"skinny", [&] { return skinny_gemm(skinny_params(t, r), ctx_->stream); }});
  const SmallGemmKey key{r.m, r.n, r.k, a.w.dtype(), a.x.dtype(), gemv_ok, skinny_ok};
  KILN_ASSIGN_OR_RETURN(const std::string pick,
                        choose_kernel(*ctx_, key.text(), candidates, small_gemm_name(rule), "cublaslt", scratch));
  return small_gemm_named(pick);
}

Result<Linear::GemmInput> Linear::gemm_input(const Tensor& x, const MatmulRequest& r, DType w_dtype,
                                             const std::string& req) {
  GemmInput in{x.raw(), r.m == 1 ? r.k : std::max<int64_t>(x.stride(0), r.k), {}};
  if (w_dtype == DType::kF32 || x.dtype() == w_dtype) return in;  // already the GEMM's operand
  const size_t bytes = static_cast<size_t>(r.m * r.k) * dtype_size(w_dtype);
  void* buf = nullptr;
  if (ctx_->recording()) {
    // The shared scratch_ may later be regrown and its block handed to eager work, which a
    // replay would then overwrite.
    KILN_ASSIGN_OR_RETURN(in.held, ctx_->empty({static_cast<int64_t>(bytes)}, DType::kU8));
    buf = in.held.raw();
  } else {
    KILN_ASSIGN_OR_RETURN(buf, scratch(bytes));
  }
  ConvertParams cp;
  cp.rows = r.m;
  cp.cols = r.k;
  cp.src = x.data<float>();
  cp.src_stride = x.stride(0);
  cp.dst = buf;
  cp.dst_stride = r.k;
  cp.dst_dtype = w_dtype;
  KILN_RETURN_IF_ERROR(convert_f32(cp, ctx_->stream).with_context(req));
  in.ptr = buf;
  in.ld = r.k;
  return in;
}

Status Linear::gemm(const MatmulArgs& a, const MatmulRequest& r, float alpha, const GemmInput& in,
                    const std::string& req) {
  const int64_t ldc = r.m == 1 ? r.n : std::max<int64_t>(a.out.stride(0), r.n);
  Key key{r.m, r.n, r.k, in.ld, ldc, static_cast<int>(a.w.dtype()), alignment_of(a.w.raw()), alignment_of(in.ptr),
          alignment_of(a.out.raw())};
  KILN_ASSIGN_OR_RETURN(const Plan* plan, plan_for(key, req, a.w.raw(), in.ptr));
  const float beta = a.accumulate ? 1.f : 0.f;
  kernel_launch_count().fetch_add(1, std::memory_order_relaxed);  // one cuBLASLt matmul, counted as one launch
  return blas_status(cublasLtMatmul(handle_, plan->desc, &alpha, a.w.raw(), plan->a, in.ptr, plan->b, &beta,
                                    a.out.raw(), plan->c, a.out.raw(), plan->c, &plan->algo, workspace_.raw(),
                                    kWorkspaceBytes, ctx_->stream),
                     "cublasLt matmul " + req);
}

// out (+)= alpha x w^T through cuBLASLt, `a` already checked.
Status Linear::cublaslt(const MatmulArgs& a, const MatmulRequest& r, float alpha) {
  ProfileScope prof(ctx_->profiler.get(), [&] {
    return "matmul cublaslt m=" + std::to_string(r.m) + " n=" + std::to_string(r.n) + " k=" + std::to_string(r.k);
  });
  const std::string req = r.describe();  // the cuBLASLt path names the request in every error
  std::lock_guard<std::mutex> lock(mu_);
  KILN_RETURN_IF_ERROR(ensure_handle());
  KILN_ASSIGN_OR_RETURN(const GemmInput in, gemm_input(a.x, r, a.w.dtype(), req));
  return gemm(a, r, alpha, in, req);
}

// A group whose projections all take cuBLASLt on one 16-bit weight dtype: x rounded once, then a
// GEMM each (one call per projection would round x once per projection: at 64 decode rows that
// was ~120 of the ~190 rounding kernels a step). Anything else: one matmul each.
Status Linear::cublaslt_group(const MatmulGroupArgs& a) {
  const size_t count = a.w.size();
  if (count < 2 || a.out.size() != count || !a.x.defined()) return LinearFacet::matmul_group(a);
  std::vector<MatmulRequest> reqs;
  for (size_t i = 0; i < count; ++i) {
    const MatmulArgs m{a.x, a.w[i], a.out[i], a.accumulate};
    KILN_RETURN_IF_ERROR(check_args(*this, m));
    reqs.push_back(describe(m));
    if (a.w[i].dtype() == DType::kF32 || a.w[i].dtype() != a.w[0].dtype() || reqs[i].k != reqs[0].k ||
        reqs[i].n == 0)
      return LinearFacet::matmul_group(a);
    KILN_ASSIGN_OR_RETURN(const SmallGemm kernel, kernel_for(m, reqs[i]));
    if (kernel != SmallGemm::kCublasLt) return LinearFacet::matmul_group(a);
  }
  if (reqs[0].m == 0) return {};
  ProfileScope prof(ctx_->profiler.get(), [&] {
    return "matmul cublaslt group m=" + std::to_string(reqs[0].m) + " k=" + std::to_string(reqs[0].k) +
           " projections=" + std::to_string(count);
  });
  std::lock_guard<std::mutex> lock(mu_);
  KILN_RETURN_IF_ERROR(ensure_handle());
  KILN_ASSIGN_OR_RETURN(const GemmInput in, gemm_input(a.x, reqs[0], a.w[0].dtype(), reqs[0].describe()));
  for (size_t i = 0; i < count; ++i)
    KILN_RETURN_IF_ERROR(gemm({a.x, a.w[i], a.out[i], a.accumulate}, reqs[i], 1.f, in, reqs[i].describe()));
  return {};
}

}  // namespace kiln::cuda
