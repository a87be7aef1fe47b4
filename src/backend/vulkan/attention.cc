#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

Support Attention::supports(const RopeRequest& r) const { return Support::declined("no vulkan rope shader yet"); }
Support Attention::supports(const KvWriteRequest& r) const { return Support::declined("no vulkan kv write shader yet"); }
Support Attention::supports(const AttentionRequest& r) const { return Support::declined("no vulkan attention shader yet"); }
Status Attention::rope(const RopeArgs& a) { return check_args(*this, a).status(); }
Status Attention::write_kv(const KvWriteArgs& a) { return check_args(*this, a).status(); }
Status Attention::attend(const AttentionArgs& a) { return check_args(*this, a).status(); }

}  // namespace kiln::vulkan
