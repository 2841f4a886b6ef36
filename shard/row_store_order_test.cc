// RowStore's reader queue (shard/row_store.h, ReadRowsAsync): requests are
// read earliest need-by first, in arrival order among equal need-bys, and a
// large request steps aside between two MultiGets for one that needs its
// rows sooner. A real store on disk with one reader thread, held busy
// inside a request's completion while the others queue.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/format/table.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"
#include "shard/import/importer.h"
#include "shard/row_store.h"

namespace engram {
namespace {

class RowStoreOrderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(testing::MakeSmallTable(dir_->Sub("table")).ok());
    ImportOptions o;
    o.table_dir = dir_->Sub("table");
    o.n_shards = 1;
    o.shard_index = 0;
    o.out_dir = dir_->Sub("shard");
    absl::StatusOr<ImportResult> r = ImportShard(o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    absl::StatusOr<std::unique_ptr<TableReader>> t = TableReader::Open(dir_->Sub("table"));
    ASSERT_TRUE(t.ok()) << t.status();
    table_ = t->release();
  }
  static void TearDownTestSuite() {
    delete table_;
    delete dir_;
  }

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RowStore>> s =
        RowStore::Open(dir_->Sub("shard"), {.reader_threads = 1});
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }

  // One read of `n` rows of layer 0 (cycling over the layer), its
  // destination and the table's bytes for them.
  struct Read {
    std::vector<RowRef> refs;
    std::vector<uint8_t> got, want;
  };
  static std::unique_ptr<Read> MakeRead(size_t n, uint64_t first) {
    auto read = std::make_unique<Read>();
    const LayerInfo& layer = table_->manifest().layers[0];
    const size_t rb = static_cast<size_t>(layer.row_bytes);
    read->got.assign(n * rb, 0);
    read->want.assign(n * rb, 0);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t row = (first + i * 7) % layer.rows;
      read->refs.push_back({0, row, read->got.data() + i * rb});
      EXPECT_TRUE(table_->ReadRow(0, row, read->want.data() + i * rb).ok());
    }
    return read;
  }

  double Stat(const std::string& name) const {
    for (const auto& [n, v] : store_->Stats()) {
      if (n == name) return v;
    }
    return -1;
  }

  static testing::TempDir* dir_;
  static TableReader* table_;
  std::unique_ptr<RowStore> store_;
};

testing::TempDir* RowStoreOrderTest::dir_ = nullptr;
TableReader* RowStoreOrderTest::table_ = nullptr;

// Completions in the order the reader finished them.
class Order {
 public:
  std::function<void(absl::Status)> Done(int id) {
    return [this, id](absl::Status s) {
      absl::MutexLock lock(&mu_);
      EXPECT_TRUE(s.ok()) << "request " << id << ": " << s;
      order_.push_back(id);
    };
  }
  void WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    wanted_ = n;
    mu_.Await(absl::Condition(this, &Order::Enough));
  }
  std::vector<int> order() {
    absl::MutexLock lock(&mu_);
    return order_;
  }

 private:
  bool Enough() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return order_.size() >= wanted_; }

  absl::Mutex mu_;
  std::vector<int> order_ ABSL_GUARDED_BY(mu_);
  size_t wanted_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(RowStoreOrderTest, ReadsTheEarliestNeedByFirstAndTiesInArrivalOrder) {
  // The one reader is held inside the first request's completion while the
  // others queue, so the queue alone decides their order.
  absl::Notification inside, release;
  std::unique_ptr<Read> blocker = MakeRead(3, 0);
  store_->ReadRowsAsync(
      blocker->refs,
      [&](absl::Status s) {
        EXPECT_TRUE(s.ok()) << s;
        inside.Notify();
        release.WaitForNotification();
      },
      absl::InfiniteFuture(), /*need_by=*/absl::InfinitePast());
  inside.WaitForNotification();

  // Need-bys out of order, two ties, and one without a need-by; each
  // request several MultiGets (chunks) long.
  const absl::Time base = absl::Now() + absl::Hours(1);
  const std::vector<absl::Time> need_by = {base + absl::Seconds(5), base + absl::Seconds(1),
                                           absl::InfiniteFuture(),  base + absl::Seconds(3),
                                           base + absl::Seconds(1), base + absl::Seconds(2),
                                           base + absl::Seconds(3)};
  const std::vector<int> want = {1, 4, 5, 3, 6, 0, 2};
  Order order;
  std::vector<std::unique_ptr<Read>> reads;
  for (size_t i = 0; i < need_by.size(); ++i) {
    reads.push_back(MakeRead(40 + 3 * i, 11 * i + 1));
    store_->ReadRowsAsync(reads.back()->refs, order.Done(static_cast<int>(i)),
                          absl::InfiniteFuture(), need_by[i]);
  }
  release.Notify();
  order.WaitFor(need_by.size());
  EXPECT_EQ(order.order(), want);
  EXPECT_EQ(blocker->got, blocker->want);
  for (const auto& r : reads) EXPECT_EQ(r->got, r->want);
  // Only the blocker's rows were read after their need-by.
  EXPECT_EQ(Stat("late_rows"), static_cast<double>(blocker->refs.size()));
}

TEST_F(RowStoreOrderTest, AnUrgentRequestOvertakesALargeOneBetweenMultiGets) {
  // 60,000 rows on one reader: thousands of MultiGets.
  std::unique_ptr<Read> large = MakeRead(60000, 3);
  std::unique_ptr<Read> urgent = MakeRead(100, 5);
  Order order;
  const absl::Time now = absl::Now();
  store_->ReadRowsAsync(large->refs, order.Done(0), absl::InfiniteFuture(), now + absl::Hours(2));
  // Wait until the reader has started on it.
  const double keys_before = Stat("rocksdb_multiget_keys");
  while (Stat("rocksdb_multiget_keys") == keys_before) absl::SleepFor(absl::Microseconds(50));
  const bool large_done_first = !order.order().empty();
  store_->ReadRowsAsync(urgent->refs, order.Done(1), absl::InfiniteFuture(), now + absl::Hours(1));
  order.WaitFor(2);
  if (large_done_first) GTEST_SKIP() << "the large request finished before the urgent one came";
  EXPECT_EQ(order.order(), (std::vector<int>{1, 0}));
  EXPECT_EQ(large->got, large->want);
  EXPECT_EQ(urgent->got, urgent->want);
  EXPECT_EQ(Stat("late_rows"), 0);
}

// Whatever its need-by, a request that waited in the queue past its
// deadline reads nothing.
TEST_F(RowStoreOrderTest, DeadlinesStillEndRequestsThatWaitedPastThem) {
  absl::Notification inside, release;
  std::unique_ptr<Read> blocker = MakeRead(3, 0);
  store_->ReadRowsAsync(
      blocker->refs,
      [&](absl::Status) {
        inside.Notify();
        release.WaitForNotification();
      },
      absl::InfiniteFuture(), absl::InfinitePast());
  inside.WaitForNotification();
  std::unique_ptr<Read> expired = MakeRead(20, 1);
  absl::Status expired_status;
  absl::Notification expired_done;
  const absl::Time deadline = absl::Now() + absl::Milliseconds(1);
  store_->ReadRowsAsync(
      expired->refs,
      [&](absl::Status s) {
        expired_status = s;
        expired_done.Notify();
      },
      deadline, /*need_by=*/absl::Now());
  while (absl::Now() <= deadline) absl::SleepFor(absl::Milliseconds(1));
  release.Notify();
  expired_done.WaitForNotification();
  EXPECT_EQ(expired_status.code(), absl::StatusCode::kDeadlineExceeded) << expired_status;
  EXPECT_EQ(Stat("expired_rows"), static_cast<double>(expired->refs.size()));
}

}  // namespace
}  // namespace engram
