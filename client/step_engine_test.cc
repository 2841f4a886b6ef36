// StepEngine (client/step_engine.h) against two engram-shard processes on
// 127.0.0.1 (port 0) serving a small table imported with engramctl, both
// the binaries next to this test. A shard that is down is a closed port;
// one that never answers is a third engram-shard, stopped (SIGSTOP) once
// the client's connection to it is up.
#include "client/step_engine.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/local_cache.h"
#include "client/shard_channels.h"
#include "common/codec/row_encoding.h"
#include "common/format/shard_map.h"
#include "common/format/table.h"
#include "common/net/prometheus_scrape.h"
#include "common/testing/child_process.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

constexpr int kShards = 2;
const std::string kBin = ENGRAM_BIN_DIR;

// A TCP port on 127.0.0.1 that refuses connections (bound, then closed):
// a shard that is down.
class ClosedPort {
 public:
  ClosedPort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    ::close(fd);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int port_ = 0;
};

// The channels and step pool of one client-to-be.
struct Rig {
  std::unique_ptr<ShardChannels> channels;  // first: outlives the pool
  std::unique_ptr<StepPool> pool;
};

class StepEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new testing::TempDir("step_engine_test");
    const std::string table = root_->Sub("table");
    ASSERT_TRUE(testing::MakeSmallTable(table, 300, 11).ok());
    // A trace for the shards' hot-row profiles (the local cache's input).
    const std::string trace = root_->Sub("trace.txt");
    {
      std::ofstream t(trace);
      std::mt19937_64 rng(5);
      for (int line = 0; line < 20; ++line) {
        for (int i = 0; i < 64; ++i) t << (rng() % 50) << ' ';
        t << '\n';
      }
    }
    for (int s = 0; s < kShards; ++s) {
      ASSERT_EQ(testing::RunCommand({kBin + "/engramctl", "import", "--table", table, "--shards",
                                     std::to_string(kShards), "--shard-index", std::to_string(s),
                                     "--out", ShardDir(s), "--profile-trace", trace})
                    .value_or(-1),
                0);
    }
    absl::StatusOr<std::unique_ptr<TableReader>> reader = TableReader::Open(table);
    ASSERT_TRUE(reader.ok()) << reader.status();
    reader_ = reader->release();
    absl::StatusOr<ShardMap> map = ShardMap::Load(ShardDir(0) + "/shard_map.json");
    ASSERT_TRUE(map.ok()) << map.status();
    map_ = new ShardMap(*map);
    for (int s = 0; s < kShards; ++s) {
      std::unique_ptr<testing::ChildProcess> shard = StartShard(s, &addresses_[s]);
      ASSERT_NE(shard, nullptr);
      shards_[s] = shard.release();
    }
  }

  // engram-shard serving shard `s` on a free port (*address); null, with
  // the test failed, when it does not start.
  // `ram_budget`: --ram-budget; `metrics_port`: gets its metrics port.
  static std::unique_ptr<testing::ChildProcess> StartShard(int s, std::string* address,
                                                           const std::string& ram_budget = "64K",
                                                           int* metrics_port = nullptr) {
    absl::StatusOr<std::unique_ptr<testing::ChildProcess>> child = testing::ChildProcess::Spawn(
        {kBin + "/engram-shard", "--db", ShardDir(s), "--listen", "127.0.0.1:0", "--metrics-port",
         "0", "--ram-budget", ram_budget});
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return nullptr;
    // "engram-shard: serving shard I/K of T vV on 127.0.0.1:PORT ..."
    absl::StatusOr<std::string> line = (*child)->ReadLine(absl::Minutes(2));
    EXPECT_TRUE(line.ok()) << line.status();
    if (!line.ok()) return nullptr;
    const std::string key = " on 127.0.0.1:";
    const size_t at = line->find(key);
    int port = 0;
    if (at != std::string::npos) {
      size_t end = at + key.size();
      while (end < line->size() && (*line)[end] >= '0' && (*line)[end] <= '9') ++end;
      if (!absl::SimpleAtoi(line->substr(at + key.size(), end - at - key.size()), &port)) port = 0;
    }
    if (port <= 0) {
      ADD_FAILURE() << "no port in: " << *line;
      return nullptr;
    }
    *address = absl::StrCat("127.0.0.1:", port);
    if (metrics_port != nullptr) {
      // "... (metrics :MPORT) ..."
      const size_t m = line->find("(metrics :");
      const size_t end = line->find(')', m);
      if (m == std::string::npos || end == std::string::npos ||
          !absl::SimpleAtoi(line->substr(m + 10, end - m - 10), metrics_port)) {
        ADD_FAILURE() << "no metrics port in: " << *line;
        return nullptr;
      }
    }
    return *std::move(child);
  }
  static void TearDownTestSuite() {
    for (testing::ChildProcess*& s : shards_) {
      if (s != nullptr) s->Stop(absl::Seconds(10));
      delete s;
      s = nullptr;
    }
    delete map_;
    delete reader_;
    delete root_;
  }

  static std::string ShardDir(int s) { return root_->Sub(absl::StrCat("shard-", s)); }
  static const TableManifest& manifest() { return reader_->manifest(); }
  static int n_layers() { return static_cast<int>(manifest().layers.size()); }
  static int n_cols() { return manifest().layout.n_cols(); }

  // Channels to `addresses` (one replica per shard; default: the shards),
  // and a pool of steps over them.
  static Rig MakeRig(bool pipeline_layers = true,
                     absl::Duration step_deadline = absl::InfiniteDuration(),
                     std::vector<std::string> addresses = {},
                     absl::Duration block_time = absl::Microseconds(500)) {
    Rig rig;
    rig.channels = MakeChannels(std::move(addresses));
    rig.pool = MakePool(rig.channels.get(), pipeline_layers, step_deadline, block_time);
    return rig;
  }
  static std::unique_ptr<ShardChannels> MakeChannels(std::vector<std::string> addresses = {}) {
    if (addresses.empty()) addresses.assign(std::begin(addresses_), std::end(addresses_));
    std::vector<std::vector<std::string>> replicas;
    for (const std::string& a : addresses) replicas.push_back({a});
    ChannelOptions ch;
    ch.max_reconnect_backoff = absl::Seconds(1);
    // Also how long a reply may stall mid-frame: a stopped shard's calls
    // stay in flight until the step deadline or a cancel ends them.
    ch.stream_connect_timeout = absl::Minutes(1);
    return std::make_unique<ShardChannels>(replicas, ch);
  }
  static std::unique_ptr<StepPool> MakePool(ShardChannels* channels, bool pipeline_layers,
                                            absl::Duration step_deadline,
                                            absl::Duration block_time = absl::Microseconds(500)) {
    StepConfig c;
    c.table = manifest().table;
    c.version = manifest().version;
    c.n_cols = n_cols();
    c.n_shards = kShards;
    c.layers = manifest().layers;
    c.pipeline_layers = pipeline_layers;
    c.step_deadline = step_deadline;
    c.rpc_deadline = absl::Minutes(1);  // only the step deadline ends a wait here
    c.block_time = block_time;
    return std::make_unique<StepPool>(std::move(c), channels);
  }

  // The stored bytes of `row` of `layer`.
  static std::string TableRow(int layer, uint64_t row) {
    std::string bytes(static_cast<size_t>(manifest().layers[layer].row_bytes), '\0');
    EXPECT_TRUE(reader_->ReadRow(layer, row, reinterpret_cast<uint8_t*>(bytes.data())).ok());
    return bytes;
  }

  // `n` rows of `layer` drawn from `distinct` different ones (so repeats),
  // each on a shard in `shards`.
  static std::vector<RowId> SomeRows(int layer, size_t n, size_t distinct, std::set<int> shards,
                                     uint64_t seed) {
    std::mt19937_64 rng(seed);
    const uint64_t rows = manifest().layers[layer].rows;
    std::vector<RowId> pool;
    while (pool.size() < distinct) {
      const RowId r = rng() % rows;
      if (shards.count(static_cast<int>(r % kShards)) != 0) pool.push_back(r);
    }
    std::vector<RowId> out(n);
    for (RowId& r : out) r = pool[rng() % pool.size()];
    return out;
  }

  static testing::TempDir* root_;
  static TableReader* reader_;
  static ShardMap* map_;
  static testing::ChildProcess* shards_[kShards];
  static std::string addresses_[kShards];
};

testing::TempDir* StepEngineTest::root_ = nullptr;
TableReader* StepEngineTest::reader_ = nullptr;
ShardMap* StepEngineTest::map_ = nullptr;
testing::ChildProcess* StepEngineTest::shards_[kShards] = {};
std::string StepEngineTest::addresses_[kShards];

// A hashed step's ids ([B][T][L][C], with repeats within and across
// sequences): each layer's unique rows are its distinct ids in first-seen
// [B][T][C] order, each went to shard row % n_shards, and the copy-out is
// the table's row of every id in [B][T][C] order.
TEST_F(StepEngineTest, DeduplicatesGroupsByShardAndCopiesOutInRequestOrder) {
  Rig rig = MakeRig();
  const int64_t B = 3, T = 5;
  const int L = n_layers(), C = n_cols();
  std::unique_ptr<StepEngine> e = rig.pool->Take();
  std::span<RowId> ids = e->BeginStep(B, T);
  ASSERT_EQ(ids.size(), static_cast<size_t>(B * T * L * C));
  std::vector<std::vector<RowId>> by_layer(L);  // [B][T][C] order
  for (int l = 0; l < L; ++l) by_layer[l] = SomeRows(l, B * T * C, 23, {0, 1}, 10 + l);
  for (int64_t p = 0; p < B * T; ++p) {
    for (int l = 0; l < L; ++l) {
      for (int c = 0; c < C; ++c) ids[(p * L + l) * C + c] = by_layer[l][p * C + c];
    }
  }
  e->SendStep();
  uint64_t unique = 0;
  for (int l = 0; l < L; ++l) {
    ASSERT_TRUE(e->WaitLayer(l).ok());
    std::vector<uint64_t> first_seen;
    std::set<uint64_t> seen;
    for (RowId r : by_layer[l]) {
      if (seen.insert(r).second) first_seen.push_back(r);
    }
    const std::span<const uint64_t> u = e->UniqueRows(l);
    EXPECT_EQ(std::vector<uint64_t>(u.begin(), u.end()), first_seen) << "layer " << l;
    for (size_t k = 0; k < u.size(); ++k) {
      EXPECT_EQ(e->ShardOfUnique(l, k), static_cast<int>(u[k] % kShards)) << "row " << u[k];
    }
    unique += u.size();
    const size_t rb = static_cast<size_t>(manifest().layers[l].row_bytes);
    std::string out(by_layer[l].size() * rb, '\0');
    ASSERT_TRUE(
        e->CopyOut(l, RowFormat::kRaw, {reinterpret_cast<uint8_t*>(out.data()), out.size()}).ok());
    for (size_t i = 0; i < by_layer[l].size(); ++i) {
      ASSERT_EQ(out.substr(i * rb, rb), TableRow(l, by_layer[l][i]))
          << "layer " << l << " id " << i;
    }
  }
  EXPECT_EQ(e->unique_rows(), unique);
  rig.pool->Return(std::move(e));
  StepCounters& c = rig.pool->counters();
  EXPECT_EQ(c.steps.load(), 1u);
  EXPECT_EQ(c.ids.load(), static_cast<uint64_t>(B * T * L * C));
  EXPECT_EQ(c.unique_rows.load(), unique);
  EXPECT_EQ(c.rows_fetched.load(), unique);  // no local cache
}

// Rows by id of one layer: decoded copy-out equals the table's rows decoded;
// a buffer of the wrong size is refused; ids count, not a step.
TEST_F(StepEngineTest, LookupOfOneLayerDecodesInRequestOrder) {
  Rig rig = MakeRig();
  const int layer = n_layers() - 1;
  const std::vector<RowId> ids = SomeRows(layer, 300, 40, {0, 1}, 3);
  std::unique_ptr<StepEngine> e = rig.pool->Take();
  e->SendLookup(layer, ids);
  ASSERT_TRUE(e->WaitLayer(layer).ok());
  const LayerInfo& info = manifest().layers[layer];
  std::vector<float> out(ids.size() * static_cast<size_t>(info.head_dim));
  const std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(out.data()), out.size() * 4);
  EXPECT_EQ(e->CopyOut(layer, RowFormat::kF32, bytes.first(bytes.size() - 4)).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(e->CopyOut(layer, RowFormat::kF32, bytes).ok());
  std::vector<float> want(static_cast<size_t>(info.head_dim));
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string row = TableRow(layer, ids[i]);
    DecodeRows(info.encoding, reinterpret_cast<const uint8_t*>(row.data()), 1, info.head_dim,
               info.scale_block, want.data());
    ASSERT_EQ(std::memcmp(&out[i * want.size()], want.data(), want.size() * 4), 0) << "id " << i;
  }
  rig.pool->Return(std::move(e));
  EXPECT_EQ(rig.pool->counters().steps.load(), 0u);
  EXPECT_EQ(rig.pool->counters().ids.load(), ids.size());
}

// A layer's outcome is its own RPCs': with shard 1 down, rows of shard 0
// alone arrive, rows that need shard 1 fail UNAVAILABLE naming it, and the
// engine, returned after the failure, serves the next step right.
TEST_F(StepEngineTest, ALayerFailsOnlyForItsOwnShardsAndTheEngineIsReused) {
  ClosedPort down;
  Rig rig = MakeRig(true, absl::InfiniteDuration(), {addresses_[0], down.address()});
  const std::vector<RowId> mixed = SomeRows(0, 50, 20, {0, 1}, 4);
  std::unique_ptr<StepEngine> e = rig.pool->Take();
  const StepEngine* first = e.get();
  e->SendLookup(0, mixed);
  const absl::Status failed = e->WaitLayer(0);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_TRUE(absl::StrContains(failed.message(), "shard 1 (" + down.address() + ")")) << failed;
  rig.pool->Return(std::move(e));

  const std::vector<RowId> on_zero = SomeRows(0, 50, 20, {0}, 5);
  e = rig.pool->Take();
  EXPECT_EQ(e.get(), first);  // kept for reuse
  e->SendLookup(0, on_zero);
  ASSERT_TRUE(e->WaitLayer(0).ok());
  const size_t rb = static_cast<size_t>(manifest().layers[0].row_bytes);
  std::string out(on_zero.size() * rb, '\0');
  ASSERT_TRUE(
      e->CopyOut(0, RowFormat::kRaw, {reinterpret_cast<uint8_t*>(out.data()), out.size()}).ok());
  for (size_t i = 0; i < on_zero.size(); ++i) {
    ASSERT_EQ(out.substr(i * rb, rb), TableRow(0, on_zero[i])) << "id " << i;
  }
  rig.pool->Return(std::move(e));
}

// Sending by layer, against a shard that never answers (so no layer can
// arrive): pipelined, SendStep sends layer 0 alone and a WaitLayer(1)
// sends layer 1, which then ends at the step deadline naming the silent
// shard; not pipelined, SendStep sends every layer. Returning the engine
// cancels what is in flight.
TEST_F(StepEngineTest, PipelinedLayersWaitForThePreviousLayerOrAWait) {
  if (n_layers() < 2) GTEST_SKIP() << "needs two Engram layers";
  std::string silent_address;
  std::unique_ptr<testing::ChildProcess> silent = StartShard(1, &silent_address);
  ASSERT_NE(silent, nullptr);
  for (const bool pipelined : {true, false}) {
    SCOPED_TRACE(pipelined ? "pipelined" : "not pipelined");
    std::unique_ptr<ShardChannels> channels = MakeChannels({addresses_[0], silent_address});
    {
      // The row stream to the shard-1 replica comes up (a step of a pool
      // without a step deadline), then the replica stops.
      silent->Signal(SIGCONT);
      std::unique_ptr<StepPool> warm = MakePool(channels.get(), true, absl::InfiniteDuration());
      std::unique_ptr<StepEngine> e = warm->Take();
      e->SendLookup(0, SomeRows(0, 10, 5, {1}, 7));
      ASSERT_TRUE(e->WaitLayer(0).ok());
      warm->Return(std::move(e));
      silent->Signal(SIGSTOP);
    }
    std::unique_ptr<StepPool> pool = MakePool(channels.get(), pipelined, absl::Milliseconds(300));
    const int64_t B = 4, T = 8;
    const int L = n_layers(), C = n_cols();
    std::unique_ptr<StepEngine> e = pool->Take();
    std::span<RowId> ids = e->BeginStep(B, T);
    for (int64_t p = 0; p < B * T; ++p) {
      for (int l = 0; l < L; ++l) {
        const std::vector<RowId> r = SomeRows(l, C, C, {0, 1}, 100 * p + l);
        std::copy(r.begin(), r.end(), ids.begin() + (p * L + l) * C);
      }
    }
    e->SendStep();
    // Rows on both shards in every layer, under the per-RPC minimum: one
    // RPC per shard and layer.
    const uint64_t per_layer = kShards;
    EXPECT_EQ(pool->rpc_counters().rpcs.load(), pipelined ? per_layer : L * per_layer);
    const absl::Status s = e->WaitLayer(1);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "Engram layer 1: no rows from shard(s) ")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "1 within the step deadline")) << s;
    EXPECT_EQ(pool->rpc_counters().rpcs.load(), (pipelined ? 2 : L) * per_layer);
    EXPECT_TRUE(e->Arrived(1));  // the deadline has passed
    pool->Return(std::move(e));
  }
  silent->Signal(SIGCONT);
  silent->Stop(absl::Seconds(10));
}

// The local cache as the steps' collaborator: filled by a step of the pool
// from the shards' hot-row profiles, then consulted by later steps, whose
// cached rows are set aside (no RPC) and still copied out right.
TEST_F(StepEngineTest, LocalCacheRowsAreSetAsideAndServedFromIt) {
  Rig rig = MakeRig();
  std::vector<std::string> profiles;
  for (int s = 0; s < kShards; ++s) profiles.push_back(ShardDir(s) + "/hot_profile.bin");
  const uint64_t budget = 100 * static_cast<uint64_t>(manifest().layers[0].row_bytes);
  absl::StatusOr<std::unique_ptr<LocalCache>> cache =
      LocalCache::Build(profiles, budget, *map_, *rig.pool);
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_GT((*cache)->rows(), 0u);
  rig.pool->SetLocalCache(cache->get());

  const int layer = 0;
  std::vector<RowId> cached;
  for (uint64_t r = 0; r < manifest().layers[layer].rows && cached.size() < 10; ++r) {
    if ((*cache)->Contains(layer, r)) cached.push_back(r);
  }
  ASSERT_FALSE(cached.empty());
  std::vector<RowId> ids = SomeRows(layer, 60, 30, {0, 1}, 6);
  for (size_t i = 0; i < ids.size(); i += 3) ids[i] = cached[i % cached.size()];
  const uint64_t hits_before = rig.pool->counters().local_hits.load();

  std::unique_ptr<StepEngine> e = rig.pool->Take();
  e->SendLookup(layer, ids);
  ASSERT_TRUE(e->WaitLayer(layer).ok());
  const std::span<const uint64_t> u = e->UniqueRows(layer);
  uint64_t local = 0;
  for (size_t k = 0; k < u.size(); ++k) {
    const bool in_cache = (*cache)->Contains(layer, u[k]);
    local += in_cache;
    EXPECT_EQ(e->ShardOfUnique(layer, k),
              in_cache ? StepEngine::kLocalShard : static_cast<int>(u[k] % kShards));
  }
  EXPECT_GT(local, 0u);
  EXPECT_EQ(rig.pool->counters().local_hits.load() - hits_before, local);
  const size_t rb = static_cast<size_t>(manifest().layers[layer].row_bytes);
  std::string out(ids.size() * rb, '\0');
  ASSERT_TRUE(
      e->CopyOut(layer, RowFormat::kRaw, {reinterpret_cast<uint8_t*>(out.data()), out.size()})
          .ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(out.substr(i * rb, rb), TableRow(layer, ids[i])) << "id " << i;
  }
  rig.pool->Return(std::move(e));
}

// The need-by a Lookup carries: the time left until its layer's block,
// growing with the block, at least 1 us once due, none without a block time.
TEST(NeedWithinMicros, GrowsWithTheLayersBlock) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  const absl::Time now = start + absl::Microseconds(200);
  const absl::Duration block = absl::Microseconds(500);
  EXPECT_EQ(NeedWithinMicros(start, 1, block, now), 300u);
  EXPECT_EQ(NeedWithinMicros(start, 14, block, now), 6800u);
  uint32_t previous = 0;
  for (int64_t b = 1; b < 64; ++b) {
    const uint32_t us = NeedWithinMicros(start, b, block, now);
    EXPECT_GT(us, previous) << "block " << b;
    previous = us;
  }
  // Due or overdue: the most urgent there is, never "not set".
  EXPECT_EQ(NeedWithinMicros(start, 0, block, now), 1u);
  EXPECT_EQ(NeedWithinMicros(start, 1, block, start + absl::Seconds(1)), 1u);
  // Later than uint32 microseconds: the largest.
  EXPECT_EQ(NeedWithinMicros(start, 3, absl::Hours(1), now), ~uint32_t{0});
  // No block time: no need-by.
  EXPECT_EQ(NeedWithinMicros(start, 14, absl::ZeroDuration(), now), 0u);
}

// Through a real engram-shard whose rows all come from disk: the shard
// counts rows read after the need-by the client sent (engram_shard_late_rows).
// With a block time of 1 ns every layer is due at once (1 us: always late by
// the time a row is read); with an hour, never.
TEST_F(StepEngineTest, TheShardReadsTheNeedByTheClientSends) {
  std::string address;
  int metrics_port = -1;
  std::unique_ptr<testing::ChildProcess> disk_shard =
      StartShard(0, &address, /*ram_budget=*/"0", &metrics_port);
  ASSERT_NE(disk_shard, nullptr);
  auto late_rows = [&] {
    absl::StatusOr<scrape::HttpResponse> r = scrape::HttpGet(metrics_port, "/metrics");
    EXPECT_TRUE(r.ok()) << r.status();
    return scrape::SumSamples(scrape::ParseSamples(r.ok() ? r->body : ""),
                              "engram_shard_late_rows");
  };
  const int layer = n_layers() - 1;
  ASSERT_GT(manifest().layers[layer].layer_id, 0);
  double late = late_rows();
  EXPECT_EQ(late, 0);
  for (const absl::Duration block_time : {absl::Hours(1), absl::Nanoseconds(1)}) {
    SCOPED_TRACE(absl::FormatDuration(block_time));
    Rig rig = MakeRig(true, absl::InfiniteDuration(), {address, addresses_[1]}, block_time);
    const std::vector<RowId> ids = SomeRows(layer, 50, 50, {0}, 8);
    std::unique_ptr<StepEngine> e = rig.pool->Take();
    e->SendLookup(layer, ids);
    ASSERT_TRUE(e->WaitLayer(layer).ok());
    rig.pool->Return(std::move(e));
    const double now = late_rows();
    if (block_time == absl::Hours(1)) {
      EXPECT_EQ(now, late);
    } else {
      EXPECT_GT(now, late);
    }
    late = now;
  }
  disk_shard->Stop(absl::Seconds(10));
}

}  // namespace
}  // namespace engram
