// What every backend's LinearFacet::lora_delta shares: the call's description (the context of
// its errors) and its structural checks. The default implementation, through matmul, is in
// lora_delta.cc.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "backend/facets.h"

namespace kiln {

// "lora_delta tokens=64 in=2560 out=4096 segments=64": the shape of the call.
std::string describe_lora_delta(const LoraDeltaArgs& a);

// x and out f32 on `device` with the same number of rows; every segment's tokens inside them,
// its A [r, in] and B [out, r] on `device`, f32 / bf16 / f16 and contiguous, for one r >= 1;
// coef finite; u, when given, [tokens, r] f32 and contiguous, for one segment over every token.
// Each failure names the request, the segment and the tensor.
Status validate(const LoraDeltaArgs& a, DeviceKind device, const std::string& request);

// coef * I_r per (r, coef): the coefficient as one more matmul, since matmul has no scalar.
using LoraScalings = std::map<std::pair<int64_t, float>, Tensor>;

// The portable form, every product through `lin.matmul`: u = x A^T, v = u (coef I), out += v B^T
// per segment. `scalings` holds the coef * I matrices made so far (uploaded through a.storage on
// first use); a backend keeps it across calls, the default implementation per call. Validated
// arguments only.
Status lora_delta_through_matmul(LinearFacet& lin, const LoraDeltaArgs& a, LoraScalings& scalings);

}  // namespace kiln
