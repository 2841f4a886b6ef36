// ShardServer end to end, in process: a real table imported into three real
// RocksDB shards, real gRPC servers on 127.0.0.1, every byte compared with
// the table file.
#include "service/shard_server.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "common/format/table.h"
#include "engram/v1/engram_store.grpc.pb.h"
#include "gtest/gtest.h"
#include "proto/wire.h"
#include "service/testing/pending_lookups.h"
#include "service/testing/server_test_util.h"
#include "shard/footprint.h"
#include "shard/import/importer.h"

namespace engram {
namespace {

using ::engram::testing::AllOwnedIds;
using ::engram::testing::ExpectedRows;
using ::engram::testing::RandomOwnedIds;

constexpr uint32_t kShards = 3;
constexpr char kLookup[] = "/engram.v1.EngramStore/Lookup";

class ShardServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new testing::TempDir("shard_server_test");
    const std::string table_dir = root_->path() + "/table";
    absl::StatusOr<testing::SmallShardedTable> t =
        testing::MakeSmallShardedTable(table_dir, kShards, ShardDir);
    ASSERT_TRUE(t.ok()) << t.status();
    map_ = new ShardMap(std::move(t->map));
    table_ = t->table.release();
  }
  static void TearDownTestSuite() {
    delete table_;
    delete map_;
    delete root_;
  }

  static std::string ShardDir(uint32_t shard) {
    return absl::StrCat(root_->path(), "/shard-", shard);
  }
  static uint64_t ShardBytes(uint32_t shard) {
    uint64_t bytes = 0;
    for (uint32_t l = 0; l < map_->layer_rows.size(); ++l) {
      bytes += map_->RowsOnShard(l, shard) * map_->row_bytes[l];
    }
    return bytes;
  }

  // The --ram-budget that holds the shard whole (RocksDB's index, then
  // every row pinned).
  static uint64_t WholeBudget(uint32_t shard) {
    absl::StatusOr<ShardFootprint> f = MeasureShardFootprint(ShardDir(shard), true);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? f->whole_shard_budget() : 0;
  }

  static std::unique_ptr<ShardServer> Start(ShardServerOptions options) {
    auto server = ShardServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }
  static std::unique_ptr<ShardServer> Start(uint32_t shard, uint64_t budget) {
    ShardServerOptions options;
    options.listen = "127.0.0.1:0";
    options.db_dir = ShardDir(shard);
    options.ram_budget_bytes = budget;
    options.metrics_port = 0;
    return Start(options);
  }

  // One Lookup through the generated stub (protobuf on the client) and the
  // same through a raw call decoded by the wire codec; both must equal the
  // table's bytes.
  static void ExpectLookup(int port, const std::vector<uint32_t>& layers,
                           const std::vector<std::vector<uint64_t>>& ids) {
    v1::LookupRequest request;
    request.set_table(testing::kSmallTableName);
    request.set_version(testing::kSmallTableVersion);
    std::string expected;
    std::vector<wire::LayerRowIds> raw_layers;
    for (size_t i = 0; i < layers.size(); ++i) {
      v1::LayerRows* l = request.add_layers();
      l->set_layer(layers[i]);
      for (uint64_t id : ids[i]) l->add_row_ids(id);
      expected += ExpectedRows(*table_, layers[i], ids[i]);
      raw_layers.push_back({layers[i], ids[i]});
    }
    auto channel = testing::LocalChannel(port);
    auto stub = v1::EngramStore::NewStub(channel);
    grpc::ClientContext context;
    v1::LookupResponse response;
    const grpc::Status status = stub->Lookup(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.version(), testing::kSmallTableVersion);
    ASSERT_EQ(response.rows().size(), expected.size());
    EXPECT_TRUE(response.rows() == expected) << "protobuf-decoded rows differ";

    grpc::Slice slice = wire::EncodeLookupRequest(testing::kSmallTableName,
                                                  testing::kSmallTableVersion, raw_layers);
    grpc::ByteBuffer raw_response;
    const grpc::Status raw_status =
        testing::RawUnaryCall(*channel, kLookup, grpc::ByteBuffer(&slice, 1), &raw_response);
    ASSERT_TRUE(raw_status.ok()) << raw_status.error_message();
    std::string rows(expected.size(), '\0');
    auto version = wire::DecodeLookupResponse(
        raw_response, {reinterpret_cast<uint8_t*>(rows.data()), rows.size()});
    ASSERT_TRUE(version.ok()) << version.status();
    EXPECT_EQ(*version, testing::kSmallTableVersion);
    EXPECT_TRUE(rows == expected) << "wire-decoded rows differ";
    // The hand-built response is a valid LookupResponse for protobuf too.
    v1::LookupResponse reparsed;
    ASSERT_TRUE(reparsed.ParseFromString(testing::ToString(raw_response)));
    EXPECT_TRUE(reparsed.rows() == expected);
  }

  static grpc::Status LookupStatus(int port, const v1::LookupRequest& request) {
    auto stub = v1::EngramStore::NewStub(testing::LocalChannel(port));
    grpc::ClientContext context;
    v1::LookupResponse response;
    grpc::Status status = stub->Lookup(&context, request, &response);
    if (!status.ok()) {
      EXPECT_TRUE(response.rows().empty());
    }
    return status;
  }

  static testing::TempDir* root_;
  static ShardMap* map_;
  static TableReader* table_;
};

testing::TempDir* ShardServerTest::root_ = nullptr;
ShardMap* ShardServerTest::map_ = nullptr;
TableReader* ShardServerTest::table_ = nullptr;

// Every shard, at hot-tier budgets of 0, 10% and 100% of the shard: all its
// rows in one request, then random and repeated ids across both layers.
TEST_F(ShardServerTest, ServesExactBytesAtEveryBudget) {
  ASSERT_EQ(map_->layer_rows.size(), 2u);
  std::mt19937_64 rng(42);
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    for (int percent : {0, 10, 100}) {
      SCOPED_TRACE(absl::StrCat("shard ", shard, ", budget ", percent, "%"));
      const uint64_t budget =
          percent == 100 ? WholeBudget(shard) : ShardBytes(shard) * percent / 100;
      auto server = Start(shard, budget);
      ASSERT_NE(server, nullptr);
      EXPECT_EQ(server->shard_index(), shard);
      if (percent == 0) {
        EXPECT_EQ(server->hot_bytes(), 0u);
      } else if (percent == 100) {
        EXPECT_EQ(server->hot_bytes(), ShardBytes(shard));
      }
      EXPECT_LE(server->hot_bytes(), budget);

      ExpectLookup(server->port(), {0, 1},
                   {AllOwnedIds(*map_, 0, shard), AllOwnedIds(*map_, 1, shard)});
      for (int round = 0; round < 5; ++round) {
        std::vector<uint64_t> a = RandomOwnedIds(*map_, 0, shard, 300, rng);
        std::vector<uint64_t> b = RandomOwnedIds(*map_, 1, shard, 200, rng);
        b.insert(b.end(), b.begin(), b.begin() + 50);  // repeats
        ExpectLookup(server->port(), {1, 0, 1}, {b, a, {b[0], b[0]}});
      }
    }
  }
}

// Requests large enough to be gathered in shares (GatherPool) by 0 to 3
// helpers, over hot, cached and disk rows: the bytes are the table's.
TEST_F(ShardServerTest, LargeRequestsGatheredInSharesAreExact) {
  std::mt19937_64 rng(5);
  for (int helpers : {0, 1, 3}) {
    SCOPED_TRACE(absl::StrCat(helpers, " gather threads"));
    ShardServerOptions options;
    options.listen = "127.0.0.1:0";
    options.db_dir = ShardDir(1);
    options.ram_budget_bytes = ShardBytes(1) / 10;
    options.gather_threads = helpers;
    auto server = Start(options);
    ASSERT_NE(server, nullptr);
    for (int round = 0; round < 3; ++round) {
      std::vector<uint64_t> a = RandomOwnedIds(*map_, 0, 1, 7000, rng);
      std::vector<uint64_t> b = RandomOwnedIds(*map_, 1, 1, 5001, rng);
      ExpectLookup(server->port(), {0, 1, 0}, {a, b, {a.begin(), a.begin() + 3000}});
    }
  }
}

TEST_F(ShardServerTest, InfoDescribesTheShard) {
  auto server = Start(1, WholeBudget(1));
  ASSERT_NE(server, nullptr);
  auto stub = v1::EngramStore::NewStub(testing::LocalChannel(server->port()));
  grpc::ClientContext context;
  v1::InfoResponse info;
  ASSERT_TRUE(stub->Info(&context, v1::InfoRequest(), &info).ok());
  EXPECT_EQ(info.table(), testing::kSmallTableName);
  EXPECT_EQ(info.version(), testing::kSmallTableVersion);
  EXPECT_EQ(info.shard_index(), 1u);
  EXPECT_EQ(info.n_shards(), kShards);
  EXPECT_EQ(std::vector<uint64_t>(info.layer_rows().begin(), info.layer_rows().end()),
            map_->layer_rows);
  EXPECT_EQ(std::vector<uint32_t>(info.row_bytes().begin(), info.row_bytes().end()),
            map_->row_bytes);
  EXPECT_EQ(info.hot_bytes(), ShardBytes(1));
}

struct BadCase {
  std::string name;
  v1::LookupRequest request;
  grpc::StatusCode code;
  std::string message_part;
};

v1::LookupRequest Request(const std::string& table, uint64_t version, uint32_t layer,
                          std::vector<uint64_t> ids) {
  v1::LookupRequest r;
  r.set_table(table);
  r.set_version(version);
  v1::LayerRows* l = r.add_layers();
  l->set_layer(layer);
  for (uint64_t id : ids) l->add_row_ids(id);
  return r;
}

TEST_F(ShardServerTest, RejectsBadRequestsWithStatusNamingTheValue) {
  ShardServerOptions options;
  options.listen = "127.0.0.1:0";
  options.db_dir = ShardDir(2);
  options.max_rows_per_request = 10;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  const uint64_t rows0 = map_->layer_rows[0];
  const uint64_t past_end = rows0 + 5;
  const std::vector<BadCase> cases = {
      {"other table", Request("other", testing::kSmallTableVersion, 0, {2}),
       grpc::StatusCode::FAILED_PRECONDITION, "not \"other\""},
      {"no table name", Request("", testing::kSmallTableVersion, 0, {2}),
       grpc::StatusCode::FAILED_PRECONDITION, "must name its table and version"},
      {"version 0", Request(testing::kSmallTableName, 0, 0, {2}),
       grpc::StatusCode::FAILED_PRECONDITION, "not version 0"},
      {"other version", Request(testing::kSmallTableName, testing::kSmallTableVersion + 1, 0, {2}),
       grpc::StatusCode::FAILED_PRECONDITION,
       absl::StrCat("not version ", testing::kSmallTableVersion + 1)},
      {"unknown layer", Request(testing::kSmallTableName, testing::kSmallTableVersion, 7, {2}),
       grpc::StatusCode::INVALID_ARGUMENT, "layer 7 does not exist"},
      {"row past the end",
       Request(testing::kSmallTableName, testing::kSmallTableVersion, 0, {2, past_end}),
       grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("row id ", past_end)},
      {"row of another shard",
       Request(testing::kSmallTableName, testing::kSmallTableVersion, 1, {2, 4}),
       grpc::StatusCode::FAILED_PRECONDITION, "row id 4 of layer 1 belongs to shard 1"},
      {"too many rows",
       Request(testing::kSmallTableName, testing::kSmallTableVersion, 0,
               {2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32}),
       grpc::StatusCode::RESOURCE_EXHAUSTED, "limit is 10 rows"},
  };
  for (const BadCase& c : cases) {
    const grpc::Status status = LookupStatus(server->port(), c.request);
    EXPECT_EQ(status.error_code(), c.code) << c.name << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(c.message_part), std::string::npos)
        << c.name << ": " << status.error_message();
  }
  // The table's name and exact version and exactly the limit work.
  EXPECT_TRUE(
      LookupStatus(server->port(), Request(testing::kSmallTableName, testing::kSmallTableVersion, 0,
                                           {2, 5, 8, 11, 14, 17, 20, 23, 26, 29}))
          .ok());
  // So does a request without rows.
  EXPECT_TRUE(LookupStatus(server->port(),
                           Request(testing::kSmallTableName, testing::kSmallTableVersion, 0, {}))
                  .ok());

  // Bytes that are not a LookupRequest.
  grpc::ByteBuffer response;
  const grpc::Status garbage = testing::RawUnaryCall(
      *testing::LocalChannel(server->port()), kLookup,
      testing::ToByteBuffer(std::string("\x1a\x05\x12\x09\x01", 5)), &response);
  EXPECT_EQ(garbage.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << garbage.error_message();
}

TEST_F(ShardServerTest, RefusesDataThatDoesNotMatchItsShardMap) {
  testing::TempDir copy("shard_server_mismatch");
  const std::string dir = copy.path() + "/shard";
  std::filesystem::copy(ShardDir(0), dir, std::filesystem::copy_options::recursive);
  ShardMap wrong = *map_;
  wrong.n_shards = 4;  // shard.json's row counts no longer match
  ASSERT_TRUE(wrong.Save(dir + "/shard_map.json").ok());
  ShardServerOptions options;
  options.listen = "127.0.0.1:0";
  options.db_dir = dir;
  auto server = ShardServer::Start(options);
  ASSERT_FALSE(server.ok());
  const std::string message(server.status().message());
  const size_t at = message.find(dir);
  EXPECT_NE(at, std::string::npos) << message;
  EXPECT_EQ(message.find(dir, at + dir.size()), std::string::npos) << "named twice: " << message;

  options.db_dir = copy.path() + "/missing";
  server = ShardServer::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find(options.db_dir), std::string::npos) << server.status();
}

// A flipped byte in an SST file: every lookup either fails with DATA_LOSS
// or returns the right bytes, never wrong bytes; the failures are counted.
TEST_F(ShardServerTest, CorruptSstIsDataLossNotWrongRows) {
  testing::TempDir copy("shard_server_corrupt");
  const std::string dir = copy.path() + "/shard";
  std::filesystem::copy(ShardDir(0), dir, std::filesystem::copy_options::recursive);
  std::string sst;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/rocksdb")) {
    if (entry.path().extension() == ".sst") sst = entry.path();
  }
  ASSERT_FALSE(sst.empty());
  {
    std::fstream f(sst, std::ios::in | std::ios::out | std::ios::binary);
    const auto size = std::filesystem::file_size(sst);
    f.seekg(size / 4);
    char c;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(size / 4);
    f.write(&c, 1);
  }
  ShardServerOptions options;
  options.listen = "127.0.0.1:0";
  options.db_dir = dir;
  options.metrics_port = 0;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);

  int data_loss = 0;
  for (uint32_t layer = 0; layer < 2; ++layer) {
    const std::vector<uint64_t> all = AllOwnedIds(*map_, layer, 0);
    for (size_t begin = 0; begin < all.size(); begin += 64) {
      const std::vector<uint64_t> ids(all.begin() + begin,
                                      all.begin() + std::min(all.size(), begin + 64));
      auto stub = v1::EngramStore::NewStub(testing::LocalChannel(server->port()));
      grpc::ClientContext context;
      v1::LookupResponse response;
      const grpc::Status s = stub->Lookup(
          &context, Request(testing::kSmallTableName, testing::kSmallTableVersion, layer, ids),
          &response);
      if (s.error_code() == grpc::StatusCode::DATA_LOSS) {
        ++data_loss;
        continue;
      }
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_TRUE(response.rows() == ExpectedRows(*table_, layer, ids));
    }
  }
  EXPECT_GE(data_loss, 1);
  auto page = testing::HttpGet(server->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(testing::MetricValue(*page, "engram_shard_data_loss_total"), data_loss);
  EXPECT_EQ(testing::MetricValue(
                *page, "engram_shard_requests_total{code=\"DATA_LOSS\",method=\"Lookup\"}"),
            data_loss);
}

TEST_F(ShardServerTest, ConcurrentClientsGetExactBytes) {
  auto server = Start(1, ShardBytes(1) / 10);
  ASSERT_NE(server, nullptr);
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < 25; ++i) {
        ExpectLookup(
            server->port(), {0, 1},
            {RandomOwnedIds(*map_, 0, 1, 100, rng), RandomOwnedIds(*map_, 1, 1, 100, rng)});
      }
    });
  }
  for (std::thread& c : clients) c.join();
}

TEST_F(ShardServerTest, MetricsCountRowsByTier) {
  auto server = Start(0, WholeBudget(0));  // everything pinned
  ASSERT_NE(server, nullptr);
  std::mt19937_64 rng(1);
  const std::vector<uint64_t> ids = RandomOwnedIds(*map_, 1, 0, 123, rng);
  ExpectLookup(server->port(), {1}, {ids});  // two calls: stub and raw
  auto page = testing::HttpGet(server->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(testing::MetricValue(*page, "engram_shard_rows_total{layer=\"1\",tier=\"pinned\"}"),
            2 * 123);
  EXPECT_EQ(testing::MetricValue(*page, "engram_shard_rows_total{layer=\"1\",tier=\"disk\"}"), 0);
  EXPECT_EQ(testing::MetricValue(*page, "engram_shard_bytes_total{layer=\"1\"}"),
            2 * 123 * map_->row_bytes[1]);
  EXPECT_EQ(
      testing::MetricValue(*page, "engram_shard_requests_total{code=\"OK\",method=\"Lookup\"}"), 2);
  EXPECT_EQ(testing::MetricValue(*page, "engram_shard_hot_tier_bytes{part=\"pinned\"}"),
            ShardBytes(0));
  EXPECT_EQ(testing::MetricValue(*page, "engram_shard_inflight_requests"), 0);
  EXPECT_NE(page->find("engram_shard_request_duration_seconds_bucket"), std::string::npos);
  EXPECT_NE(page->find("engram_shard_rocksdb_"), std::string::npos);
}

// The budget is the shard's memory: RocksDB's index first, the hot tier
// the rest. A budget below the index is refused with one line; one above it
// leaves the tier budget minus the index, and the metrics say so.
TEST_F(ShardServerTest, RamBudgetChargesTheStoreIndexFirst) {
  auto probe = Start(1, 0);
  ASSERT_NE(probe, nullptr);
  auto page = testing::HttpGet(probe->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  const std::optional<double> index =
      testing::MetricValue(*page, "engram_shard_resident_bytes{kind=\"rocksdb_index\"}");
  ASSERT_TRUE(index.has_value());
  ASSERT_GT(*index, 0);
  probe.reset();

  ShardServerOptions options;
  options.listen = "127.0.0.1:0";
  options.db_dir = ShardDir(1);
  // Well below: the estimate moves by a few bytes from one open to the next.
  options.ram_budget_bytes = static_cast<uint64_t>(*index) / 2;
  auto refused = ShardServer::Start(options);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "raise it to at least"))
      << refused.status();
  EXPECT_EQ(refused.status().message().find('\n'), std::string::npos);

  options.ram_budget_bytes = static_cast<uint64_t>(*index) + ShardBytes(1) / 10;
  options.metrics_port = 0;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  std::mt19937_64 rng(8);
  ExpectLookup(server->port(), {0, 1},
               {RandomOwnedIds(*map_, 0, 1, 400, rng), RandomOwnedIds(*map_, 1, 1, 400, rng)});
  page = testing::HttpGet(server->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(testing::MetricValue(*page, "engram_shard_ram_budget_bytes"),
            static_cast<double>(options.ram_budget_bytes));
  double table_bytes = 0;
  for (const char* kind : {"pinned_rows", "cached_rows", "hot_index", "rocksdb_index"}) {
    table_bytes += *testing::MetricValue(
        *page, absl::StrCat("engram_shard_resident_bytes{kind=\"", kind, "\"}"));
  }
  EXPECT_LE(table_bytes, static_cast<double>(options.ram_budget_bytes));
  EXPECT_GT(*testing::MetricValue(*page, "engram_shard_rows_total{layer=\"0\",tier=\"disk\"}"), 0);
}

// A cuckoo tail is read through mmap, so through the page cache: with a
// budget that does not hold the whole shard it is refused at start, saying
// what to do; with --direct-io=false the operator accepts the page cache;
// with a whole-shard budget every row is pinned and the tail is never read.
TEST_F(ShardServerTest, CuckooTailNeedsAWholeShardBudget) {
  const std::string dir = root_->path() + "/cuckoo-shard-1";
  ImportOptions import;
  import.table_dir = root_->path() + "/table";
  import.n_shards = kShards;
  import.shard_index = 1;
  import.out_dir = dir;
  import.tail_format = TailFormat::kCuckoo;
  ASSERT_TRUE(ImportShard(import, nullptr).ok());
  ShardServerOptions options;
  options.listen = "127.0.0.1:0";
  options.db_dir = dir;
  options.metrics_port = 0;
  options.ram_budget_bytes = ShardBytes(1) / 4;
  auto refused = ShardServer::Start(options);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--tail-format block"))
      << refused.status();
  absl::StatusOr<ShardFootprint> footprint = MeasureShardFootprint(dir, true);
  ASSERT_TRUE(footprint.ok()) << footprint.status();
  // The figure comes from the server's own open of the store: RocksDB's
  // estimate of its index may differ from this one by a few bytes.
  const absl::string_view message = refused.status().message();
  const absl::string_view raise = "raise --ram-budget to at least ";
  const size_t at = message.find(raise);
  ASSERT_NE(at, absl::string_view::npos) << message;
  uint64_t advised = 0;
  const absl::string_view digits = message.substr(at + raise.size());
  ASSERT_TRUE(absl::SimpleAtoi(digits.substr(0, digits.find_first_not_of("0123456789")), &advised))
      << message;
  EXPECT_NEAR(static_cast<double>(advised), static_cast<double>(footprint->whole_shard_budget()),
              static_cast<double>(footprint->slack_bytes()))
      << message;

  std::mt19937_64 rng(8);
  for (bool whole : {false, true}) {
    SCOPED_TRACE(whole ? "whole-shard budget" : "--direct-io=false");
    options.direct_io = whole;
    options.ram_budget_bytes = whole ? footprint->whole_shard_budget() : ShardBytes(1) / 4;
    auto server = Start(options);
    ASSERT_NE(server, nullptr);
    for (int round = 0; round < 3; ++round) {
      ExpectLookup(server->port(), {0, 1},
                   {RandomOwnedIds(*map_, 0, 1, 400, rng), RandomOwnedIds(*map_, 1, 1, 400, rng)});
    }
    auto page = testing::HttpGet(server->metrics_port(), "/metrics");
    ASSERT_TRUE(page.ok()) << page.status();
    const double disk =
        *testing::MetricValue(*page, "engram_shard_rows_total{layer=\"0\",tier=\"disk\"}");
    if (whole) {
      EXPECT_EQ(disk, 0);
      EXPECT_GE(*testing::MetricValue(*page, "engram_shard_resident_bytes{kind=\"pinned_rows\"}"),
                static_cast<double>(ShardBytes(1)));
    } else {
      EXPECT_GT(disk, 0);
    }
  }
}

// Calls that the server has accepted when Shutdown starts all complete.
TEST_F(ShardServerTest, ShutdownDrainsInFlightCalls) {
  // Every row from disk, on one reader thread: the calls are all dispatched
  // long before their reads finish.
  ShardServerOptions options;
  options.listen = "127.0.0.1:0";
  options.db_dir = ShardDir(2);
  options.metrics_port = 0;
  options.reader_threads = 1;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  const int metrics_port = server->metrics_port();
  std::mt19937_64 rng(9);
  const std::vector<uint64_t> ids = RandomOwnedIds(*map_, 0, 2, 60000, rng);
  const std::string expected = ExpectedRows(*table_, 0, ids);
  const wire::LayerRowIds layer{0, ids};
  grpc::Slice request =
      wire::EncodeLookupRequest(testing::kSmallTableName, testing::kSmallTableVersion, {&layer, 1});

  constexpr int kCalls = 4;
  testing::PendingLookups calls(port, grpc::ByteBuffer(&request, 1), kCalls);
  // Every call is in a handler now. (gRPC cancels calls whose request has
  // not fully arrived when Shutdown starts; those were never accepted.)
  ASSERT_TRUE(calls.AllInFlight(metrics_port)) << "calls finished too fast to test a drain";
  server->Shutdown(absl::Seconds(30));
  calls.ExpectEveryRowsEqual(expected);
  auto page = testing::HttpGet(metrics_port, "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(
      testing::MetricValue(*page, "engram_shard_requests_total{code=\"OK\",method=\"Lookup\"}"),
      kCalls);
}

}  // namespace
}  // namespace engram
