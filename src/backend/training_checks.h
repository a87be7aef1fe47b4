// The opening of every training method, on any backend: the request, the facet's own predicate
// (a decline is kUnsupported naming it), then the structural checks of the arguments
// (training_checks.cc): tensors present, on the backend's device, f32 where they are
// activations, of consistent shapes.
#pragma once

#include <string>

#include "backend/arg_checks.h"
#include "backend/training_facets.h"

namespace kiln {

Status validate_train(const GemmArgs& a, DeviceKind device, const std::string& req);
Status validate_train(const NormBackwardArgs& a, DeviceKind device, const std::string& req);
Status validate_train(const SiluMulBackwardArgs& a, DeviceKind device, const std::string& req);
Status validate_train(const RopeBackwardArgs& a, DeviceKind device, const std::string& req);
Status validate_train(const AttentionBackwardArgs& a, DeviceKind device, const std::string& req);
Status validate_train(const ConvBackwardArgs& a, DeviceKind device, const std::string& req);
Status validate_train(const GdnBackwardArgs& a, DeviceKind device, const std::string& req);
Status validate_train(const TokenLogprobArgs& a, DeviceKind device, const std::string& req);
Status validate_train(const TokenLogprobBackwardArgs& a, DeviceKind device, const std::string& req);

// The request's text (for the op's own error messages), or the decline / the bad argument.
template <typename Args>
Result<std::string> open_train_call(const TrainingFacet& facet, const Args& args, const char* backend,
                                    DeviceKind device) {
  const TrainRequest request = describe(args);
  std::string text = request.describe();
  const Support s = facet.supports(request);
  if (!s.runs_natively()) return declined(backend, text, s.constraint);
  KILN_RETURN_IF_ERROR(validate_train(args, device, text));
  return text;
}

}  // namespace kiln
