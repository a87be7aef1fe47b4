// The /metrics text of the engine's GDN slot counters: each counter under its own name and
// label, with the value the engine reported.
#include <gtest/gtest.h>

#include <string>

#include "server/metrics.h"

namespace kiln {
namespace {

TEST(Metrics, GdnSlotCountersAreCounters) {
  EngineStats e;
  e.total_slots = 20;
  e.free_slots = 11;
  e.cached_snapshots = 4;
  e.slot_counters = {.acquisitions = 7, .restores = 3, .snapshots = 9, .sequence_releases = 5, .cache_releases = 2,
                     .failures = 1};
  const std::string m = Metrics().render(e);
  for (const char* want :
       {"# TYPE kiln_gdn_slot_acquisitions_total counter\n", "kiln_gdn_slot_acquisitions_total{kind=\"zeroed\"} 7\n",
        "kiln_gdn_slot_acquisitions_total{kind=\"restored\"} 3\n", "kiln_gdn_slot_acquisitions_total{kind=\"snapshot\"} 9\n",
        "# TYPE kiln_gdn_slot_releases_total counter\n", "kiln_gdn_slot_releases_total{by=\"sequence\"} 5\n",
        "kiln_gdn_slot_releases_total{by=\"prefix_cache\"} 2\n", "# TYPE kiln_gdn_slot_failures_total counter\n",
        "kiln_gdn_slot_failures_total 1\n", "kiln_gdn_slots{state=\"used\"} 5\n"})
    EXPECT_NE(m.find(want), std::string::npos) << want << " missing from\n" << m;
}

}  // namespace
}  // namespace kiln
