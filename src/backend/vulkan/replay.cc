// Replay: a body's dispatches recorded once into a command buffer of their own and submitted
// again for each step, as CUDA graphs are launched.
#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

namespace {

class RecordedCommands final : public Recording {
 public:
  RecordedCommands(std::shared_ptr<Context> ctx, VkCommandBuffer cb) : ctx_(std::move(ctx)), cb_(cb) {}
  ~RecordedCommands() override { ctx_->free_recorded(cb_, last_); }
  VkCommandBuffer commands() const { return cb_; }
  void submitted(uint64_t value) const { last_ = value; }

 private:
  std::shared_ptr<Context> ctx_;
  VkCommandBuffer cb_;
  mutable uint64_t last_ = 0;  // the timeline value of its latest submission
};

}  // namespace

Result<std::unique_ptr<Recording>> Replay::record(const std::function<Status()>& body) {
  KILN_RETURN_IF_ERROR(ctx_->begin_recording());
  const Status st = body();
  KILN_ASSIGN_OR_RETURN(VkCommandBuffer cb, ctx_->end_recording(st.ok()));
  if (!st.ok()) return st.with_context("vulkan replay: recording");
  return std::unique_ptr<Recording>(std::make_unique<RecordedCommands>(ctx_, cb));
}

Status Replay::replay(const Recording& r) {
  const auto* rec = dynamic_cast<const RecordedCommands*>(&r);
  if (rec == nullptr) return invalid_argument("vulkan replay: a recording made by another backend");
  KILN_ASSIGN_OR_RETURN(uint64_t value, ctx_->submit_recorded(rec->commands()));
  rec->submitted(value);
  return {};
}

}  // namespace kiln::vulkan
