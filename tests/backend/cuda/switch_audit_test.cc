// The switch audit on CUDA (switch_audit.h): every KILN_CUDA_* setting of the table, each set
// alone (the kill switches, the knobs, each emulated target, a memory limit, profiling), leaves
// every natively run request native and serving free of host fallbacks.
#include "backend/cuda/cuda_test_util.h"
#include "backend/switch_audit.h"

namespace kiln {
namespace {

TEST(CudaSwitches, NoneTurnsANativeOpIntoAHostFallback) {
  KILN_CUDA_OR_SKIP(be);
  be.reset();  // each run opens the device itself
  int settings = 0;
  for (const NativeSwitch& s : native_switches())
    if (s.backend == "cuda") settings += static_cast<int>(switch_audit_values(s).size());
  EXPECT_GE(settings, 20);
  EXPECT_EQ(testing::audit_native_switches("cuda"), settings);
}

}  // namespace
}  // namespace kiln
