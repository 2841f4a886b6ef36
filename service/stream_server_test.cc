// The row stream end to end: a real shard server on 127.0.0.1, a raw TCP
// client speaking the framing of proto/stream_wire.h, every row compared
// with the table file, and every kind of bad input answered or refused
// without harm to the connection's other requests.
#include "service/stream_server.h"

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/format/table.h"
#include "common/net/socket_io.h"
#include "engram/v1/engram_store.grpc.pb.h"
#include "gtest/gtest.h"
#include "proto/stream_wire.h"
#include "proto/wire.h"
#include "service/shard_server.h"
#include "service/testing/server_test_util.h"

namespace engram {
namespace {

using ::engram::testing::ExpectedRows;
using ::engram::testing::RandomOwnedIds;

class StreamServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new testing::TempDir("stream_server_test");
    const std::string table_dir = root_->path() + "/table";
    absl::StatusOr<testing::SmallShardedTable> t = testing::MakeSmallShardedTable(
        table_dir, 1, [](uint32_t) { return root_->path() + "/shard"; });
    ASSERT_TRUE(t.ok()) << t.status();
    map_ = new ShardMap(std::move(t->map));
    table_ = t->table.release();
  }
  static void TearDownTestSuite() {
    delete table_;
    delete map_;
    delete root_;
  }

  void SetUp() override { StartServer(absl::Seconds(10)); }

  void StartServer(absl::Duration write_timeout, int reader_threads = 32,
                   uint64_t ram_budget = 64 << 10) {
    ShardServerOptions o;
    o.listen = "127.0.0.1:0";
    o.stream_write_timeout = write_timeout;
    o.db_dir = root_->path() + "/shard";
    o.reader_threads = reader_threads;
    o.ram_budget_bytes = ram_budget;  // by default some rows hot, the rest from RocksDB
    o.metrics_port = 0;
    o.max_rows_per_request = 4096;
    o.scrub_disk_bytes_per_second = 0;  // disk reads are the requests' alone
    auto server = ShardServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->stream_port(), 0);
  }

  // A connection that has said hello.
  int Connect() {
    absl::StatusOr<int> fd = ConnectTcp("127.0.0.1", server_->stream_port(), absl::Seconds(5));
    EXPECT_TRUE(fd.ok()) << fd.status();
    if (!fd.ok()) return -1;
    uint8_t hello[stream::kHelloBytes];
    stream::EncodeHello(stream::kVersion, hello);
    Send(*fd, hello, sizeof(hello));
    EXPECT_TRUE(ReadFull(*fd, hello, sizeof(hello)));
    absl::StatusOr<uint32_t> v = stream::DecodeHello(hello);
    EXPECT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, stream::kVersion);
    return *fd;
  }
  static void Send(int fd, const void* bytes, size_t n) {
    iovec iov = {const_cast<void*>(bytes), n};
    ASSERT_TRUE(WriteFull(fd, &iov, 1));
  }
  static void SendFrame(int fd, uint32_t id, uint32_t kind, const std::string& payload) {
    uint8_t head[stream::kHeaderBytes];
    stream::EncodeHeader({id, kind, payload.size()}, head);
    Send(fd, head, sizeof(head));
    if (!payload.empty()) Send(fd, payload.data(), payload.size());
  }
  // A kLookupTimed frame: the request after its timeout.
  static void SendTimedFrame(int fd, uint32_t id, absl::Duration timeout,
                             const std::string& request) {
    uint8_t timeout_bytes[stream::kTimeoutBytes];
    stream::EncodeTimeoutMicros(static_cast<uint64_t>(absl::ToInt64Microseconds(timeout)),
                                timeout_bytes);
    SendFrame(
        fd, id, stream::kLookupTimed,
        std::string(reinterpret_cast<const char*>(timeout_bytes), sizeof(timeout_bytes)) + request);
  }
  static std::string LookupBytes(uint32_t layer, const std::vector<uint64_t>& ids,
                                 uint64_t version = testing::kSmallTableVersion) {
    const wire::LayerRowIds l{layer, ids};
    grpc::Slice s = wire::EncodeLookupRequest(testing::kSmallTableName, version, {&l, 1});
    return std::string(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  struct Reply {
    uint32_t id = 0;
    uint32_t code = 0;
    std::string payload;
  };
  static Reply ReadReply(int fd) {
    Reply r;
    uint8_t head[stream::kHeaderBytes];
    EXPECT_TRUE(ReadFull(fd, head, sizeof(head)));
    const stream::FrameHeader h = stream::DecodeHeader(head);
    r.id = h.id;
    r.code = h.word;
    r.payload.resize(h.payload_bytes);
    EXPECT_TRUE(ReadFull(fd, r.payload.data(), r.payload.size()));
    return r;
  }
  // The rows of an OK reply.
  static std::string Rows(const Reply& r, size_t rows_bytes) {
    std::string rows(rows_bytes, '\0');
    absl::StatusOr<uint64_t> v = wire::DecodeLookupResponse(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(r.payload.data()),
                                 r.payload.size()),
        std::span<uint8_t>(reinterpret_cast<uint8_t*>(rows.data()), rows.size()));
    EXPECT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, testing::kSmallTableVersion);
    return rows;
  }
  // The server closed the connection (a reset when it left bytes unread).
  static bool Closed(int fd) {
    char c;
    const ssize_t r = ::recv(fd, &c, 1, 0);
    return r == 0 || (r < 0 && errno == ECONNRESET);
  }

  static testing::TempDir* root_;
  static ShardMap* map_;
  static TableReader* table_;
  std::unique_ptr<ShardServer> server_;
};

testing::TempDir* StreamServerTest::root_ = nullptr;
ShardMap* StreamServerTest::map_ = nullptr;
TableReader* StreamServerTest::table_ = nullptr;

TEST_F(StreamServerTest, InfoAdvertisesTheStreamPortAndTheSourceChecksum) {
  auto stub = v1::EngramStore::NewStub(testing::LocalChannel(server_->port()));
  grpc::ClientContext context;
  v1::InfoResponse info;
  ASSERT_TRUE(stub->Info(&context, v1::InfoRequest(), &info).ok());
  EXPECT_EQ(info.stream_port(), static_cast<uint32_t>(server_->stream_port()));
  EXPECT_EQ(info.source_checksum(), table_->manifest().source_checksum());
}

TEST_F(StreamServerTest, PipelinedLookupsReturnTheTableRowsByRequestId) {
  const int fd = Connect();
  ASSERT_GE(fd, 0);
  std::mt19937_64 rng(3);
  std::vector<std::vector<uint64_t>> asked;
  for (uint32_t i = 0; i < 6; ++i) {
    asked.push_back(RandomOwnedIds(*map_, i % 2, 0, 500 + 300 * i, rng));
    SendFrame(fd, 100 + i, stream::kLookup, LookupBytes(i % 2, asked.back()));
  }
  std::vector<bool> seen(asked.size(), false);
  for (size_t k = 0; k < asked.size(); ++k) {
    const Reply r = ReadReply(fd);
    ASSERT_EQ(r.code, 0u) << r.payload;
    ASSERT_GE(r.id, 100u);
    const size_t i = r.id - 100;
    ASSERT_LT(i, asked.size());
    EXPECT_FALSE(seen[i]);
    seen[i] = true;
    const std::string want = ExpectedRows(*table_, i % 2, asked[i]);
    EXPECT_EQ(Rows(r, want.size()), want) << "request " << i;
  }
  const std::string page = *testing::HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_EQ(testing::MetricValue(page, "engram_shard_stream_connections"), 1.0);
  ::close(fd);
}

TEST_F(StreamServerTest, ABadRequestGetsItsStatusAndTheConnectionGoesOn) {
  const int fd = Connect();
  ASSERT_GE(fd, 0);
  const uint64_t rows = map_->layer_rows[0];
  SendFrame(fd, 1, stream::kLookup, LookupBytes(0, {rows + 5}));
  Reply r = ReadReply(fd);
  EXPECT_EQ(r.id, 1u);
  EXPECT_EQ(r.code, static_cast<uint32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(r.payload.find("out of range"), std::string::npos) << r.payload;

  SendFrame(fd, 2, stream::kLookup, LookupBytes(0, {1}, /*version=*/99));
  r = ReadReply(fd);
  EXPECT_EQ(r.code, static_cast<uint32_t>(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(r.payload.find("version 99"), std::string::npos) << r.payload;

  SendFrame(fd, 3, stream::kLookup, std::string("\xff\xff\xff", 3));  // not a LookupRequest
  r = ReadReply(fd);
  EXPECT_EQ(r.code, static_cast<uint32_t>(absl::StatusCode::kInvalidArgument)) << r.payload;

  std::vector<uint64_t> many(5000, 0);  // over max_rows_per_request
  SendFrame(fd, 4, stream::kLookup, LookupBytes(0, many));
  r = ReadReply(fd);
  EXPECT_EQ(r.code, static_cast<uint32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(r.payload.find("4096"), std::string::npos) << r.payload;

  // Rows of another table under the same name and version.
  const std::vector<uint64_t> ok = {0, 3, 3};
  const wire::LayerRowIds layer0{0, ok};
  grpc::Slice other =
      wire::EncodeLookupRequest(testing::kSmallTableName, testing::kSmallTableVersion, {&layer0, 1},
                                "xxh3_64:0000000000000000");
  SendFrame(fd, 6, stream::kLookup,
            std::string(reinterpret_cast<const char*>(other.begin()), other.size()));
  r = ReadReply(fd);
  EXPECT_EQ(r.code, static_cast<uint32_t>(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(r.payload.find("source checksum"), std::string::npos) << r.payload;

  // An entry without ids asks for nothing, but its layer must exist.
  const wire::LayerRowIds with_empty[2] = {{0, ok}, {7, {}}};
  grpc::Slice empty =
      wire::EncodeLookupRequest(testing::kSmallTableName, testing::kSmallTableVersion, with_empty);
  SendFrame(fd, 7, stream::kLookup,
            std::string(reinterpret_cast<const char*>(empty.begin()), empty.size()));
  r = ReadReply(fd);
  EXPECT_EQ(r.code, static_cast<uint32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(r.payload.find("layer 7 does not exist"), std::string::npos) << r.payload;

  // The right checksum, and entries without ids among the others.
  const wire::LayerRowIds mixed[4] = {{1, {}}, {0, ok}, {0, {}}, {1, {}}};
  grpc::Slice good =
      wire::EncodeLookupRequest(testing::kSmallTableName, testing::kSmallTableVersion, mixed,
                                table_->manifest().source_checksum());
  SendFrame(fd, 5, stream::kLookup,
            std::string(reinterpret_cast<const char*>(good.begin()), good.size()));
  r = ReadReply(fd);
  ASSERT_EQ(r.code, 0u) << r.payload;
  const std::string want = ExpectedRows(*table_, 0, ok);
  EXPECT_EQ(Rows(r, want.size()), want);
  ::close(fd);
}

TEST_F(StreamServerTest, AMalformedFrameIsAnsweredThenTheConnectionCloses) {
  int fd = Connect();
  ASSERT_GE(fd, 0);
  SendFrame(fd, 9, /*kind=*/77, "");
  Reply r = ReadReply(fd);
  EXPECT_EQ(r.id, 9u);
  EXPECT_EQ(r.code, static_cast<uint32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(r.payload.find("kind 77"), std::string::npos) << r.payload;
  EXPECT_TRUE(Closed(fd));
  ::close(fd);

  fd = Connect();
  ASSERT_GE(fd, 0);
  uint8_t head[stream::kHeaderBytes];
  stream::EncodeHeader({10, stream::kLookup, uint64_t{1} << 40}, head);  // a 1 TiB request
  Send(fd, head, sizeof(head));
  r = ReadReply(fd);
  EXPECT_EQ(r.code, static_cast<uint32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(r.payload.find("limit"), std::string::npos) << r.payload;
  EXPECT_TRUE(Closed(fd));
  ::close(fd);
}

TEST_F(StreamServerTest, HellosAreCheckedAndANewerClientIsAnsweredWithTheServersVersion) {
  absl::StatusOr<int> fd = ConnectTcp("127.0.0.1", server_->stream_port(), absl::Seconds(5));
  ASSERT_TRUE(fd.ok());
  Send(*fd, "GET / HTTP/1.1\r\n\r\n", 18);  // not our protocol
  EXPECT_TRUE(Closed(*fd));
  ::close(*fd);

  fd = ConnectTcp("127.0.0.1", server_->stream_port(), absl::Seconds(5));
  ASSERT_TRUE(fd.ok());
  uint8_t hello[stream::kHelloBytes];
  stream::EncodeHello(7, hello);
  Send(*fd, hello, sizeof(hello));
  ASSERT_TRUE(ReadFull(*fd, hello, sizeof(hello)));
  EXPECT_EQ(*stream::DecodeHello(hello), stream::kVersion);
  ::close(*fd);
}

TEST_F(StreamServerTest, ShutdownClosesOpenConnections) {
  const int fd = Connect();
  ASSERT_GE(fd, 0);
  const std::vector<uint64_t> ids = {1, 2};
  SendFrame(fd, 1, stream::kLookup, LookupBytes(1, ids));
  EXPECT_EQ(ReadReply(fd).code, 0u);
  server_->Shutdown(absl::Seconds(1));
  EXPECT_TRUE(Closed(fd));
  ::close(fd);
  absl::StatusOr<int> again = ConnectTcp("127.0.0.1", server_->stream_port(), absl::Seconds(1));
  EXPECT_FALSE(again.ok());
}

// A client that sends requests and never reads the responses is
// disconnected once the socket buffers are full for write_timeout, and the
// server still shuts down.
TEST_F(StreamServerTest, AClientThatStopsReadingIsDisconnected) {
  server_->Shutdown(absl::ZeroDuration());
  StartServer(absl::Milliseconds(200));
  const int fd = Connect();
  ASSERT_GE(fd, 0);
  std::mt19937_64 rng(9);
  const std::string request = LookupBytes(0, RandomOwnedIds(*map_, 0, 0, 4000, rng));
  // ~264 KB a response: 200 of them are more than the sockets hold.
  const absl::Time start = absl::Now();
  for (uint32_t i = 0; i < 200; ++i) {
    uint8_t head[stream::kHeaderBytes];
    stream::EncodeHeader({i, stream::kLookup, request.size()}, head);
    iovec iov[2] = {{head, sizeof(head)}, {const_cast<char*>(request.data()), request.size()}};
    if (!WriteFull(fd, iov, 2)) break;  // the server closed first
  }
  absl::SleepFor(absl::Seconds(1));  // well past the write timeout
  // What the sockets held, then the end: not 200 responses.
  timeval tv = absl::ToTimeval(absl::Seconds(5));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::vector<char> buf(1 << 20);
  size_t received = 0;
  ssize_t n;
  while ((n = ::recv(fd, buf.data(), buf.size(), 0)) > 0) received += static_cast<size_t>(n);
  EXPECT_TRUE(n == 0 || errno == ECONNRESET) << std::strerror(errno);
  EXPECT_LT(received, size_t{200} * 4000 * 66);
  server_->Shutdown(absl::Seconds(1));
  // Shutdown returned: the server did not hang on the silent peer (the bound
  // only turns a very long hang into a failure).
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  ::close(fd);
}

TEST(StreamWire, HelloAndHeaderRoundTripAndForeignBytesAreRefused) {
  uint8_t hello[stream::kHelloBytes];
  stream::EncodeHello(3, hello);
  EXPECT_EQ(*stream::DecodeHello(hello), 3u);
  hello[0] = 'X';
  absl::StatusOr<uint32_t> bad = stream::DecodeHello(hello);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("ENGRAMRS"), std::string::npos);
  uint8_t head[stream::kHeaderBytes];
  stream::EncodeHeader({0xdeadbeef, 14, (uint64_t{1} << 33) + 5}, head);
  const stream::FrameHeader h = stream::DecodeHeader(head);
  EXPECT_EQ(h.id, 0xdeadbeefu);
  EXPECT_EQ(h.word, 14u);
  EXPECT_EQ(h.payload_bytes, (uint64_t{1} << 33) + 5);
}

// A peer that sends Lookups and reads none of the answers never holds the
// RocksDB readers: another connection's disk rows come at once, and the
// stuck peer still gets every answer, in full, once it reads.
TEST_F(StreamServerTest, APeerThatDoesNotReadNeverHoldsTheDiskReaders) {
  server_.reset();
  StartServer(absl::Seconds(10), /*reader_threads=*/1, /*ram_budget=*/0);
  const std::vector<uint64_t> big = testing::AllOwnedIds(*map_, 1, 0);
  const std::vector<uint64_t> ids(big.begin(), big.begin() + std::min<size_t>(4000, big.size()));
  const std::string expected = testing::ExpectedRows(*table_, 1, ids);
  const int stuck = Connect();
  ASSERT_GE(stuck, 0);
  constexpr int kRequests = 60;  // ~16 MB of answers: far more than the sockets hold
  const std::string request = LookupBytes(1, ids);
  for (int i = 0; i < kRequests; ++i) SendFrame(stuck, 100 + i, stream::kLookup, request);
  absl::SleepFor(absl::Milliseconds(300));  // the one reader is done with them, or stuck

  const int other = Connect();
  ASSERT_GE(other, 0);
  const std::vector<uint64_t> few(ids.begin(), ids.begin() + 50);
  // A reader held by the stuck peer would never answer: the receive timeout
  // only turns that hang into a failure (it is no speed bound).
  const timeval hang{.tv_sec = 120, .tv_usec = 0};
  ::setsockopt(other, SOL_SOCKET, SO_RCVTIMEO, &hang, sizeof(hang));
  SendFrame(other, 1, stream::kLookup, LookupBytes(1, few));
  const Reply r = ReadReply(other);
  EXPECT_EQ(r.code, 0u) << "the disk reader waited on a peer that does not read";
  EXPECT_EQ(Rows(r, few.size() * map_->row_bytes[1]), testing::ExpectedRows(*table_, 1, few));
  // ... and it was answered while the stuck peer's answers were still
  // unread: not all of their bytes have reached its socket (the sockets
  // hold far less than the 60 answers).
  int queued = 0;
  ASSERT_EQ(::ioctl(stuck, FIONREAD, &queued), 0) << std::strerror(errno);
  EXPECT_LT(static_cast<size_t>(queued), kRequests * expected.size());

  std::vector<bool> seen(kRequests, false);
  for (int i = 0; i < kRequests; ++i) {
    const Reply a = ReadReply(stuck);
    ASSERT_EQ(a.code, 0u);
    ASSERT_GE(a.id, 100u);
    ASSERT_LT(a.id, 100u + kRequests);
    seen[a.id - 100] = true;
    ASSERT_EQ(Rows(a, ids.size() * map_->row_bytes[1]), expected) << "answer " << a.id;
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), kRequests);
  ::close(stuck);
  ::close(other);
}

TEST_F(StreamServerTest, ATimedRequestPastItsDeadlineReadsNoMoreRowsFromDisk) {
  server_.reset();
  StartServer(absl::Seconds(10), /*reader_threads=*/1, /*ram_budget=*/0);  // every row from disk
  const std::vector<uint64_t> all = testing::AllOwnedIds(*map_, 1, 0);
  const std::vector<uint64_t> ids(all.begin(), all.begin() + std::min<size_t>(4000, all.size()));
  auto metric = [&](const char* name) {
    absl::StatusOr<std::string> page = testing::HttpGet(server_->metrics_port(), "/metrics");
    EXPECT_TRUE(page.ok()) << page.status();
    return testing::MetricValue(page.ok() ? *page : "", name).value_or(-1);
  };
  const double keys_before = metric("engram_shard_rocksdb_multiget_keys");
  const int fd = Connect();
  ASSERT_GE(fd, 0);
  // Busy the one disk reader, then ask for as many rows with 1 ms to spare:
  // too little to read them all, so the reader stops where the deadline
  // finds it (or, on a loaded machine, the request is late before it is
  // served and reads nothing).
  constexpr int kBusy = 8;
  for (int i = 0; i < kBusy; ++i) SendFrame(fd, 1 + i, stream::kLookup, LookupBytes(1, ids));
  SendTimedFrame(fd, 100, absl::Milliseconds(1), LookupBytes(1, ids));
  const std::vector<uint64_t> few(ids.begin(), ids.begin() + 50);
  SendTimedFrame(fd, 200, absl::Seconds(30), LookupBytes(1, few));
  const std::string expected = ExpectedRows(*table_, 1, ids);
  for (int i = 0; i < kBusy + 2; ++i) {
    const Reply r = ReadReply(fd);
    if (r.id == 100) {
      EXPECT_EQ(r.code, static_cast<uint32_t>(absl::StatusCode::kDeadlineExceeded)) << r.payload;
      EXPECT_NE(r.payload.find("deadline passed"), std::string::npos) << r.payload;
    } else if (r.id == 200) {
      ASSERT_EQ(r.code, 0u) << r.payload;
      EXPECT_EQ(Rows(r, few.size() * map_->row_bytes[1]), ExpectedRows(*table_, 1, few));
    } else {
      ASSERT_EQ(r.code, 0u) << r.payload;
      EXPECT_EQ(Rows(r, expected.size()), expected) << "answer " << r.id;
    }
  }
  // Every row was read or skipped, and the late request's were not all read.
  const double read = metric("engram_shard_rocksdb_multiget_keys") - keys_before;
  const double skipped = metric("engram_shard_expired_rows");
  const double others = static_cast<double>(kBusy * ids.size() + few.size());
  EXPECT_LT(read, others + static_cast<double>(ids.size())) << "skipped " << skipped;
  EXPECT_EQ(read + skipped, others + (skipped > 0 ? static_cast<double>(ids.size()) : 0.0))
      << "read " << read << ", skipped " << skipped;
  ::close(fd);
}

}  // namespace
}  // namespace engram
