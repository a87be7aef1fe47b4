// The CUDA implementations of each facet, one class per facet (each in its own .cc). All share
// one Context: every kernel, copy and GEMM runs in order on its stream.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backend/arg_checks.h"
#include "backend/cuda/context.h"
#include "backend/cuda/gemm_choice.h"
#include "backend/facets.h"
#include "backend/lora_delta.h"
#include "backend/replay.h"

namespace kiln::cuda {

// check_native_call (backend/arg_checks.h) for this backend.
template <typename Facet, typename Args>
Status check_args(const Facet& facet, const Args& args) {
  return check_native_call(facet, args, "cuda", DeviceKind::kCuda);
}

// `s`, with the request of `args` as its context when it is an error.
template <typename Args>
Status in_context(Status s, const Args& args) {
  return s.ok() ? s : s.with_context(describe(args).describe());
}

class Storage final : public StorageFacet {
 public:
  explicit Storage(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_STORAGE_OVERRIDES
  Result<Tensor> empty(Shape shape, DType dtype) override { return ctx_->empty(std::move(shape), dtype); }
  Result<std::shared_ptr<kiln::Storage>> weight_arena(size_t bytes) override;

 private:
  std::shared_ptr<Context> ctx_;
};

struct GemvParams;        // kernels/gemv.h
struct PagedAttentionParams;  // kernels/paged_attention.h
struct AttentionSplit;
struct SkinnyGemmParams;  // kernels/skinny_gemm.h

struct MatmulCacheStats {
  uint64_t hits = 0, misses = 0, entries = 0;
  uint64_t timed = 0;  // plans whose algorithm the autotuner chose (gemm_autotune.h)
};

// GEMMs. bf16/f16 weights with few rows (decode): the GEMV kernel (kernels/gemv.h, f32 x read
// directly, m <= 8) or the skinny GEMM (kernels/skinny_gemm.h, bf16, m <= 16) where it timed
// faster than cuBLASLt on this device (gemm_choice.h). Otherwise cuBLASLt: bf16/f16 weights with x rounded to the weight dtype in a scratch
// buffer, f32 accumulation and output; f32 weights in plain f32 (no TF32). Descriptors and the
// heuristic's algorithm are cached per request shape (dims, leading dims, dtypes, alignments);
// where m is decode-sized, the algorithm is the fastest of the heuristic's candidates, timed.
// A projection group on cuBLASLt rounds its shared x once for all its GEMMs.
class Linear final : public LinearFacet {
 public:
  explicit Linear(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  ~Linear() override;
  KILN_LINEAR_OVERRIDES
  Status matmul_group(const MatmulGroupArgs& a) override;
  Status lora_delta(const LoraDeltaArgs& a) override;  // linear_lora.cc
  MatmulCacheStats cache_stats() const;

  struct Key {
    int64_t m, n, k, ldb, ldc;
    int w_dtype, align_a, align_b, align_c;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };

 private:
  Status ensure_handle();
  // The cached plan of `key`, made on a miss (`w` and `in` are the call's operands, which the
  // autotuner times the candidates on). Called under mu_.
  Result<const Plan*> plan_for(const Key& key, const std::string& req, const void* w, const void* in);
  Result<void*> scratch(size_t bytes);
  // The B operand of a cuBLASLt GEMM: x itself (f32 weights), or x rounded to the weight dtype
  // in a scratch buffer (`held` keeps a recording's own buffer alive). Called under mu_.
  struct GemmInput {
    const void* ptr = nullptr;
    int64_t ld = 0;
    Tensor held;
  };
  Result<GemmInput> gemm_input(const Tensor& x, const MatmulRequest& r, DType w_dtype, const std::string& req);
  // out (+)= alpha x w^T on `in` (a's x as gemm_input gave it). Called under mu_.
  Status gemm(const MatmulArgs& a, const MatmulRequest& r, float alpha, const GemmInput& in, const std::string& req);
  Status cublaslt(const MatmulArgs& a, const MatmulRequest& r, float alpha);
  Status cublaslt_group(const MatmulGroupArgs& a);
  // Which kernel runs this matmul: the GEMV or the skinny GEMM where they may (the candidates)
  // and timed fastest on this device for the shape, else cuBLASLt (gemm_choice.h).
  Result<SmallGemm> kernel_for(const MatmulArgs& a, const MatmulRequest& r);
  bool gemv_candidate(const MatmulArgs& a, const MatmulRequest& r) const;
  GemvParams gemv_params(const MatmulArgs& a, const MatmulRequest& r) const;
  bool skinny_candidate(const MatmulArgs& a, const MatmulRequest& r) const;
  SkinnyGemmParams skinny_params(const MatmulArgs& a, const MatmulRequest& r) const;

  std::shared_ptr<Context> ctx_;
  cublasLtHandle_t handle_ = nullptr;
  Tensor workspace_, scratch_;
  std::unordered_map<Key, Plan, KeyHash> plans_;
  LoraScalings lora_scalings_;  // lora_delta's coef * I matrices, kept across calls
  struct TunedAlgorithms;
  static TunedAlgorithms& tuned_algorithms();
  uint64_t hits_ = 0, misses_ = 0, timed_ = 0;
  mutable std::mutex mu_;
};

class Norm final : public NormFacet {
 public:
  explicit Norm(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_NORM_OVERRIDES

 private:
  std::shared_ptr<Context> ctx_;
};

class Attention final : public AttentionFacet {
 public:
  explicit Attention(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_ATTENTION_OVERRIDES

 private:
  // The tensor-core flash kernel, or the f32 kernels (split-key, tensor-core decode or simple).
  Status attend_flash(const AttentionArgs& a, const AttentionRequest& r);
  Status attend_f32(const AttentionArgs& a, const AttentionRequest& r);
  // Whether a prefill that may take the flash kernel does: timed per shape on this device.
  Result<bool> flash_wins(const AttentionArgs& a, const AttentionRequest& r);
  // Whether a decode over the split kernel runs lanes over keys: timed per shape on this device.
  Result<bool> key_groups_win(const PagedAttentionParams& p, const AttentionSplit& s, const AttentionRequest& r);
  std::shared_ptr<Context> ctx_;
};

class Conv final : public ConvFacet {
 public:
  explicit Conv(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_CONV_OVERRIDES

 private:
  std::shared_ptr<Context> ctx_;
};

// The recurrent kernel, the chunked (WY/UT) prefill kernel and the fused decode step.
class Gdn final : public GdnFacet {
 public:
  explicit Gdn(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_GDN_OVERRIDES
  Support supports(const GdnDecodeRequest& r) const override;
  Status fused_decode(const GdnDecodeArgs& a) override;

 private:
  std::shared_ptr<Context> ctx_;
};

class Elementwise final : public ElementwiseFacet {
 public:
  explicit Elementwise(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_ELEMENTWISE_OVERRIDES

 private:
  std::shared_ptr<Context> ctx_;
};

// Greedy selection. Logits may be host tensors (the forward returns host logits today): they are
// staged through a device buffer and the ids copied back, so callers written against the CPU
// backend run unchanged. Device logits and ids stay on the device.
class Sampling final : public SamplingFacet {
 public:
  explicit Sampling(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_SAMPLING_OVERRIDES
  // Device logits only (kernels/sample.h): one upload of every row's parameters and penalty
  // lists, one kernel per group of rows, one copy of ids and logprobs back, one synchronise.
  Status sample(const SampleArgs& a) override;

 private:
  std::shared_ptr<Context> ctx_;
  Tensor counters_;  // u32 per row, zero between calls (kernels/argmax.h)
};

// CUDA graphs: record() captures the body's work on the context's stream (relaxed mode, so the
// recording pool may still cudaMalloc) and instantiates it; replay() launches the executable
// graph on the same stream. Unavailable while profiling (the profiler synchronises) or with
// KILN_CUDA_GRAPHS=0.
class Replay final : public ReplayFacet {
 public:
  explicit Replay(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  bool available() const override;
  Result<std::unique_ptr<Recording>> record(const std::function<Status()>& body) override;
  Status replay(const Recording& r) override;
  uint64_t recordings() const { return recordings_; }
  uint64_t replays() const { return replays_; }

 private:
  std::shared_ptr<Context> ctx_;
  uint64_t recordings_ = 0, replays_ = 0;
};

}  // namespace kiln::cuda
