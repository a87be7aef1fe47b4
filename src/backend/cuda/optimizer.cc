// The optimizer steps on device parameters (kernels/optimizer.cu), as cpu/optimizer.cc defines
// them: the same predicate shape, the same validation (backend/optimizer_checks.h), and the
// host-side scalars (decay, AdamW's bias corrections, Muon's gain) computed by the same
// expressions, so the device sees the very values the CPU uses.
#include <algorithm>
#include <cmath>

#include "backend/cuda/kernels/optimizer.h"
#include "backend/cuda/training.h"
#include "backend/optimizer_checks.h"

namespace kiln::cuda {

Support Optimizer::supports(const OptimizerRequest& r) const {
  switch (r.kind) {
    case OptimizerKind::kMuon:
    case OptimizerKind::kAdamW:
    case OptimizerKind::kSgd: break;
    default: return Support::declined("unknown optimizer kind " + std::to_string(static_cast<int>(r.kind)));
  }
  if (r.rows < 1 || r.cols < 1)
    return Support::declined("an empty parameter [" + std::to_string(r.rows) + ", " + std::to_string(r.cols) + "]");
  if (r.kind == OptimizerKind::kMuon && std::min(r.rows, r.cols) > kMuonMaxRank)
    return Support::declined("muon's Newton-Schulz runs in the Gram space of the smaller side, min(rows, cols) = " +
                             std::to_string(std::min(r.rows, r.cols)) + " exceeds " + std::to_string(kMuonMaxRank));
  return Support::native();
}

Status Optimizer::step(const OptimizerStepArgs& a) {
  const OptimizerRequest r = describe(a);
  const std::string req = r.describe();
  const Support s = supports(r);
  if (!s.runs_natively()) return unsupported("cuda declined " + req + ": " + s.constraint);
  KILN_RETURN_IF_ERROR(validate_optimizer_step(a, DeviceKind::kCuda, req));
  ProfileScope prof(ctx_->profiler.get(), [&] { return "optimizer " + req; });
  const OptimizerHyper& h = a.hyper;
  const float decay = 1.f - h.lr * h.weight_decay;  // decoupled: shrinks p, not the gradient
  switch (a.kind) {
    case OptimizerKind::kSgd: {
      SgdParams p;
      p.n = a.param.numel();
      p.param = a.param.data<float>();
      p.grad = a.grad.data<float>();
      p.lr = h.lr;
      p.decay = decay;
      return sgd_step(p, ctx_->stream).with_context(req);
    }
    case OptimizerKind::kAdamW: {
      AdamWParams p;
      p.n = a.param.numel();
      p.param = a.param.data<float>();
      p.grad = a.grad.data<float>();
      p.m = a.m.data<float>();
      p.v = a.v.data<float>();
      p.lr = h.lr;
      p.decay = decay;
      p.beta1 = h.beta1;
      p.beta2 = h.beta2;
      p.eps = h.eps;
      p.c1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(a.step));
      p.c2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(a.step));
      return adamw_step(p, ctx_->stream).with_context(req);
    }
    case OptimizerKind::kMuon: {
      MuonParams p;
      p.rows = r.rows;
      p.cols = r.cols;
      p.param = a.param.data<float>();
      p.grad = a.grad.data<float>();
      p.m = a.m.data<float>();
      p.lr = h.lr;
      p.decay = decay;
      p.momentum = h.momentum;
      p.nesterov = h.nesterov;
      p.ns_steps = h.ns_steps;
      // A matrix is orthogonalised and scaled by sqrt(max side); a vector takes b as it is.
      p.gain = r.rows > 1 && r.cols > 1 ? std::sqrt(static_cast<float>(std::max(r.rows, r.cols))) : 1.f;
      Tensor scratch;  // back to the pool on return: stream order makes the reuse safe
      if (const size_t bytes = muon_scratch_bytes(r.rows, r.cols); bytes > 0) {
        KILN_ASSIGN_OR_RETURN(scratch, ctx_->empty({static_cast<int64_t>(bytes)}, DType::kU8));
        p.scratch = scratch.raw();
      }
      return muon_step(p, ctx_->stream).with_context(req);
    }
  }
  return internal_error(req + ": unhandled optimizer kind");
}

}  // namespace kiln::cuda
