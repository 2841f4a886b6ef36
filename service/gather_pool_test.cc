#include "service/gather_pool.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

TEST(GatherPool, RunsEveryPartOnceAndReturnsAfterAll) {
  for (int helpers : {0, 1, 3}) {
    GatherPool pool(helpers);
    EXPECT_EQ(pool.helpers(), helpers);
    for (int parts : {0, 1, 2, 4, 9}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(parts));
      pool.Run(parts, [&](int p) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        runs[static_cast<size_t>(p)].fetch_add(1);
      });
      for (int p = 0; p < parts; ++p) {
        EXPECT_EQ(runs[static_cast<size_t>(p)].load(), 1) << helpers << " " << parts << " " << p;
      }
    }
  }
}

TEST(GatherPool, PartZeroRunsOnTheCallerAndHelpersTakeOthers) {
  GatherPool pool(2);
  // A helper takes a part only when it is idle; right after construction
  // (or on a loaded machine) it may not be waiting yet, so try a few times.
  size_t most_threads = 0;
  for (int attempt = 0; attempt < 100 && most_threads < 3; ++attempt) {
    absl::Mutex mu;
    std::set<std::thread::id> threads;
    std::thread::id part0;
    pool.Run(3, [&](int p) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      absl::MutexLock l(&mu);
      threads.insert(std::this_thread::get_id());
      if (p == 0) part0 = std::this_thread::get_id();
    });
    EXPECT_EQ(part0, std::this_thread::get_id());
    most_threads = std::max(most_threads, threads.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(most_threads, 3u) << "idle helpers take the other parts";
}

TEST(GatherPool, ConcurrentRunsNeverLoseAPart) {
  GatherPool pool(1);
  std::atomic<int> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        std::atomic<int> mine{0};
        pool.Run(3, [&](int) { mine.fetch_add(1); });
        ASSERT_EQ(mine.load(), 3);
        total.fetch_add(mine.load());
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * 3);
}

}  // namespace
}  // namespace engram
