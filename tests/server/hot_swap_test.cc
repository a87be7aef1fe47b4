// Hot-swap under load on the CPU (the case: hot_swap_case.h).
#include "hot_swap_case.h"

namespace kiln {
namespace {

TEST(HotSwap, SixteenStreamingClientsSeeOneRevisionPerResponseAcrossAnAutoLoad) {
  testing::hot_swap::expect_one_revision_per_response("cpu");
}

}  // namespace
}  // namespace kiln
