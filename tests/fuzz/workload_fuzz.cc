// A qualification workload file: the strict JSON reader, the structural parse and the semantic
// rules, as `kiln qualify validate` runs them on a file's text; every problem found is rendered.
#include "fuzz_target.h"
#include "qualify/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::qualify::WorkloadCheck check = kiln::qualify::check_workload_text(kiln::fuzz::as_text(data, size));
  (void)check.issues.to_status("workload.json");
  return 0;
}
