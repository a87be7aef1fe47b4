#include "backend/optimizer_checks.h"

#include <cmath>

namespace kiln {

namespace {

const char* device_name(DeviceKind d) {
  switch (d) {
    case DeviceKind::kHost: return "host";
    case DeviceKind::kCuda: return "cuda";
    case DeviceKind::kVulkan: return "vulkan";
  }
  return "?";
}

Status check_state(const Tensor& t, const char* name, const Tensor& param, DeviceKind dev, const std::string& req) {
  if (!t.defined()) return invalid_argument(req + ": tensor '" + name + "' is missing");
  if (t.device().kind != dev)
    return invalid_argument(req + ": tensor '" + name + "' is on " + t.device().to_string() + ", not " +
                            device_name(dev));
  if (t.dtype() != DType::kF32) return invalid_argument(req + ": tensor '" + name + "' is " + t.describe() + ", expected f32");
  if (!t.is_contiguous()) return invalid_argument(req + ": tensor '" + name + "' must be contiguous");
  if (!(t.shape() == param.shape()))
    return invalid_argument(req + ": tensor '" + name + "' is " + t.describe() + ", expected the parameter's shape " +
                            param.shape().to_string());
  return {};
}

}  // namespace

Status validate_optimizer_step(const OptimizerStepArgs& a, DeviceKind dev, const std::string& req) {
  if (!a.param.defined()) return invalid_argument(req + ": tensor 'param' is missing");
  if (a.param.rank() < 1 || a.param.rank() > 2)
    return invalid_argument(req + ": tensor 'param' is " + a.param.describe() + "; a parameter is a vector or a matrix");
  KILN_RETURN_IF_ERROR(check_state(a.param, "param", a.param, dev, req));
  KILN_RETURN_IF_ERROR(check_state(a.grad, "grad", a.param, dev, req));
  if (a.kind != OptimizerKind::kSgd) KILN_RETURN_IF_ERROR(check_state(a.m, "m", a.param, dev, req));
  if (a.kind == OptimizerKind::kAdamW) KILN_RETURN_IF_ERROR(check_state(a.v, "v", a.param, dev, req));
  const OptimizerHyper& h = a.hyper;
  auto bad = [&](const char* field, double v, const char* want) {
    return invalid_argument(req + ": hyperparameter " + field + " = " + std::to_string(v) + " (" + want + ")");
  };
  if (!(std::isfinite(h.lr) && h.lr >= 0)) return bad("lr", h.lr, "must be finite and >= 0");
  if (!(std::isfinite(h.weight_decay) && h.weight_decay >= 0)) return bad("weight_decay", h.weight_decay, "must be finite and >= 0");
  if (!(std::isfinite(h.grad_scale) && h.grad_scale > 0)) return bad("grad_scale", h.grad_scale, "must be finite and > 0");
  if (a.kind == OptimizerKind::kAdamW) {
    if (!(h.beta1 >= 0 && h.beta1 < 1)) return bad("beta1", h.beta1, "must be in [0, 1)");
    if (!(h.beta2 >= 0 && h.beta2 < 1)) return bad("beta2", h.beta2, "must be in [0, 1)");
    if (!(std::isfinite(h.eps) && h.eps > 0)) return bad("eps", h.eps, "must be finite and > 0");
    if (a.step < 1) return bad("step", static_cast<double>(a.step), "counts from 1");
  }
  if (a.kind == OptimizerKind::kMuon) {
    if (!(h.momentum >= 0 && h.momentum < 1)) return bad("momentum", h.momentum, "must be in [0, 1)");
    if (h.ns_steps < 0 || h.ns_steps > 100) return bad("ns_steps", h.ns_steps, "must be in [0, 100]");
  }
  return {};
}

Status validate_sum_squares(std::span<const Tensor> tensors, DeviceKind dev) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string name = "sum_squares: tensor " + std::to_string(i);
    if (!t.defined()) return invalid_argument(name + " is missing");
    if (t.device().kind != dev) return invalid_argument(name + " is on " + t.device().to_string() + ", not " + device_name(dev));
    if (t.dtype() != DType::kF32) return invalid_argument(name + " is " + t.describe() + ", expected f32");
    if (!t.is_contiguous()) return invalid_argument(name + " (" + t.describe() + ") must be contiguous");
  }
  return {};
}

}  // namespace kiln
