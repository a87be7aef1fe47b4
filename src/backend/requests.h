// Typed descriptors of backend work. A support predicate is evaluated on the actual request;
// each descriptor is derived from the tensors of a call (describe_*), so the question asked and
// the work done cannot drift apart.
#pragma once

#include <cstdint>
#include <string>

#include "backend/elementwise_ops.h"
#include "core/dtype.h"

namespace kiln {

enum class Phase : uint8_t { kPrefill, kDecode };
std::string_view phase_name(Phase p);

// y[m, n] (+)= x[m, k] * w[n, k]^T: every projection of the model.
struct MatmulRequest {
  int64_t m = 0, n = 0, k = 0;
  DType x_dtype = DType::kF32, w_dtype = DType::kF32, out_dtype = DType::kF32;
  bool accumulate = false;  // add into the output instead of overwriting it
  std::string describe() const;
};

enum class NormKind : uint8_t {
  kOnePlus,  // y = x * rsqrt(mean(x^2) + eps) * (1 + w): the model's RMSNorm
  kPlain,    // y = x * rsqrt(mean(x^2) + eps) * w
  kGated,    // y = w * x * rsqrt(mean(x^2) + eps) * silu(z): the GDN output norm
};

struct NormRequest {
  NormKind kind = NormKind::kOnePlus;
  int64_t rows = 0, width = 0;
  DType dtype = DType::kF32;
  bool fused_residual = false;  // residual += x first, then normalise the residual
  DType out_dtype = DType::kF32;  // or bf16 / f16 where the backend says so (NormArgs::out)
  std::string describe() const;
};

struct RopeRequest {
  int64_t tokens = 0, heads = 0, head_dim = 0, rotary_dim = 0;
  std::string describe() const;
};

// Writing new K/V rows into the paged cache through a slot mapping.
struct KvWriteRequest {
  int64_t tokens = 0, kv_heads = 0, head_dim = 0;
  int block_size = 0;
  DType kv_dtype = DType::kF32;
  std::string describe() const;
};

// Causal GQA attention of new query tokens over a paged K/V history that already holds them.
struct AttentionRequest {
  Phase phase = Phase::kPrefill;
  int64_t rows = 0, tokens = 0;  // sequences in the batch, query tokens in all of them
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_kv_len = 0;
  int block_size = 0;
  bool output_gate = false;  // out *= sigmoid(gate), fused
  DType dtype = DType::kF32, kv_dtype = DType::kF32;
  DType compute = DType::kF32;  // kBF16: products may round Q, K, V and P to bf16 (AttentionArgs)
  std::string describe() const;
};

// Depthwise causal conv1d (+ silu) continuing from a per-sequence state of the last K-1 inputs.
struct ConvRequest {
  Phase phase = Phase::kPrefill;
  int64_t rows = 0, tokens = 0, channels = 0, kernel = 0;
  std::string describe() const;
};

enum class GdnForm : uint8_t { kChunked, kRecurrent };

// The gated delta rule (l2 norm of q and k, gates, state recurrence) continuing from a state.
struct GdnRequest {
  Phase phase = Phase::kPrefill;
  GdnForm form = GdnForm::kChunked;
  int64_t rows = 0, tokens = 0, k_heads = 0, v_heads = 0, dk = 0, dv = 0;
  int chunk = 64;
  DType state_dtype = DType::kF32;
  DType compute = DType::kF32;  // kBF16: products may round their operands (GdnArgs)
  std::string describe() const;
};

// The fused GDN decode step: per row and value head, the conv update of the qkv projection, l2
// norm of q and k, gates, the recurrence and the gated output norm, in one call (docs/model.md,
// "Decode: the fused step"). Optional: a backend without it declines, and the model runs the conv,
// the delta rule and the gated norm as separate calls.
struct GdnDecodeRequest {
  int64_t rows = 0, tokens = 0, k_heads = 0, v_heads = 0, dk = 0, dv = 0, conv_kernel = 0;
  DType state_dtype = DType::kF32;
  std::string describe() const;
};

struct ElementwiseRequest {
  ElementwiseOp op = ElementwiseOp::kAdd;
  int64_t rows = 0, width = 0;
  DType dtype = DType::kF32;  // the table's dtype for kEmbed
  DType out_dtype = DType::kF32;
  std::string describe() const;
};

struct SampleRequest {
  int64_t rows = 0, vocab = 0;
  bool greedy = true;
  std::string describe() const;
};

}  // namespace kiln
