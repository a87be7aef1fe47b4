// The optimizer steps on device parameters (kernels/optimizer.cu), as cpu/optimizer.cc defines
// them: the same predicate shape, the same validation (backend/optimizer_checks.h), and the
// host-side scalars (decay, AdamW's bias corrections, Muon's gain) computed by the same
// expressions, so the device sees the very values the CPU uses; and the gradients' sum of squares
// (kernels/sum_squares.cu), of which only the one double comes back.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/kernels/optimizer.h"
#include "backend/cuda/kernels/sum_squares.h"
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

Result<std::string> Optimizer::checked(const OptimizerStepArgs& a) const {
  const OptimizerRequest r = describe(a);
  std::string req = r.describe();
  const Support s = supports(r);
  if (!s.runs_natively()) return unsupported("cuda declined " + req + ": " + s.constraint);
  KILN_RETURN_IF_ERROR(validate_optimizer_step(a, DeviceKind::kCuda, req));
  return req;
}

MuonParams Optimizer::muon_params(const OptimizerStepArgs& a) const {
  const OptimizerHyper& h = a.hyper;
  const OptimizerRequest r = describe(a);  // a vector is [1, n]
  MuonParams p;
  p.rows = r.rows;
  p.cols = r.cols;
  p.param = a.param.data<float>();
  p.grad = a.grad.data<float>();
  p.m = a.m.data<float>();
  p.lr = h.lr;
  p.decay = 1.f - h.lr * h.weight_decay;  // decoupled: shrinks p, not the gradient
  p.momentum = h.momentum;
  p.grad_scale = h.grad_scale;
  p.nesterov = h.nesterov;
  p.ns_steps = h.ns_steps;
  // A matrix is orthogonalised and scaled by sqrt(max side); a vector takes b as it is.
  p.gain = p.rows > 1 && p.cols > 1 ? std::sqrt(static_cast<float>(std::max(p.rows, p.cols))) : 1.f;
  return p;
}

Status Optimizer::step(const OptimizerStepArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, checked(a));
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
      p.grad_scale = h.grad_scale;
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
      p.grad_scale = h.grad_scale;
      p.c1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(a.step));
      p.c2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(a.step));
      return adamw_step(p, ctx_->stream).with_context(req);
    }
    case OptimizerKind::kMuon: {
      MuonParams p = muon_params(a);
      Tensor scratch;  // back to the pool on return: stream order makes the reuse safe
      if (const size_t bytes = muon_scratch_bytes(p.rows, p.cols); bytes > 0) {
        KILN_ASSIGN_OR_RETURN(scratch, ctx_->empty({static_cast<int64_t>(bytes)}, DType::kU8));
        p.scratch = scratch.raw();
      }
      return muon_step(p, ctx_->stream).with_context(req);
    }
  }
  return internal_error(req + ": unhandled optimizer kind");
}

Status Optimizer::step_many(std::span<const OptimizerStepArgs> args) {
  // Muon matrices keyed by shape and scalars, in first-seen order; everything else one by one.
  // The parameters are independent, so the order of their steps changes nothing.
  struct Group {
    MuonParams p;
    std::vector<const OptimizerStepArgs*> members;
  };
  std::vector<Group> groups;
  for (const OptimizerStepArgs& a : args) {
    const bool matrix = a.kind == OptimizerKind::kMuon && a.param.defined() && a.param.rank() == 2 &&
                        a.param.dim(0) > 1 && a.param.dim(1) > 1;
    if (!matrix) {
      KILN_RETURN_IF_ERROR(step(a));
      continue;
    }
    KILN_RETURN_IF_ERROR(checked(a).status());
    const MuonParams p = muon_params(a);
    auto same = [&](const Group& g) {
      return g.p.rows == p.rows && g.p.cols == p.cols && g.p.lr == p.lr && g.p.decay == p.decay &&
             g.p.momentum == p.momentum && g.p.grad_scale == p.grad_scale && g.p.nesterov == p.nesterov &&
             g.p.ns_steps == p.ns_steps && g.members.size() < static_cast<size_t>(kMuonMaxGroup);
    };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end()) it = groups.insert(groups.end(), Group{p, {}});
    it->members.push_back(&a);
  }
  for (const Group& g : groups) {
    const std::string req = "muon step of " + std::to_string(g.members.size()) + " matrices [" +
                            std::to_string(g.p.rows) + ", " + std::to_string(g.p.cols) + "]";
    ProfileScope prof(ctx_->profiler.get(), [&] { return "optimizer " + req; });
    MuonGroup mg;
    mg.p = g.p;
    mg.count = static_cast<int>(g.members.size());
    for (int i = 0; i < mg.count; ++i) {
      mg.param[i] = g.members[i]->param.data<float>();
      mg.grad[i] = g.members[i]->grad.data<float>();
      mg.m[i] = g.members[i]->m.data<float>();
    }
    const int64_t bytes = static_cast<int64_t>(muon_scratch_bytes(g.p.rows, g.p.cols)) * mg.count;
    KILN_ASSIGN_OR_RETURN(Tensor scratch, ctx_->empty({bytes}, DType::kU8));  // back to the pool in stream order
    mg.scratch = scratch.raw();
    KILN_RETURN_IF_ERROR(muon_step_group(mg, ctx_->stream).with_context(req));
  }
  return {};
}

Result<double> Optimizer::sum_squares(std::span<const Tensor> tensors) {
  KILN_RETURN_IF_ERROR(validate_sum_squares(tensors, DeviceKind::kCuda));
  const std::string req = "sum_squares of " + std::to_string(tensors.size()) + " tensors";
  ProfileScope prof(ctx_->profiler.get(), [&] { return "optimizer " + req + " (synchronises)"; });
  std::vector<SumSquaresInput> inputs;
  inputs.reserve(tensors.size());
  for (const Tensor& t : tensors) inputs.push_back({t.data<float>(), t.numel()});
  // The partial sums, then the total in the last 256 bytes (aligned as the pool's blocks are).
  const size_t partial = (sum_squares_scratch_bytes(inputs.size()) + 255) & ~size_t{255};
  KILN_ASSIGN_OR_RETURN(Tensor scratch, ctx_->empty({static_cast<int64_t>(partial + 256)}, DType::kU8));
  auto* out = reinterpret_cast<double*>(static_cast<char*>(scratch.raw()) + partial);
  KILN_RETURN_IF_ERROR(kiln::cuda::sum_squares(inputs, scratch.raw(), out, ctx_->stream).with_context(req));
  double total = 0;
  KILN_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(&total, out, sizeof total, cudaMemcpyDeviceToHost, ctx_->stream), req + ": copy"));
  KILN_RETURN_IF_ERROR(ctx_->synchronize(req + ": synchronize"));
  ctx_->bytes_to_host.fetch_add(sizeof total, std::memory_order_relaxed);
  return total;
}

}  // namespace kiln::cuda
