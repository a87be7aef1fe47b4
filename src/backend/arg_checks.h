// Structural checks of facet arguments, shared by every backend: each failure names the request
// and the tensor. (What a backend can run is its predicate's business; what the arguments must
// look like is the same everywhere.)
#pragma once

#include <string>

#include "backend/facets.h"

namespace kiln {

// A tensor on `device` of `rank` dims and `dtype`, unit-stride in its last dimension.
Status check_tensor(const Tensor& t, const char* name, int rank, DType dtype, DeviceKind device,
                    const std::string& request);
Status check_dim(const Tensor& t, const char* name, int dim, int64_t expected, const std::string& request);
// A storage transfer's pair: `host` on the host, `dev` on `device`, both contiguous, the same
// dtype and size; the error names `what` and both tensors.
Status check_transfer(const Tensor& host, const Tensor& dev, DeviceKind device, const char* what);
// A device-to-device copy's pair: both on `device`, contiguous, the same dtype and size.
Status check_device_copy(const Tensor& src, const Tensor& dst, DeviceKind device);
// The error a method returns for a request its own predicate declines.
Status declined(std::string_view backend, const std::string& request, const std::string& why);

// Every tensor of the call present, of the right rank, dtype and device, with consistent
// dimensions; activations f32. Index contents (slots, token ids) are the backend's to check.
Status validate(const MatmulArgs& a, DeviceKind device, const std::string& request);
Status validate(const NormArgs& a, DeviceKind device, const std::string& request);
Status validate(const RopeArgs& a, DeviceKind device, const std::string& request);
Status validate(const KvWriteArgs& a, DeviceKind device, const std::string& request);
Status validate(const AttentionArgs& a, DeviceKind device, const std::string& request);
Status validate(const ConvArgs& a, DeviceKind device, const std::string& request);
Status validate(const GdnArgs& a, DeviceKind device, const std::string& request);
Status validate(const EmbedArgs& a, DeviceKind device, const std::string& request);
Status validate(const BinaryArgs& a, DeviceKind device, const std::string& request);
Status validate(const ArgmaxArgs& a, DeviceKind device, const std::string& request);
// Logits on `device`, ids and logprobs on the host, one SampleRow per logits row, each row's
// parameters in range (temperature > 0).
Status validate(const SampleArgs& a, DeviceKind device, const std::string& request);

// The opening of every facet method: the typed request derived from the call, the backend's own
// predicate on it (a decline is kUnsupported naming the request), then the structural checks.
// Returns the request's description, the context of any later error.
template <typename Facet, typename Args>
Result<std::string> check_call(const Facet& facet, const Args& args, std::string_view backend, DeviceKind device) {
  const auto request = describe(args);
  std::string text = request.describe();
  const Support s = facet.supports(request);
  if (!s.runs_natively()) return declined(backend, text, s.constraint);
  KILN_RETURN_IF_ERROR(validate(args, device, text));
  return text;
}

// check_call for the device backends' hot paths: the same checks, with the request's text
// formatted only for an error, which keeps string building out of every decode step.
template <typename Facet, typename Args>
Status check_native_call(const Facet& facet, const Args& args, std::string_view backend, DeviceKind device) {
  const auto request = describe(args);
  const Support s = facet.supports(request);
  if (!s.runs_natively()) return declined(backend, request.describe(), s.constraint);
  static const std::string kNoText;
  if (validate(args, device, kNoText).ok()) return {};
  return validate(args, device, request.describe());
}

}  // namespace kiln
