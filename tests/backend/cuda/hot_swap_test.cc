// Hot-swap under load on the CUDA backend: the server's model, its 16 streaming clients and the
// SFT job that publishes and auto-loads the new revision all on the device (the case:
// tests/server/hot_swap_case.h).
#include "backend/cuda/cuda_test_util.h"
#include "server/hot_swap_case.h"

namespace kiln {
namespace {

TEST(CudaHotSwap, SixteenStreamingClientsSeeOneRevisionPerResponseAcrossAnAutoLoad) {
  KILN_CUDA_OR_SKIP(be);
  be.reset();  // the server makes its own
  testing::hot_swap::expect_one_revision_per_response("cuda");
}

}  // namespace
}  // namespace kiln
