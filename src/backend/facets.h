// The facets: small interfaces, one per concern, through which model, engine and trainer code
// reach a backend. Each facet answers `supports(request)` for a concrete request and runs the
// work; a method asked to run a request its predicate declines returns kUnsupported naming it.
// Tensors are views on the backend's device; activations are f32 on the CPU reference.
//
// After each facet, KILN_<FACET>_OVERRIDES (KILN_NORM_OVERRIDES, ...) declares the methods every
// implementation overrides, so that each backend's class of that facet states them in one line:
// `class Norm final : public NormFacet { public: KILN_NORM_OVERRIDES ... };`. A method with a
// default is declared by the backends that override it. A new method is declared here twice, next
// to each other, and defined in each backend's .cc.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/batch_layout.h"
#include "backend/requests.h"
#include "backend/support.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

// ---- storage: device memory and host transfers ----
class StorageFacet {
 public:
  virtual ~StorageFacet() = default;
  virtual Result<Tensor> allocate(Shape shape, DType dtype) = 0;  // zero-filled
  // As allocate, but the contents are unspecified where the backend can skip the fill (CUDA: a
  // pool block as the last user left it): for a buffer the caller's next op writes entirely.
  virtual Result<Tensor> empty(Shape shape, DType dtype) { return allocate(std::move(shape), dtype); }
  // A device tensor holding `host`'s contents. May alias `host` where the device is the host.
  virtual Result<Tensor> upload(const Tensor& host) = 0;
  // One block of `bytes` for the model's weights, which load_weights fills through views at
  // 256-byte aligned offsets (copy_from_host); null where the backend keeps no arena and each
  // weight is its own upload (the CPU's alias the mapped checkpoint).
  virtual Result<std::shared_ptr<Storage>> weight_arena(size_t bytes) { return std::shared_ptr<Storage>(); }
  virtual Status copy_from_host(const Tensor& host_src, const Tensor& dst) = 0;
  virtual Status copy_to_host(const Tensor& src, const Tensor& host_dst) = 0;
  virtual Status zero(const Tensor& dst) = 0;  // a contiguous tensor
  // Device to device, both contiguous, same dtype and size (GDN state snapshots of the prefix cache).
  virtual Status copy(const Tensor& src, const Tensor& dst) = 0;
  virtual Status synchronize() = 0;
};
#define KILN_STORAGE_OVERRIDES                                             \
  Result<Tensor> allocate(Shape shape, DType dtype) override;              \
  Result<Tensor> upload(const Tensor& host) override;                      \
  Status copy_from_host(const Tensor& host_src, const Tensor& dst) override; \
  Status copy_to_host(const Tensor& src, const Tensor& host_dst) override; \
  Status zero(const Tensor& dst) override;                                 \
  Status copy(const Tensor& src, const Tensor& dst) override;              \
  Status synchronize() override;

// ---- linear: projections ----
struct MatmulArgs {
  Tensor x;    // [m, k] f32 (or w's 16-bit dtype where the backend says so), rows may be strided
  Tensor w;    // [n, k] f32 / bf16 / f16, contiguous (a weight)
  Tensor out;  // [m, n] f32, rows may be strided
  bool accumulate = false;
};
MatmulRequest describe(const MatmulArgs& a);

// Projections of one x into outputs of their own (q, k and v; gate and up): out[i] (+)= x w[i]^T,
// each pair as in MatmulArgs. A backend may run them as one kernel (CUDA: one GEMV launch for
// decode-sized x); by default, and wherever that does not apply, they run one by one.
struct MatmulGroupArgs {
  Tensor x;
  std::vector<Tensor> w, out;
  bool accumulate = false;
};

// One adapter term over a run of tokens (model/lora_batch.h): out[begin, end) += coef *
// (x[begin, end) A^T) B^T.
struct LoraSegment {
  int64_t begin = 0, end = 0;  // tokens of x and out
  Tensor a;                    // [r, in] f32 / bf16 / f16, contiguous
  Tensor b;                    // [out, r], contiguous
  float coef = 1.f;            // the term's weight times the adapter's alpha / r
};

// The LoRA deltas of one projection over a batch: every segment's delta is added to out, in
// segment order; segments may overlap (a stack of adapters is several segments over one run,
// and their deltas add) and tokens no segment covers keep their value.
struct LoraDeltaArgs {
  Tensor x;    // [tokens, in] f32, rows may be strided: the projection's input
  Tensor out;  // [tokens, out] f32, rows may be strided: its output
  std::span<const LoraSegment> segments;
  // Only the implementation through matmul (the default; CUDA's unless its kernels are on) needs
  // it: where it allocates its temporaries, x A^T and the coef * I that scales it.
  StorageFacet* storage = nullptr;
  // Optional [tokens, r] f32, contiguous: receives x A^T (unscaled) of the call's one segment,
  // which then covers every token (a traced forward keeps it for the backward, LayerTrace::lora_u).
  Tensor u = {};
};

class LinearFacet {
 public:
  virtual ~LinearFacet() = default;
  virtual Support supports(const MatmulRequest& r) const = 0;
  virtual Status matmul(const MatmulArgs& a) = 0;
  virtual Status matmul_group(const MatmulGroupArgs& a) {
    if (a.w.size() != a.out.size())
      return invalid_argument("matmul_group: " + std::to_string(a.w.size()) + " weights for " +
                              std::to_string(a.out.size()) + " outputs");
    for (size_t i = 0; i < a.w.size(); ++i) KILN_RETURN_IF_ERROR(matmul({a.x, a.w[i], a.out[i], a.accumulate}));
    return {};
  }
  // By default two or three matmuls a segment (u = x A^T; u = u (coef I); out += u B^T) with
  // temporaries from `a.storage` (backend/lora_delta.cc); CPU and CUDA run their own.
  virtual Status lora_delta(const LoraDeltaArgs& a);
};
#define KILN_LINEAR_OVERRIDES                            \
  Support supports(const MatmulRequest& r) const override; \
  Status matmul(const MatmulArgs& a) override;

// ---- norm ----
struct NormArgs {
  NormKind kind = NormKind::kOnePlus;
  Tensor x;         // [rows, width] (rows may be strided)
  Tensor residual;  // optional [rows, width]: residual += x, then the residual is normalised
  Tensor weight;    // [width] f32
  Tensor gate;      // [rows, width], kGated only (z)
  Tensor out;       // [rows, width], f32; bf16 or f16 where the backend says so: the f32 result
                    // rounded to nearest even (a projection's GEMM operand, as its GEMM would round it)
  float eps = 1e-6f;
};
NormRequest describe(const NormArgs& a);

class NormFacet {
 public:
  virtual ~NormFacet() = default;
  virtual Support supports(const NormRequest& r) const = 0;
  virtual Status rms_norm(const NormArgs& a) = 0;
};
#define KILN_NORM_OVERRIDES                              \
  Support supports(const NormRequest& r) const override; \
  Status rms_norm(const NormArgs& a) override;

// ---- attention: rotary embedding, paged K/V writes, causal GQA attention ----
struct RopeArgs {
  Tensor q;          // [tokens, q_heads, head_dim] (strided), rotated in place
  Tensor k;          // [tokens, kv_heads, head_dim] (strided), rotated in place
  Tensor positions;  // [tokens] i32
  int64_t rotary_dim = 0;  // leading dims of each head that rotate ("rotate half" inside them)
  float theta = 10000.f;
};
RopeRequest describe(const RopeArgs& a);

struct KvWriteArgs {
  Tensor k, v;              // [tokens, kv_heads, head_dim]
  Tensor k_cache, v_cache;  // [blocks, block_size, kv_heads, head_dim]
  Tensor slot_mapping;      // [tokens] i32
};
KvWriteRequest describe(const KvWriteArgs& a);

struct AttentionArgs {
  Tensor q;     // [tokens, q_heads, head_dim] (strided)
  Tensor gate;  // optional [tokens, q_heads, head_dim]: out *= sigmoid(gate)
  Tensor out;   // [tokens, q_heads, head_dim]
  Tensor k_cache, v_cache;  // [blocks, block_size, kv_heads, head_dim], already holding the new tokens
  const BatchLayout* layout = nullptr;
  float scale = 1.f;
  // kBF16: Q, K, V and the probabilities may be rounded to bf16 for tensor cores, f32
  // accumulation (a backend may still compute in f32). kF32: every product in f32.
  DType compute = DType::kF32;
  // Optional, for a training backward of these inputs (every row from position 0): where the
  // backend may leave what its TrainingFacet::attention_backward reuses (AttentionBackwardArgs::
  // kept) instead of recomputing the softmax. A backend that keeps nothing leaves it undefined.
  Tensor* kept = nullptr;
};
AttentionRequest describe(const AttentionArgs& a);

class AttentionFacet {
 public:
  virtual ~AttentionFacet() = default;
  virtual Support supports(const RopeRequest& r) const = 0;
  virtual Support supports(const KvWriteRequest& r) const = 0;
  virtual Support supports(const AttentionRequest& r) const = 0;
  virtual Status rope(const RopeArgs& a) = 0;
  virtual Status write_kv(const KvWriteArgs& a) = 0;
  virtual Status attend(const AttentionArgs& a) = 0;
};
#define KILN_ATTENTION_OVERRIDES                              \
  Support supports(const RopeRequest& r) const override;      \
  Support supports(const KvWriteRequest& r) const override;   \
  Support supports(const AttentionRequest& r) const override; \
  Status rope(const RopeArgs& a) override;                    \
  Status write_kv(const KvWriteArgs& a) override;             \
  Status attend(const AttentionArgs& a) override;

// ---- conv: depthwise causal conv1d + silu with per-sequence state ----
struct ConvArgs {
  Tensor x;       // [tokens, channels] (rows may be strided)
  Tensor weight;  // [channels, kernel] f32
  Tensor state;   // [slots, kernel - 1, channels] f32: the last K-1 inputs of each sequence
  Tensor out;     // [tokens, channels]
  const BatchLayout* layout = nullptr;
};
ConvRequest describe(const ConvArgs& a);

class ConvFacet {
 public:
  virtual ~ConvFacet() = default;
  virtual Support supports(const ConvRequest& r) const = 0;
  virtual Status causal_conv1d(const ConvArgs& a) = 0;
};
#define KILN_CONV_OVERRIDES                              \
  Support supports(const ConvRequest& r) const override; \
  Status causal_conv1d(const ConvArgs& a) override;

// ---- GDN: the gated delta rule ----
struct GdnArgs {
  GdnForm form = GdnForm::kChunked;
  int chunk = 64;
  Tensor q, k;         // [tokens, k_heads, dk] (strided), raw: normalised inside
  Tensor v;            // [tokens, v_heads, dv] (strided)
  Tensor a, b;         // [tokens, v_heads] (strided): decay and beta pre-activations
  Tensor a_log, dt_bias;  // [v_heads] f32
  Tensor state;        // [slots, v_heads, dk, dv] f32
  Tensor out;          // [tokens, v_heads, dv]
  const BatchLayout* layout = nullptr;
  // Optional, for a training backward of these inputs (every row from a zero state): where the
  // backend may leave what its TrainingFacet::gdn_backward reuses (GdnBackwardArgs::kept) instead
  // of running the forward again. A backend that keeps nothing leaves it undefined.
  Tensor* kept = nullptr;
  // kBF16: the chunked form's products may round their operands to bf16 for tensor cores, f32
  // accumulation and state (a backend may keep more: CUDA rounds them to tf32). kF32: every
  // product at f32 accuracy.
  DType compute = DType::kF32;
};
GdnRequest describe(const GdnArgs& a);

// One decode step of a GDN layer after its input projections: conv update of `mixed`, l2 norm
// of q and k, gates, recurrence, gated norm with z. Equal to causal_conv1d, delta_rule
// (recurrent) and the kGated norm run in turn.
struct GdnDecodeArgs {
  Tensor mixed;        // [tokens, 2*k_heads*dk + v_heads*dv] (rows may be strided): q, k, v before the conv
  Tensor conv_weight;  // [channels, kernel] f32
  Tensor conv_state;   // [slots, kernel - 1, channels] f32
  Tensor z;            // [tokens, v_heads, dv] (strided): the output norm's gate
  Tensor a, b;         // [tokens, v_heads] (strided): decay and beta pre-activations
  Tensor a_log, dt_bias;  // [v_heads] f32
  Tensor state;        // [slots, v_heads, dk, dv] f32
  Tensor norm_weight;  // [dv] f32 (plain w)
  Tensor out;          // [tokens, v_heads, dv]: gated_norm(o, z)
  int64_t k_heads = 0, dk = 0;  // `mixed` is flat: its split into heads
  float eps = 1e-6f;
  const BatchLayout* layout = nullptr;
};
GdnDecodeRequest describe(const GdnDecodeArgs& a);

class GdnFacet {
 public:
  virtual ~GdnFacet() = default;
  virtual Support supports(const GdnRequest& r) const = 0;
  virtual Status delta_rule(const GdnArgs& a) = 0;
  // Optional; the default declines, and callers then run the three steps separately.
  virtual Support supports(const GdnDecodeRequest& r) const {
    return Support::declined("this backend has no fused GDN decode step");
  }
  virtual Status fused_decode(const GdnDecodeArgs& a) {
    return unsupported("declined " + describe(a).describe() + ": this backend has no fused GDN decode step");
  }
};
#define KILN_GDN_OVERRIDES                              \
  Support supports(const GdnRequest& r) const override; \
  Status delta_rule(const GdnArgs& a) override;

// ---- elementwise: embedding gather, residual add, SiLU-gated product ----
struct EmbedArgs {
  Tensor ids;    // [tokens] i32
  Tensor table;  // [vocab, width] any float dtype
  Tensor out;    // [tokens, width] f32
};
struct BinaryArgs {
  ElementwiseOp op = ElementwiseOp::kAdd;  // kAdd: out = a + b; kSiluMul: out = silu(a) * b
  Tensor a, b, out;  // [rows, width] (rows may be strided), f32; kSiluMul's out may be bf16 or f16
                     // where the backend says so: the f32 result rounded to nearest even (the
                     // down projection's operand, as its GEMM would round it)
};
ElementwiseRequest describe(const EmbedArgs& a);
ElementwiseRequest describe(const BinaryArgs& a);

class ElementwiseFacet {
 public:
  virtual ~ElementwiseFacet() = default;
  virtual Support supports(const ElementwiseRequest& r) const = 0;
  virtual Status embed(const EmbedArgs& a) = 0;
  virtual Status binary(const BinaryArgs& a) = 0;
};
#define KILN_ELEMENTWISE_OVERRIDES                              \
  Support supports(const ElementwiseRequest& r) const override; \
  Status embed(const EmbedArgs& a) override;                    \
  Status binary(const BinaryArgs& a) override;

// ---- sampling ----
struct ArgmaxArgs {
  Tensor logits;  // [rows, vocab] f32
  Tensor ids;     // [rows] i32
  // Structured output (empty: none): per logits row, a host bitmask of the ids it may take
  // ((vocab + 31) / 32 words, as SampleRow::allowed) or null for all; the row's first largest
  // allowed logit. A backend that cannot declines a request that is `constrained`.
  std::span<const uint32_t* const> allowed = {};
};
SampleRequest describe(const ArgmaxArgs& a);

// One row's sampling request, applied in the sampler's order (docs/ARCHITECTURE.md, "The engine";
// backend/sampling_math.h): repetition penalty over `seen` (each distinct token once), presence and
// frequency penalties over `generated` (with occurrence counts), then at temperature 0 the first
// largest logit, its logprob under their softmax; at temperature > 0 temperature, top-k, softmax,
// min-p, top-p, and the token whose cumulative-probability interval (in index order) holds u. Rows
// that want only the argmax of raw logits are `argmax`'s. Before all of that a structured-output
// row's logits take its logit bias and lose every id its mask disallows (apply_bias_and_mask); a
// backend that cannot declines a request that is `constrained`.
struct SampleRow {
  float temperature = 1.f, top_p = 1.f, min_p = 0.f;
  int32_t top_k = 0;
  float repetition_penalty = 1.f, presence_penalty = 0.f, frequency_penalty = 0.f;
  double u = 0;  // [0, 1); unused at temperature 0
  std::span<const int32_t> seen, generated;  // host token ids; out-of-range ids are ignored
  int32_t top_logprobs = 0;  // [0, kMaxTopLogprobs]: the most likely tokens of the final distribution
  const uint32_t* allowed = nullptr;                 // host bitmask, (vocab + 31) / 32 words; null: all
  std::span<const std::pair<int32_t, float>> bias;  // host (id, bias), distinct ids in range, finite
  bool constrained() const { return allowed != nullptr || !bias.empty(); }
};
constexpr int32_t kMaxTopLogprobs = 20;
struct SampleArgs {
  Tensor logits;                   // [rows, vocab] f32 on the backend's device, rows may be strided
  std::span<const SampleRow> rows;  // one per logits row
  Tensor ids;                      // [rows] i32, host
  Tensor logprobs;                 // [rows] f32, host: log p(token) under the final distribution
  // [rows, n] host, n >= every row's top_logprobs (undefined when no row asks): a row's first
  // top_logprobs entries, most likely first (ties: lower id first), the rest unspecified.
  Tensor top_ids = {};       // i32
  Tensor top_logprobs = {};  // f32
};
SampleRequest describe(const SampleArgs& a);

class SamplingFacet {
 public:
  virtual ~SamplingFacet() = default;
  virtual Support supports(const SampleRequest& r) const = 0;
  virtual Status argmax(const ArgmaxArgs& a) = 0;
  // The token of each row, drawn as above; ids and logprobs are on the host when it returns.
  virtual Status sample(const SampleArgs& a) {
    return unsupported("declined " + describe(a).describe() + ": this backend has no sampling on its device");
  }
};
#define KILN_SAMPLING_OVERRIDES                            \
  Support supports(const SampleRequest& r) const override; \
  Status argmax(const ArgmaxArgs& a) override;

}  // namespace kiln
