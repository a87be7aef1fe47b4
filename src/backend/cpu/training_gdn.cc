// Placeholder until the GDN mixer's backward (causal conv1d + silu, gated delta rule) lands.
#include "backend/cpu/cpu_facets.h"

namespace kiln::cpu {

Status Training::conv_backward(const ConvBackwardArgs& a) {
  return unsupported("declined " + describe(a).describe() + ": not written yet on the CPU backend");
}
Status Training::gdn_backward(const GdnBackwardArgs& a) {
  return unsupported("declined " + describe(a).describe() + ": not written yet on the CPU backend");
}

}  // namespace kiln::cpu
