// LookupRequest.need_within_us end to end: a real shard server on
// 127.0.0.1 whose rows all come from RocksDB, asked over gRPC and over the
// row stream. The store counts rows read after their need-by
// (engram_shard_late_rows): a need-by of 1 us after arrival has always
// passed by the time a row is read from disk, one of minutes never has, so
// the count tells that the field reached the store's reader queue. Also:
// engram_shard_rows_total's per-layer series add up to the rows asked per
// layer and to the per-tier totals.
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/net/prometheus_scrape.h"
#include "common/net/socket_io.h"
#include "engram/v1/engram_store.grpc.pb.h"
#include "gtest/gtest.h"
#include "proto/stream_wire.h"
#include "proto/wire.h"
#include "service/shard_server.h"
#include "service/store_service.h"
#include "service/testing/server_test_util.h"

namespace engram {
namespace {

constexpr uint32_t kNever = 600'000'000;  // 10 min, in us: never passed here

class NeedByTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new testing::TempDir("need_by_test");
    absl::StatusOr<testing::SmallShardedTable> t = testing::MakeSmallShardedTable(
        root_->path() + "/table", 1, [](uint32_t) { return root_->path() + "/shard"; });
    ASSERT_TRUE(t.ok()) << t.status();
    map_ = new ShardMap(std::move(t->map));
    table_ = t->table.release();
  }
  static void TearDownTestSuite() {
    delete table_;
    delete map_;
    delete root_;
  }

  void StartServer(uint64_t ram_budget) {
    ShardServerOptions o;
    o.listen = "127.0.0.1:0";
    o.db_dir = root_->path() + "/shard";
    o.reader_threads = 2;
    o.ram_budget_bytes = ram_budget;  // 0: every row from RocksDB
    o.metrics_port = 0;
    o.scrub_disk_bytes_per_second = 0;  // disk reads are the requests' alone
    auto server = ShardServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->stream_port(), 0);
  }

  std::vector<scrape::Sample> Scrape() const {
    absl::StatusOr<std::string> page = testing::HttpGet(server_->metrics_port(), "/metrics");
    EXPECT_TRUE(page.ok()) << page.status();
    return scrape::ParseSamples(page.ok() ? *page : "");
  }
  double LateRows() const { return scrape::SumSamples(Scrape(), "engram_shard_late_rows"); }

  static v1::LookupRequest Request(uint32_t layer, const std::vector<uint64_t>& ids,
                                   uint32_t need_within_us) {
    v1::LookupRequest request;
    request.set_table(testing::kSmallTableName);
    request.set_version(testing::kSmallTableVersion);
    v1::LayerRows* l = request.add_layers();
    l->set_layer(layer);
    for (uint64_t id : ids) l->add_row_ids(id);
    request.set_need_within_us(need_within_us);
    return request;
  }

  // A Lookup over gRPC (no deadline); the rows must be the table's.
  void LookupGrpc(uint32_t layer, const std::vector<uint64_t>& ids, uint32_t need_within_us) {
    auto stub = v1::EngramStore::NewStub(testing::LocalChannel(server_->port()));
    grpc::ClientContext context;
    v1::LookupResponse response;
    const grpc::Status status =
        stub->Lookup(&context, Request(layer, ids, need_within_us), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(response.rows() == testing::ExpectedRows(*table_, layer, ids));
  }

  // A Lookup over the row stream (an untimed frame); likewise.
  void LookupStream(uint32_t layer, const std::vector<uint64_t>& ids, uint32_t need_within_us) {
    absl::StatusOr<int> fd = ConnectTcp("127.0.0.1", server_->stream_port(), absl::Seconds(5));
    ASSERT_TRUE(fd.ok()) << fd.status();
    uint8_t hello[stream::kHelloBytes];
    stream::EncodeHello(stream::kVersion, hello);
    const std::string payload = Request(layer, ids, need_within_us).SerializeAsString();
    uint8_t head[stream::kHeaderBytes];
    stream::EncodeHeader({7, stream::kLookup, payload.size()}, head);
    iovec iov[] = {{hello, sizeof(hello)},
                   {head, sizeof(head)},
                   {const_cast<char*>(payload.data()), payload.size()}};
    ASSERT_TRUE(WriteFull(*fd, iov, 3));
    ASSERT_TRUE(ReadFull(*fd, hello, sizeof(hello)));
    ASSERT_TRUE(ReadFull(*fd, head, sizeof(head)));
    const stream::FrameHeader h = stream::DecodeHeader(head);
    std::string reply(h.payload_bytes, '\0');
    ASSERT_TRUE(ReadFull(*fd, reply.data(), reply.size()));
    ::close(*fd);
    ASSERT_EQ(h.id, 7u);
    ASSERT_EQ(h.word, 0u) << reply;
    v1::LookupResponse response;
    ASSERT_TRUE(response.ParseFromString(reply));
    EXPECT_TRUE(response.rows() == testing::ExpectedRows(*table_, layer, ids));
  }

  static testing::TempDir* root_;
  static ShardMap* map_;
  static TableReader* table_;
  std::unique_ptr<ShardServer> server_;
};

testing::TempDir* NeedByTest::root_ = nullptr;
ShardMap* NeedByTest::map_ = nullptr;
TableReader* NeedByTest::table_ = nullptr;

TEST_F(NeedByTest, NeedWithinReachesTheStoreOverGrpcAndTheRowStream) {
  StartServer(/*ram_budget=*/0);
  const std::vector<uint64_t> all = testing::AllOwnedIds(*map_, 1, 0);
  const std::vector<uint64_t> ids(all.begin(), all.begin() + 200);
  const double n = static_cast<double>(ids.size());
  ASSERT_EQ(LateRows(), 0);
  // Over gRPC: 1 us is late, ten minutes and none (no deadline: a second) are not.
  LookupGrpc(1, ids, 1);
  EXPECT_EQ(LateRows(), n);
  LookupGrpc(1, ids, kNever);
  LookupGrpc(1, ids, 0);
  EXPECT_EQ(LateRows(), n);
  // The same over the row stream.
  LookupStream(1, ids, 1);
  EXPECT_EQ(LateRows(), 2 * n);
  LookupStream(1, ids, kNever);
  LookupStream(1, ids, 0);
  EXPECT_EQ(LateRows(), 2 * n);
}

// The need-by a request's disk reads queue by: its need_within_us after
// arrival; without it, its deadline; without either, a second after arrival.
TEST(StoreServiceNeedBy, FromNeedWithinElseDeadlineElseOneSecond) {
  const absl::Time arrival = absl::FromUnixSeconds(100);
  const absl::Time deadline = arrival + absl::Seconds(30);
  EXPECT_EQ(StoreService::NeedBy(arrival, 500, deadline), arrival + absl::Microseconds(500));
  EXPECT_EQ(StoreService::NeedBy(arrival, 500, absl::InfiniteFuture()),
            arrival + absl::Microseconds(500));
  EXPECT_EQ(StoreService::NeedBy(arrival, 0, deadline), deadline);
  EXPECT_EQ(StoreService::NeedBy(arrival, 0, absl::InfiniteFuture()), arrival + absl::Seconds(1));
}

TEST_F(NeedByTest, PerLayerRowCountsAddUpToTheTiers) {
  StartServer(/*ram_budget=*/64 << 10);  // some rows in RAM, the rest from RocksDB
  std::mt19937_64 rng(3);
  std::map<uint32_t, double> asked;
  for (int round = 0; round < 3; ++round) {
    for (uint32_t layer = 0; layer < map_->layer_rows.size(); ++layer) {
      const size_t n = 100 + 37 * layer + 11 * static_cast<size_t>(round);
      const std::vector<uint64_t> ids = testing::RandomOwnedIds(*map_, layer, 0, n, rng);
      if (round % 2 == 0) {
        LookupGrpc(layer, ids, kNever);
      } else {
        LookupStream(layer, ids, kNever);
      }
      asked[layer] += static_cast<double>(n);
    }
  }
  const std::vector<scrape::Sample> samples = Scrape();
  const char kRows[] = "engram_shard_rows_total";
  double all = 0;
  for (const auto& [layer, n] : asked) {
    const std::string l = std::to_string(layer);
    EXPECT_EQ(scrape::SumSamples(samples, kRows, {{"layer", l}}), n) << "layer " << l;
    all += n;
  }
  double tiers = 0;
  int tiers_used = 0;
  for (const char* tier : {"pinned", "cached", "disk"}) {
    double by_layer = 0;
    for (const auto& [layer, n] : asked) {
      by_layer +=
          scrape::SumSamples(samples, kRows, {{"layer", std::to_string(layer)}, {"tier", tier}});
    }
    const double total = scrape::SumSamples(samples, kRows, {{"tier", tier}});
    EXPECT_EQ(by_layer, total) << tier;
    tiers += total;
    tiers_used += total > 0 ? 1 : 0;
  }
  EXPECT_EQ(tiers, all);
  EXPECT_GE(tiers_used, 2) << "rows from both RAM and disk";
}

}  // namespace
}  // namespace engram
