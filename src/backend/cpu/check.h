// Argument checks shared by the CPU kernels: each failure names the request and the tensor.
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln::cpu {

// A host tensor of `rank` dims and `dtype` whose innermost dimension is unit-stride.
inline Status check_tensor(const Tensor& t, const char* name, int rank, DType dtype, const std::string& request) {
  if (!t.defined()) return invalid_argument(request + ": tensor '" + name + "' is missing");
  if (t.device().kind != DeviceKind::kHost)
    return invalid_argument(request + ": tensor '" + name + "' is on " + t.device().to_string() + ", not host");
  if (t.rank() != rank)
    return invalid_argument(request + ": tensor '" + name + "' has rank " + std::to_string(t.rank()) +
                            ", expected " + std::to_string(rank) + " (" + t.describe() + ")");
  if (t.dtype() != dtype)
    return invalid_argument(request + ": tensor '" + name + "' is " + t.describe() + ", expected dtype " +
                            std::string(dtype_name(dtype)));
  if (t.stride(rank - 1) != 1)
    return invalid_argument(request + ": tensor '" + name + "' must be unit-stride in its last dimension");
  return {};
}

inline Status check_dim(const Tensor& t, const char* name, int dim, int64_t expected, const std::string& request) {
  if (t.dim(dim) != expected)
    return invalid_argument(request + ": tensor '" + name + "' is " + t.describe() + ", dimension " +
                            std::to_string(dim) + " should be " + std::to_string(expected));
  return {};
}

inline Status declined(const std::string& request, const std::string& why) {
  return unsupported("cpu declined " + request + ": " + why);
}

}  // namespace kiln::cpu
