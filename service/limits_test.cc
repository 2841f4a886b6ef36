// The shard server's limits, on a real server: load past
// max_inflight_requests is shed with RESOURCE_EXHAUSTED (the rest served
// whole), a silent row stream connection is closed, and what it holds in
// RAM is exported by kind.
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/net/socket_io.h"
#include "gtest/gtest.h"
#include "proto/stream_wire.h"
#include "proto/wire.h"
#include "service/shard_server.h"
#include "service/testing/pending_lookups.h"
#include "service/testing/server_test_util.h"

namespace engram {
namespace {

class LimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new testing::TempDir("limits_test");
    absl::StatusOr<testing::SmallShardedTable> t = testing::MakeSmallShardedTable(
        root_->Sub("table"), 1, [](uint32_t) { return root_->Sub("shard"); });
    ASSERT_TRUE(t.ok()) << t.status();
    map_ = new ShardMap(std::move(t->map));
    table_ = t->table.release();
  }
  static void TearDownTestSuite() {
    delete table_;
    delete map_;
    delete root_;
  }
  static ShardServerOptions Options() {
    ShardServerOptions o;
    o.db_dir = root_->Sub("shard");
    o.listen = "127.0.0.1:0";
    o.metrics_port = 0;
    return o;
  }
  static testing::TempDir* root_;
  static ShardMap* map_;
  static TableReader* table_;
};
testing::TempDir* LimitsTest::root_ = nullptr;
ShardMap* LimitsTest::map_ = nullptr;
TableReader* LimitsTest::table_ = nullptr;

TEST_F(LimitsTest, LoadPastTheInflightLimitIsShedNotQueued) {
  ShardServerOptions o = Options();
  o.max_inflight_requests = 2;
  o.reader_threads = 1;  // every row from disk, one read at a time: calls pile up
  absl::StatusOr<std::unique_ptr<ShardServer>> server = ShardServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  std::mt19937_64 rng(3);
  const std::vector<uint64_t> ids = testing::RandomOwnedIds(*map_, 1, 0, 20000, rng);
  const std::string expected = testing::ExpectedRows(*table_, 1, ids);
  const wire::LayerRowIds layer{1, ids};
  grpc::Slice slice = wire::EncodeLookupRequest(map_->table, map_->version, {&layer, 1});
  int ok = 0, refused = 0;
  {
    testing::PendingLookups calls((*server)->port(), grpc::ByteBuffer(&slice, 1), 40);
    calls.CountOkAndRefused(expected, grpc::StatusCode::RESOURCE_EXHAUSTED, &ok, &refused);
  }
  EXPECT_GT(refused, 0) << "40 calls at once, 2 allowed in flight, none refused";
  EXPECT_GE(ok, 2);
  EXPECT_EQ(ok + refused, 40);
  absl::StatusOr<std::string> page = testing::HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(
      testing::MetricValue(
          *page, "engram_shard_requests_total{code=\"RESOURCE_EXHAUSTED\",method=\"Lookup\"}"),
      refused);
  // Once the load is gone, a call is served again.
  {
    testing::PendingLookups one((*server)->port(), grpc::ByteBuffer(&slice, 1), 1);
    one.ExpectEveryRowsEqual(expected);
  }
}

TEST_F(LimitsTest, ResidentMemoryIsExportedByKind) {
  ShardServerOptions o = Options();
  o.ram_budget_bytes = 64 << 10;  // no profile: all of it the admission cache
  absl::StatusOr<std::unique_ptr<ShardServer>> server = ShardServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::string> page = testing::HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok());
  auto kind = [&](const std::string& k) {
    return testing::MetricValue(*page, "engram_shard_resident_bytes{kind=\"" + k + "\"}");
  };
  EXPECT_EQ(testing::MetricValue(*page, "engram_shard_ram_budget_bytes"), 65536.0);
  EXPECT_EQ(kind("pinned_rows"), 0.0);
  EXPECT_EQ(kind("cached_rows"), 0.0);  // nothing read yet
  EXPECT_GT(kind("hot_index").value_or(0), 0.0);
  EXPECT_EQ(kind("rocksdb_index"),
            testing::MetricValue(*page, "engram_shard_rocksdb_index_memory_bytes"));
  EXPECT_GT(kind("rocksdb_index").value_or(0), 0.0);
  EXPECT_GT(kind("process_anonymous").value_or(0), 0.0);
  ASSERT_TRUE(kind("process_file_backed").has_value());
}

TEST_F(LimitsTest, SilentRowStreamConnectionIsClosed) {
  ShardServerOptions o = Options();
  o.stream_idle_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<ShardServer>> server = ShardServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<int> fd = ConnectTcp("127.0.0.1", (*server)->stream_port(), absl::Seconds(5));
  ASSERT_TRUE(fd.ok());
  uint8_t hello[stream::kHelloBytes];
  stream::EncodeHello(stream::kVersion, hello);
  iovec iov = {hello, sizeof(hello)};
  ASSERT_TRUE(WriteFull(*fd, &iov, 1));
  ASSERT_TRUE(ReadFull(*fd, hello, sizeof(hello)));
  // Half a frame header, then silence: the server closes the connection.
  uint8_t half[8] = {};
  iov = {half, sizeof(half)};
  ASSERT_TRUE(WriteFull(*fd, &iov, 1));
  const absl::Time start = absl::Now();
  uint8_t byte;
  EXPECT_FALSE(ReadFull(*fd, &byte, 1));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(5));
  ::close(*fd);
}

}  // namespace
}  // namespace engram
