// The client library against real shard servers on 127.0.0.1 (port 0):
// every returned row is compared with the table file.
#include "client/engram_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>
#include <tuple>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/codec/fp8.h"
#include "common/format/table.h"
#include "common/net/prometheus_scrape.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "service/shard_server.h"
#include "shard/import/importer.h"

namespace engram {
namespace {

constexpr int kShards = 3;

// A small table imported into 3 shards, once for the whole suite.
class Cluster {
 public:
  static Cluster& Get() {
    static Cluster* c = new Cluster();
    return *c;
  }
  std::string table_dir() const { return dir_.Sub("table"); }
  std::string shard_dir(int s) const { return dir_.Sub("shard-" + std::to_string(s)); }
  std::string map_path() const { return shard_dir(0) + "/shard_map.json"; }
  const TableReader& reader() const { return *reader_; }
  const std::string& trace() const { return trace_; }

 private:
  Cluster() {
    EXPECT_TRUE(testing::MakeSmallTable(table_dir(), 300, 11).ok());
    trace_ = dir_.Sub("trace.txt");
    std::ofstream t(trace_);
    std::mt19937_64 rng(5);
    for (int line = 0; line < 20; ++line) {
      for (int i = 0; i < 64; ++i) t << (rng() % 50) << ' ';
      t << '\n';
    }
    t.close();
    for (int s = 0; s < kShards; ++s) {
      ImportOptions o;
      o.table_dir = table_dir();
      o.n_shards = kShards;
      o.shard_index = static_cast<uint32_t>(s);
      o.out_dir = shard_dir(s);
      o.profile_trace = trace_;
      absl::StatusOr<ImportResult> r = ImportShard(o, nullptr);
      EXPECT_TRUE(r.ok()) << r.status();
    }
    auto reader = TableReader::Open(table_dir());
    EXPECT_TRUE(reader.ok()) << reader.status();
    reader_ = *std::move(reader);
  }
  testing::TempDir dir_;
  std::string trace_;
  std::unique_ptr<TableReader> reader_;
};

// `advertise`: the row stream port Info names (0 = the bound one).
std::unique_ptr<ShardServer> StartShard(int s, uint64_t ram_budget, bool stream = true,
                                        int advertise = 0) {
  ShardServerOptions o;
  o.listen = "127.0.0.1:0";
  o.db_dir = Cluster::Get().shard_dir(s);
  o.ram_budget_bytes = ram_budget;
  o.stream_port = stream ? std::optional<int>(0) : std::nullopt;
  o.stream_advertise_port = advertise;
  o.reader_threads = 4;
  absl::StatusOr<std::unique_ptr<ShardServer>> server = ShardServer::Start(o);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::string Addr(const ShardServer& s) { return "127.0.0.1:" + std::to_string(s.port()); }

// `replicas` servers for every shard, with the client's address lists.
struct Deployment {
  std::vector<std::unique_ptr<ShardServer>> servers;  // shard-major
  std::vector<std::vector<std::string>> addrs;        // [shard][replica]
  ShardServer& server(int shard, int replica = 0) {
    return *servers[static_cast<size_t>(shard * replicas + replica)];
  }
  int replicas = 1;
};

// `stream`: the servers offer a row stream; `advertise`: see StartShard.
Deployment StartDeployment(uint64_t ram_budget, int replicas = 1, bool stream = true,
                           int advertise = 0) {
  Deployment d;
  d.replicas = replicas;
  for (int s = 0; s < kShards; ++s) {
    d.addrs.emplace_back();
    for (int r = 0; r < replicas; ++r) {
      d.servers.push_back(StartShard(s, ram_budget, stream, advertise));
      EXPECT_NE(d.servers.back(), nullptr);
      if (d.servers.back() != nullptr) d.addrs.back().push_back(Addr(*d.servers.back()));
    }
  }
  return d;
}

ClientOptions BaseOptions(const std::vector<std::vector<std::string>>& addrs,
                          Transport transport = Transport::kRowStream) {
  ClientOptions o;
  o.transport = transport;
  o.table_dir = Cluster::Get().table_dir();
  o.shard_map_path = Cluster::Get().map_path();
  o.shard_addresses = addrs;
  o.rpc_deadline = absl::Seconds(5);
  return o;
}

// Checks every row of every layer of `step` against the table file, in
// raw, f32 and bf16.
void ExpectRowsMatchTable(EngramClient& client, Step& step, bool last_layer_first = false) {
  const TableReader& reader = Cluster::Get().reader();
  const int L = client.n_layers(), C = client.n_cols();
  const size_t positions = static_cast<size_t>(step.batch() * step.tokens_per_sequence());
  std::span<const RowId> ids = step.row_ids();
  for (int k = 0; k < L; ++k) {
    const int l = last_layer_first ? L - 1 - k : k;
    const size_t rb = static_cast<size_t>(client.row_bytes(l));
    const int hd = client.head_dim(l);
    std::vector<uint8_t> raw(positions * C * rb);
    ASSERT_TRUE(step.Wait(l, RowFormat::kRaw, raw).ok());
    std::vector<uint8_t> f32(positions * C * client.OutputRowBytes(l, RowFormat::kF32));
    ASSERT_TRUE(step.Wait(l, RowFormat::kF32, f32).ok());
    std::vector<uint8_t> bf16(positions * C * client.OutputRowBytes(l, RowFormat::kBf16));
    ASSERT_TRUE(step.Wait(l, RowFormat::kBf16, bf16).ok());
    std::vector<uint8_t> want(rb);
    std::vector<float> want_f32(static_cast<size_t>(hd));
    std::vector<uint16_t> want_bf16(static_cast<size_t>(hd));
    const int sb = reader.manifest().layers[l].scale_block;
    for (size_t p = 0; p < positions; ++p) {
      for (int c = 0; c < C; ++c) {
        const RowId row = ids[(p * L + l) * C + c];
        ASSERT_TRUE(reader.ReadRow(l, row, want.data()).ok());
        const size_t i = p * C + c;
        ASSERT_EQ(0, std::memcmp(raw.data() + i * rb, want.data(), rb))
            << "layer " << l << " row " << row;
        fp8::DequantizeRows(want.data(), 1, hd, sb, want_f32.data());
        ASSERT_EQ(0, std::memcmp(f32.data() + i * hd * 4, want_f32.data(), hd * 4));
        fp8::DequantizeRowsBf16(want.data(), 1, hd, sb, want_bf16.data());
        ASSERT_EQ(0, std::memcmp(bf16.data() + i * hd * 2, want_bf16.data(), hd * 2));
      }
    }
  }
}

// Runs a prefill and `decode_steps` decode steps over `batch` sequences
// with random tokens (and an image span), checking every row.
void RunGeneration(EngramClient& client, int batch, int prefill, int decode_steps, uint64_t seed,
                   bool last_layer_first = false) {
  std::mt19937_64 rng(seed);
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> ptrs;
  for (int b = 0; b < batch; ++b) {
    seqs.push_back(client.NewSequence());
    ptrs.push_back(seqs.back().get());
  }
  const int64_t vocab = client.layout().vocab_size;
  auto step_of = [&](int64_t start, int64_t T, bool image) {
    std::vector<int64_t> ids(static_cast<size_t>(batch * T));
    for (auto& id : ids) id = static_cast<int64_t>(rng() % 200);  // repeats: dedup
    if (rng() % 2) ids[0] = vocab - 1;
    // Sequence 1 repeats sequence 0 (a shared prompt): de-duplication must
    // collapse their rows and still hand each its own copy.
    if (batch > 1) std::copy(ids.begin(), ids.begin() + T, ids.begin() + T);
    std::vector<uint8_t> mask(ids.size(), 1);
    if (image) {
      for (int64_t t = T / 3; t < T / 2; ++t) mask[static_cast<size_t>(t)] = 0;
    }
    std::vector<int64_t> starts(static_cast<size_t>(batch), start);
    StepInput in{ptrs, starts, T, ids, mask};
    absl::StatusOr<Step> step = client.Prefetch(in);
    ASSERT_TRUE(step.ok()) << step.status();
    if (batch > 1) {
      EXPECT_LT(step->unique_rows(), static_cast<uint64_t>(step->row_ids().size()));
    }
    ExpectRowsMatchTable(client, *step, last_layer_first);
  };
  step_of(0, prefill, true);
  for (int d = 0; d < decode_steps; ++d) step_of(prefill + d, 1, false);
}

class ClientTest : public ::testing::TestWithParam<std::tuple<int, Transport>> {};

// Hot tier 0, ~10% and everything, over either transport: the client's
// rows are the table's.
TEST_P(ClientTest, RowsEqualTheTableFile) {
  const uint64_t budget = static_cast<uint64_t>(std::get<0>(GetParam()));
  const Transport transport = std::get<1>(GetParam());
  Deployment d = StartDeployment(budget);
  const auto& addrs = d.addrs;
  auto client = EngramClient::Create(BaseOptions(addrs, transport));
  ASSERT_TRUE(client.ok()) << client.status();
  RunGeneration(**client, 4, 40, 6, 1 + budget);
  const ClientStats st = (*client)->stats();
  EXPECT_EQ(st.steps, 7u);
  EXPECT_EQ(st.failed_rpcs, 0u);
  EXPECT_GT(st.ids, st.unique_rows);
  EXPECT_EQ(st.rows_fetched, st.unique_rows);
  EXPECT_GE(st.bytes_received, st.rows_fetched * 66);
  EXPECT_EQ(st.stream_answers, transport == Transport::kRowStream ? st.rpcs : 0u);
}
// The small table: ~7,700 rows of 66 bytes per layer, ~0.34 MB per shard.
INSTANTIATE_TEST_SUITE_P(HotTier, ClientTest,
                         ::testing::Combine(::testing::Values(0, 34 << 10, 64 << 20),
                                            ::testing::Values(Transport::kRowStream,
                                                              Transport::kGrpc)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Transport>>& p) {
                           return "budget" + std::to_string(std::get<0>(p.param)) +
                                  (std::get<1>(p.param) == Transport::kRowStream ? "_row_stream"
                                                                                 : "_grpc");
                         });

// A client with the default transport against `d`: every row of a short
// generation is the table's, and every Lookup was answered over gRPC.
void ExpectServedOverGrpc(const Deployment& d, uint64_t seed) {
  auto client = EngramClient::Create(BaseOptions(d.addrs));
  ASSERT_TRUE(client.ok()) << client.status();
  RunGeneration(**client, 3, 20, 3, seed);
  const ClientStats st = (*client)->stats();
  EXPECT_EQ(st.failed_rpcs, 0u);
  EXPECT_GT(st.rpcs, 0u);
  EXPECT_EQ(st.stream_answers, 0u);
}

// Servers that offer no row stream: the client's Lookups go over gRPC.
TEST(Client, ShardsWithoutARowStreamAreServedOverGrpc) {
  ExpectServedOverGrpc(StartDeployment(34 << 10, 1, /*stream=*/false), 21);
}

// Info names a stream port nothing listens on (a mapping gone wrong): the
// replicas still answer, over gRPC.
TEST(Client, AnUnreachableRowStreamFallsBackToGrpc) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int closed_port = ntohs(addr.sin_port);  // bound, never listening
  ExpectServedOverGrpc(StartDeployment(34 << 10, 1, /*stream=*/true, closed_port), 22);
  ::close(fd);
}

// Without pipelining every layer of a step goes out as soon as it is
// de-duplicated, one Lookup per shard and layer; a small max_rows_per_rpc
// cuts those requests. The rows stay those of the table file either way.
TEST(Client, MultiLayerRequestsCutAtTheRowLimitKeepEveryRow) {
  Deployment d = StartDeployment(34 << 10);
  for (const auto& [pipeline, limit] :
       std::vector<std::pair<bool, uint32_t>>{{false, 16384}, {false, 37}, {true, 37}}) {
    ClientOptions o = BaseOptions(d.addrs);
    o.pipeline_layers = pipeline;
    o.max_rows_per_rpc = limit;
    auto client = EngramClient::Create(o);
    ASSERT_TRUE(client.ok()) << client.status();
    RunGeneration(**client, 3, 30, 4, 11);
    const ClientStats st = (*client)->stats();
    EXPECT_EQ(st.failed_rpcs, 0u);
    EXPECT_EQ(st.rows_fetched, st.unique_rows);
    // Two channels: a big step's rows per shard go as two RPCs. Without
    // HTTP/2 bandwidth probing (a fixed window), the same rows.
    ClientOptions two = o;
    two.channels_per_replica = 2;
    two.http2_bdp_probe = pipeline;
    auto client2 = EngramClient::Create(two);
    ASSERT_TRUE(client2.ok()) << client2.status();
    RunGeneration(**client2, 16, 100, 1, 12);
    if (!pipeline && limit == 16384) {
      EXPECT_GT((*client2)->stats().rpcs,
                (*client2)->stats().steps * (*client2)->n_shards() * (*client2)->n_layers());
    }
    const uint64_t layers = static_cast<uint64_t>((*client)->n_layers());
    const uint64_t shards = static_cast<uint64_t>((*client)->n_shards());
    if (limit == 16384) {
      EXPECT_EQ(st.rpcs, st.steps * shards * layers) << "one RPC per shard and layer";
    } else {
      EXPECT_GE(st.rpcs, (st.rows_fetched + limit - 1) / limit);
      EXPECT_GT(st.rpcs, st.steps * shards * layers);
    }
  }
}

TEST(Client, FailsOverToTheNextReplicaWithNoWrongRow) {
  for (Transport transport : {Transport::kRowStream, Transport::kGrpc}) {
    Deployment d = StartDeployment(0, /*replicas=*/2);
    auto client = EngramClient::Create(BaseOptions(d.addrs, transport));
    ASSERT_TRUE(client.ok()) << client.status();
    RunGeneration(**client, 2, 16, 2, 3);
    d.server(1, 0).Shutdown(absl::ZeroDuration());  // a replica dies mid-run
    RunGeneration(**client, 2, 16, 4, 4);
    EXPECT_GT((*client)->stats().retries, 0u);
    EXPECT_EQ((*client)->stats().failed_rpcs, 0u);
  }
}

TEST(Client, HedgedRequestsReturnTheSameRows) {
  Deployment d = StartDeployment(0, /*replicas=*/2);
  ClientOptions o = BaseOptions(d.addrs);
  o.hedge = true;
  o.hedge_delay = absl::Nanoseconds(1);  // hedge every request
  auto client = EngramClient::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  RunGeneration(**client, 2, 12, 3, 8);
  EXPECT_GT((*client)->stats().hedges, 0u);
}

TEST(Client, AllReplicasDownIsUnavailableNamingTheShard) {
  Deployment d = StartDeployment(0);
  const auto& addrs = d.addrs;
  d.server(2).Shutdown(absl::ZeroDuration());
  auto client = EngramClient::Create(BaseOptions(addrs));
  ASSERT_TRUE(client.ok()) << client.status();
  auto seq = (*client)->NewSequence();
  Sequence* ptr = seq.get();
  std::vector<int64_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  std::vector<int64_t> starts = {0};
  absl::StatusOr<Step> step = (*client)->Prefetch({std::span(&ptr, 1), starts, 32, ids, {}});
  ASSERT_TRUE(step.ok());
  std::vector<uint8_t> out(32 * (*client)->n_cols() * (*client)->row_bytes(0));
  absl::Status s = step->Wait(0, RowFormat::kRaw, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("shard 2"), std::string::npos) << s;
}

TEST(Client, DeadlineExceededIsAClearStatus) {
  Deployment d = StartDeployment(0);
  const auto& addrs = d.addrs;
  ClientOptions o = BaseOptions(addrs);
  o.rpc_deadline = absl::Nanoseconds(1);
  auto client = EngramClient::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto seq = (*client)->NewSequence();
  Sequence* ptr = seq.get();
  std::vector<int64_t> ids(8, 5);
  std::vector<int64_t> starts = {0};
  absl::StatusOr<Step> step = (*client)->Prefetch({std::span(&ptr, 1), starts, 8, ids, {}});
  ASSERT_TRUE(step.ok());
  absl::Status s = step->WaitArrived(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("shard "), std::string::npos) << s;
}

TEST(Client, AWorkerWithOtherRowsUnderTheSameNameAndVersionGetsNone) {
  // Another table of the same name, version and geometry, other rows.
  testing::TempDir other;
  ASSERT_TRUE(testing::MakeSmallTable(other.Sub("table"), 300, /*seed=*/99).ok());
  Deployment d = StartDeployment(0);
  ClientOptions o = BaseOptions(d.addrs);
  o.table_dir = other.Sub("table");
  auto client = EngramClient::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto seq = (*client)->NewSequence();
  Sequence* ptr = seq.get();
  std::vector<int64_t> ids(16, 7);
  std::vector<int64_t> starts = {0};
  absl::StatusOr<Step> step = (*client)->Prefetch({std::span(&ptr, 1), starts, 16, ids, {}});
  ASSERT_TRUE(step.ok());
  const absl::Status s = step->WaitArrived(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("source checksum"), std::string::npos) << s;
}

TEST(Client, ConcurrentStepsFromFourThreads) {
  Deployment d = StartDeployment(34 << 10);
  const auto& addrs = d.addrs;
  auto client = EngramClient::Create(BaseOptions(addrs));
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { RunGeneration(**client, 3, 20, 5, 100 + t); });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ((*client)->stats().steps, 24u);
}

// A Wait for a later layer while an RPC callback is sending it (layers are
// pipelined) must wait for that layer's rows, not read a half-built arena.
TEST(Client, WaitingForTheLastLayerFirstGetsItsRows) {
  Deployment d = StartDeployment(64 << 20);
  const auto& addrs = d.addrs;
  auto client = EngramClient::Create(BaseOptions(addrs));
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] { RunGeneration(**client, 2, 8, 60, 200 + t, t == 0); });
  }
  for (auto& th : threads) th.join();
}

TEST(Client, LocalCacheServesHotRowsWithoutTheNetwork) {
  Deployment d = StartDeployment(0);
  const auto& addrs = d.addrs;
  ClientOptions o;
  for (int s = 0; s < kShards; ++s) {
    o.worker_cache_profiles.push_back(Cluster::Get().shard_dir(s) + "/hot_profile.bin");
  }
  ClientOptions base = BaseOptions(addrs);
  base.worker_cache_bytes = 200 * 66;
  base.worker_cache_profiles = o.worker_cache_profiles;
  auto client = EngramClient::Create(base);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->worker_cache_bytes(), 200u * 66);
  RunGeneration(**client, 4, 30, 4, 21);
  EXPECT_GT((*client)->stats().local_hits, 0u);
}

TEST(Client, CountersArePublishedThroughTheRegistry) {
  Deployment d = StartDeployment(0);
  const auto& addrs = d.addrs;
  ClientOptions o = BaseOptions(addrs);
  o.metrics_registry = std::make_shared<prometheus::Registry>();
  auto client = EngramClient::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  RunGeneration(**client, 2, 10, 2, 31);
  const ClientStats st = (*client)->stats();
  auto samples = [&] {
    return scrape::ParseSamples(
        prometheus::TextSerializer().Serialize(o.metrics_registry->Collect()));
  };
  // Published within a refresh period (1 s) while the client lives.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (scrape::SumSamples(samples(), "engram_client_rpcs_total") < static_cast<double>(st.rpcs) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  // And brought up to date once more when the client goes.
  client->reset();
  const std::vector<scrape::Sample> s = samples();
  EXPECT_EQ(scrape::SumSamples(s, "engram_client_steps_total"), 3.0);
  EXPECT_EQ(scrape::SumSamples(s, "engram_client_ids_total"), static_cast<double>(st.ids));
  EXPECT_EQ(scrape::SumSamples(s, "engram_client_rpcs_total"), static_cast<double>(st.rpcs));
  EXPECT_EQ(scrape::SumSamples(s, "engram_client_received_bytes_total"),
            static_cast<double>(st.bytes_received));
  double shard_rpcs = 0;
  for (uint64_t n : st.shard_rpcs) shard_rpcs += static_cast<double>(n);
  EXPECT_EQ(scrape::SumSamples(s, "engram_client_shard_rpcs_total"), shard_rpcs);
  EXPECT_GT(shard_rpcs, 0);

  // A registry holding one of the names with another type is refused with
  // a status (prometheus-cpp throws inside).
  ClientOptions clash = BaseOptions(addrs);
  clash.metrics_registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge().Name("engram_client_steps_total").Register(*clash.metrics_registry);
  auto refused = EngramClient::Create(clash);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

TEST(Client, BadInputIsRefusedAndChangesNothing) {
  std::vector<std::vector<std::string>> addrs(kShards, {"127.0.0.1:1"});
  auto client = EngramClient::Create(BaseOptions(addrs));
  ASSERT_TRUE(client.ok()) << client.status();
  auto seq = (*client)->NewSequence();
  Sequence* ptr = seq.get();
  std::vector<int64_t> ids = {1, 2, (*client)->layout().vocab_size};
  std::vector<int64_t> starts = {0};
  absl::StatusOr<Step> step = (*client)->Prefetch({std::span(&ptr, 1), starts, 3, ids, {}});
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(seq->length(), 0);
  starts = {5};
  ids = {1, 2, 3};
  step = (*client)->Prefetch({std::span(&ptr, 1), starts, 3, ids, {}});
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);

  ClientOptions o = BaseOptions({{"127.0.0.1:1"}});
  EXPECT_EQ(EngramClient::Create(o).status().code(), absl::StatusCode::kInvalidArgument);

  o = BaseOptions(addrs);
  o.http2_bdp_probe = false;
  o.http2_window_bytes = 4096;
  absl::StatusOr<std::unique_ptr<EngramClient>> small = EngramClient::Create(o);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("http2_window_bytes"), std::string::npos)
      << small.status();
}

// LookupInto: rows by global id, in any order and with repeats, equal the
// table's bytes; the layer's duplicates are fetched once; bad arguments are
// InvalidArgument before any RPC. Step::Arrived turns true without
// blocking once the layer's rows are in.
TEST(ClientLookupInto, RowsByIdEqualTheTableFile) {
  Deployment d = StartDeployment(34 << 10);
  auto client = EngramClient::Create(BaseOptions(d.addrs));
  ASSERT_TRUE(client.ok()) << client.status();
  EngramClient& c = **client;
  const TableReader& reader = Cluster::Get().reader();
  std::mt19937_64 rng(17);
  for (int layer = 0; layer < c.n_layers(); ++layer) {
    const uint64_t rows = reader.manifest().layers[layer].rows;
    std::vector<RowId> ids(500);
    for (RowId& id : ids) id = rng() % rows;
    for (size_t i = 0; i < 50; ++i) ids[450 + i] = ids[i];  // repeats
    const size_t rb = c.OutputRowBytes(layer, RowFormat::kRaw);
    std::vector<uint8_t> out(ids.size() * rb), want(rb);
    const ClientStats before = c.stats();
    ASSERT_TRUE(c.LookupInto(layer, ids, RowFormat::kRaw, out).ok());
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_TRUE(reader.ReadRow(layer, ids[i], want.data()).ok());
      ASSERT_EQ(0, std::memcmp(out.data() + i * rb, want.data(), rb)) << layer << "/" << i;
    }
    const ClientStats after = c.stats();
    EXPECT_EQ(after.ids - before.ids, ids.size());
    EXPECT_LE(after.unique_rows - before.unique_rows, ids.size() - 50);
    EXPECT_EQ(after.steps, before.steps);
  }
  std::vector<uint8_t> out(c.OutputRowBytes(0, RowFormat::kRaw));
  const RowId past = reader.manifest().layers[0].rows;
  EXPECT_EQ(c.LookupInto(0, std::vector<RowId>{past}, RowFormat::kRaw, out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.LookupInto(c.n_layers(), std::vector<RowId>{0}, RowFormat::kRaw, out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.LookupInto(0, std::vector<RowId>{0, 1}, RowFormat::kRaw, out).code(),
            absl::StatusCode::kInvalidArgument);

  std::unique_ptr<Sequence> seq = c.NewSequence();
  Sequence* seqs[] = {seq.get()};
  const std::vector<int64_t> tokens = {3, 1, 4, 1, 5}, starts = {0};
  StepInput in;
  in.sequences = seqs;
  in.start_positions = starts;
  in.tokens_per_sequence = 5;
  in.token_ids = tokens;
  auto step = c.Prefetch(in);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_TRUE(step->WaitArrived(0).ok());
  absl::StatusOr<bool> arrived = step->Arrived(0);
  ASSERT_TRUE(arrived.ok()) << arrived.status();
  EXPECT_TRUE(*arrived);
  EXPECT_EQ(step->Arrived(c.n_layers()).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace engram
