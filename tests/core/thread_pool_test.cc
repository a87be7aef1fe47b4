#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/thread_pool.h"

namespace kiln {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 3, 4, 5, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> max_worker{0};
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e, int w) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
      int m = max_worker.load();
      while (w > m && !max_worker.compare_exchange_weak(m, w)) {}
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    EXPECT_LT(max_worker.load(), pool.size());
  }
}

TEST(ThreadPool, GrainLimitsParts) {
  ThreadPool pool(4);
  std::atomic<int> parts{0};
  pool.parallel_for(10, 10, [&](int64_t, int64_t, int) { parts++; });
  EXPECT_EQ(parts.load(), 1);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(6, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(10, 1, [&](int64_t b2, int64_t e2, int) { sum += (e2 - b2) * i; });
  });
  EXPECT_EQ(sum.load(), 10 * (0 + 1 + 2 + 3 + 4 + 5));
}

}  // namespace
}  // namespace kiln
