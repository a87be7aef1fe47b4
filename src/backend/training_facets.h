// The training facets: the backward of each forward operation and the optimizer step
// (docs/ARCHITECTURE.md, "Training"). Only LoRA factors are trained, so no backward produces a
// base-weight gradient; gradients flow to the activations (and from them to the factors through
// `TrainingFacet::gemm`). Training sequences start from an empty state (no prefix): attention, conv
// and GDN backward assume position 0 and zero initial state for every row of the layout. Every
// output gradient tensor is overwritten unless the args say `accumulate`.
#pragma once

#include <span>
#include <string>

#include "backend/batch_layout.h"
#include "backend/requests.h"
#include "backend/support.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

enum class TrainOp : uint8_t {
  kGemm, kNormBackward, kSiluMulBackward, kRopeBackward, kAttentionBackward, kConvBackward,
  kGdnBackward, kTokenLogprobs, kTokenLogprobsBackward,
};
std::string_view train_op_name(TrainOp op);

// What one training call asks of a backend: the op and its sizes (the fields an op does not
// have stay 0, and describe() leaves them out).
struct TrainRequest {
  TrainOp op = TrainOp::kGemm;
  int64_t rows = 0, tokens = 0;           // sequences, tokens (or m for kGemm)
  int64_t width = 0, inner = 0, out = 0;  // kGemm: n, k, (unused); norms: width; logprobs: hidden, vocab
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;  // attention; GDN: k_heads, v_heads, dk (dv in `inner`)
  int64_t kernel = 0;                     // conv taps
  DType dtype = DType::kF32;              // kGemm: dtype of b; logprobs: the LM head's dtype; else the activations'
  static constexpr auto kFields = std::tuple{
      field("", &TrainRequest::op, train_op_name), field_unless_default("rows", &TrainRequest::rows),
      field_unless_default("tokens", &TrainRequest::tokens), field_unless_default("width", &TrainRequest::width),
      field_unless_default("inner", &TrainRequest::inner), field_unless_default("out", &TrainRequest::out),
      field_unless_default("q_heads", &TrainRequest::q_heads),
      field_unless_default("kv_heads", &TrainRequest::kv_heads),
      field_unless_default("head_dim", &TrainRequest::head_dim),
      field_unless_default("kernel", &TrainRequest::kernel), field("", &TrainRequest::dtype)};
  std::string describe() const { return describe_request(*this); }
};

// out[m, n] (+)= alpha * op(a) op(b), op(t) = t or t^T. a is f32; b is f32 or a bf16/f16 weight
// (dX = dY W reads the frozen weight [n_out, k_in] untransposed). out f32; rows may be strided.
struct GemmArgs {
  Tensor a, b, out;
  bool trans_a = false, trans_b = false;
  float alpha = 1.f;
  bool accumulate = false;
};
TrainRequest describe(const GemmArgs& a);

// The backward of NormFacet::rms_norm for a frozen weight. `x` is the normalised input (for a
// fused residual: the residual after the add); kGated also yields dgate.
struct NormBackwardArgs {
  NormKind kind = NormKind::kOnePlus;
  Tensor x, weight, gate;  // as in NormArgs
  Tensor dout;             // [rows, width]
  Tensor dx;               // [rows, width]
  Tensor dgate;            // [rows, width], kGated only
  bool accumulate = false; // dx += (not dgate)
  float eps = 1e-6f;
};
TrainRequest describe(const NormBackwardArgs& a);

// out = silu(a) * b: da, db from dout.
struct SiluMulBackwardArgs {
  Tensor a, b, dout, da, db;  // [rows, width]
};
TrainRequest describe(const SiluMulBackwardArgs& a);

// The rotation of AttentionFacet::rope undone (the transpose of a rotation is its inverse):
// dq, dk rotated in place by -angle.
struct RopeBackwardArgs {
  Tensor dq, dk, positions;
  int64_t rotary_dim = 0;
  float theta = 10000.f;
};
TrainRequest describe(const RopeBackwardArgs& a);

// Causal GQA attention over dense per-token K/V (training keeps them; no paged cache), rows
// from the layout's cu_seqlens, each starting at position 0; out = softmax(q k^T * scale) v,
// then out *= sigmoid(gate) where a gate is given. Recomputes the probabilities.
struct AttentionBackwardArgs {
  Tensor q;      // [tokens, q_heads, head_dim] after norm and RoPE (strided)
  Tensor k, v;   // [tokens, kv_heads, head_dim] (strided)
  Tensor gate;   // optional [tokens, q_heads, head_dim] (strided)
  Tensor dout;   // [tokens, q_heads, head_dim]: gradient of the gated output
  Tensor dq, dk, dv, dgate;  // shaped as q, k, v, gate
  const BatchLayout* layout = nullptr;
  float scale = 1.f;
  // kBF16: the products may run at reduced precision (CUDA: bf16 or TF32 tensor cores, f32
  // accumulation), as the forward's AttentionArgs::compute allows bf16 ones; a backend may still
  // compute in f32. kF32: every product in f32.
  DType compute = DType::kF32;
  // Optional, both or neither: the forward's gated output (AttentionArgs::out) and what the
  // backend left in AttentionArgs::kept for the same inputs and layout; a backend may then
  // recompute the probabilities from them instead of from the scores (CUDA's flash backward).
  Tensor out = {};  // [tokens, q_heads, head_dim] (strided)
  Tensor kept = {};
};
TrainRequest describe(const AttentionBackwardArgs& a);

// Depthwise causal conv1d + silu from a zero state: dx from the gradient of the silu output.
struct ConvBackwardArgs {
  Tensor x;       // [tokens, channels]: the conv's input
  Tensor weight;  // [channels, kernel] f32
  Tensor dout;    // [tokens, channels]
  Tensor dx;      // [tokens, channels]
  const BatchLayout* layout = nullptr;
};
TrainRequest describe(const ConvBackwardArgs& a);

// The gated delta rule of GdnFacet::delta_rule (l2 norm of q and k inside, g = -exp(a_log) *
// softplus(a + dt_bias), beta = sigmoid(b)), from a zero state per row: gradients of its raw
// inputs. The chunked form keeps the state at chunk boundaries and recomputes inside a chunk.
struct GdnBackwardArgs {
  int chunk = 64;
  Tensor q, k;             // [tokens, k_heads, dk] (strided), raw
  Tensor v;                // [tokens, v_heads, dv] (strided)
  Tensor a, b;             // [tokens, v_heads] (strided)
  Tensor a_log, dt_bias;   // [v_heads] f32
  Tensor dout;             // [tokens, v_heads, dv]
  Tensor dq, dk, dv, da, db;  // shaped as q, k, v, a, b
  const BatchLayout* layout = nullptr;
  Tensor kept;  // optional: what GdnFacet::delta_rule left in GdnArgs::kept for these inputs and layout
  // kBF16 lets the products round to a shorter mantissa (f32 accumulation), as
  // AttentionBackwardArgs::compute does: a bf16 checkpoint's; kF32 keeps f32-level products.
  DType compute = DType::kF32;
};
TrainRequest describe(const GdnBackwardArgs& a);

// logp[t] = log softmax(hidden[t] W^T)[targets[t]] over the whole vocabulary, never holding
// [tokens, vocab] logits at once (online log-sum-exp over vocabulary chunks); lse[t] kept for
// the backward. Targets < 0 give logp 0.
struct TokenLogprobArgs {
  Tensor hidden;   // [tokens, width] f32: the final-normed hidden states
  Tensor lm_head;  // [vocab, width] weight
  Tensor targets;  // [tokens] i32
  Tensor logp;     // [tokens] f32
  Tensor lse;      // [tokens] f32
};
TrainRequest describe(const TokenLogprobArgs& a);

// dhidden (+)= sum_t coef[t] * (onehot(targets[t]) - softmax(hidden[t] W^T)) W, recomputing the
// logits chunk by chunk: the gradient of sum_t c_t logp_t, with coef = dLoss/dlogp.
struct TokenLogprobBackwardArgs {
  Tensor hidden, lm_head, targets, lse;  // as in TokenLogprobArgs
  Tensor coef;     // [tokens] f32
  Tensor dhidden;  // [tokens, width] f32
  bool accumulate = false;
};
TrainRequest describe(const TokenLogprobBackwardArgs& a);

class TrainingFacet {
 public:
  virtual ~TrainingFacet() = default;
  virtual Support supports(const TrainRequest& r) const = 0;
  virtual Status gemm(const GemmArgs& a) = 0;
  virtual Status norm_backward(const NormBackwardArgs& a) = 0;
  virtual Status silu_mul_backward(const SiluMulBackwardArgs& a) = 0;
  virtual Status rope_backward(const RopeBackwardArgs& a) = 0;
  virtual Status attention_backward(const AttentionBackwardArgs& a) = 0;
  virtual Status conv_backward(const ConvBackwardArgs& a) = 0;
  virtual Status gdn_backward(const GdnBackwardArgs& a) = 0;
  virtual Status token_logprobs(const TokenLogprobArgs& a) = 0;
  virtual Status token_logprobs_backward(const TokenLogprobBackwardArgs& a) = 0;
};
// What every TrainingFacet implementation overrides (as KILN_NORM_OVERRIDES, backend/facets.h).
#define KILN_TRAINING_OVERRIDES                                               \
  Support supports(const TrainRequest& r) const override;                     \
  Status gemm(const GemmArgs& a) override;                                    \
  Status norm_backward(const NormBackwardArgs& a) override;                   \
  Status silu_mul_backward(const SiluMulBackwardArgs& a) override;            \
  Status rope_backward(const RopeBackwardArgs& a) override;                   \
  Status attention_backward(const AttentionBackwardArgs& a) override;         \
  Status conv_backward(const ConvBackwardArgs& a) override;                   \
  Status gdn_backward(const GdnBackwardArgs& a) override;                     \
  Status token_logprobs(const TokenLogprobArgs& a) override;                  \
  Status token_logprobs_backward(const TokenLogprobBackwardArgs& a) override;

// ---- optimizer steps on trainable f32 parameters (docs/training.md, "Optimizers") ----
enum class OptimizerKind : uint8_t { kMuon, kAdamW, kSgd };
std::string_view optimizer_kind_name(OptimizerKind k);  // "muon", "adam_w", "sgd"

struct OptimizerRequest {
  OptimizerKind kind = OptimizerKind::kMuon;
  int64_t rows = 0, cols = 0;  // the parameter's shape (a vector: rows = 1)
  static constexpr auto kFields = std::tuple{
      "optimizer", field("", &OptimizerRequest::kind, optimizer_kind_name),
      field("", [](const auto& r) { return Shape{r.rows, r.cols}.to_string(); })};
  std::string describe() const { return describe_request(*this); }
};

struct OptimizerHyper {
  float lr = 1e-3f, weight_decay = 0.f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // AdamW
  float momentum = 0.95f;                           // Muon
  bool nesterov = true;                             // Muon
  int ns_steps = 5;                                 // Muon's Newton-Schulz iterations
  // Multiplies the gradient before anything else reads it (clipping by the global norm sets it
  // to max_norm / norm); 1 leaves every step bit for bit what it was without it.
  float grad_scale = 1.f;
};

// One step of one parameter. `m`, `v`: the optimizer's state, shaped as `param`, zero at step 1
// (Muon uses m; AdamW m and v; SGD neither). `step` counts from 1 (AdamW's bias correction).
struct OptimizerStepArgs {
  OptimizerKind kind = OptimizerKind::kMuon;
  Tensor param, grad, m, v;  // f32, contiguous, [rows, cols]
  OptimizerHyper hyper;
  int64_t step = 1;
};
OptimizerRequest describe(const OptimizerStepArgs& a);

class OptimizerFacet {
 public:
  virtual ~OptimizerFacet() = default;
  virtual Support supports(const OptimizerRequest& r) const = 0;
  virtual Status step(const OptimizerStepArgs& a) = 0;
  // One step of each of several parameters, with what step() would do to each; a backend may run
  // parameters of one shape together (CUDA: Muon matrices, one launch per kernel for a group).
  virtual Status step_many(std::span<const OptimizerStepArgs> args) {
    for (const OptimizerStepArgs& a : args) KILN_RETURN_IF_ERROR(step(a));
    return {};
  }
  // The sum of the squares of every element of `tensors` (f32, contiguous, on the backend's
  // device), accumulated in double in an order fixed by the tensors' sizes alone, reduced where
  // the tensors live: the squared global gradient norm, without copying a gradient to the host.
  // Only the sum comes back (the call waits for it).
  virtual Result<double> sum_squares(std::span<const Tensor> tensors) = 0;
};
#define KILN_OPTIMIZER_OVERRIDES                              \
  Support supports(const OptimizerRequest& r) const override; \
  Status step(const OptimizerStepArgs& a) override;           \
  Result<double> sum_squares(std::span<const Tensor> tensors) override;

}  // namespace kiln
