// The client against a row stream that misbehaves mid-reply: a replica
// frozen half-way through a response, and one whose frame claims another
// size than the call's answer. A step must fail within its deadline (never
// hang the worker, never allocate what a bad header claims), naming the
// shard. The replica's Info comes from a real shard server, which
// advertises the misbehaving stream's port.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/engram_client.h"
#include "common/net/socket_io.h"
#include "gtest/gtest.h"
#include "proto/stream_wire.h"
#include "proto/wire.h"
#include "service/shard_server.h"
#include "service/testing/server_test_util.h"

namespace engram {
namespace {

enum class Misbehaviour { kFreezeMidReply, kWrongSize };

// A row stream server on 127.0.0.1 that greets, reads one request, and
// then misbehaves; it holds every connection open until destroyed.
class BadStream {
 public:
  BadStream(Misbehaviour how, uint32_t row_bytes) : how_(how), row_bytes_(row_bytes) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(listen_fd_, 8);
    socklen_t len = sizeof(a);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~BadStream() {
    stop_.store(true);
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    for (int fd : fds_) ::close(fd);
    ::close(listen_fd_);
  }
  int port() const { return port_; }
  int requests() const { return requests_.load(); }

 private:
  void Run() {
    while (!stop_.load()) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      fds_.push_back(fd);
      uint8_t hello[stream::kHelloBytes];
      if (!ReadFull(fd, hello, sizeof(hello))) continue;
      stream::EncodeHello(stream::kVersion, hello);
      iovec iov = {hello, sizeof(hello)};
      WriteFull(fd, &iov, 1);
      uint8_t head[stream::kHeaderBytes];
      if (!ReadFull(fd, head, sizeof(head))) continue;
      const stream::FrameHeader h = stream::DecodeHeader(head);
      std::vector<uint8_t> payload(h.payload_bytes);
      if (!ReadFull(fd, payload.data(), payload.size())) continue;
      ++requests_;
      wire::LookupQuery q;
      if (!wire::ParseLookupRequest(payload, 1 << 20, &q).ok()) continue;
      const size_t size = wire::LookupResponseSize(q.version, q.ids.size() * row_bytes_);
      stream::FrameHeader reply{h.id, 0, how_ == Misbehaviour::kWrongSize ? (1ull << 40) : size};
      stream::EncodeHeader(reply, head);
      std::vector<uint8_t> half(size / 2, 0);
      iovec out[2] = {{head, sizeof(head)}, {half.data(), half.size()}};
      WriteFull(fd, out, how_ == Misbehaviour::kWrongSize ? 1 : 2);
      // Then nothing: the connection stays open.
    }
  }

  const Misbehaviour how_;
  const uint32_t row_bytes_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::vector<int> fds_;
};

class StreamLivenessTest : public ::testing::TestWithParam<Misbehaviour> {};

TEST_P(StreamLivenessTest, StepFailsWithinItsDeadline) {
  testing::TempDir root("stream_liveness_test");
  absl::StatusOr<testing::SmallShardedTable> t = testing::MakeSmallShardedTable(
      root.Sub("table"), 1, [&](uint32_t) { return root.Sub("shard"); });
  ASSERT_TRUE(t.ok()) << t.status();
  BadStream bad(GetParam(), t->map.row_bytes[0]);
  ShardServerOptions o;
  o.db_dir = root.Sub("shard");
  o.listen = "127.0.0.1:0";
  o.stream_advertise_port = bad.port();  // Info sends the client to the bad stream
  absl::StatusOr<std::unique_ptr<ShardServer>> server = ShardServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();

  ClientOptions co;
  co.table_dir = root.Sub("table");
  co.shard_map_path = root.Sub("shard/shard_map.json");
  co.shard_addresses = {{absl::StrCat("127.0.0.1:", (*server)->port())}};
  co.rpc_deadline = absl::Milliseconds(500);
  absl::StatusOr<std::unique_ptr<EngramClient>> client = EngramClient::Create(co);
  ASSERT_TRUE(client.ok()) << client.status();
  std::unique_ptr<Sequence> seq = (*client)->NewSequence();
  Sequence* ptr = seq.get();
  const std::vector<int64_t> tokens = {5, 6, 7, 8}, start = {0};
  const absl::Time begin = absl::Now();
  absl::StatusOr<Step> step = (*client)->Prefetch({std::span(&ptr, 1), start, 4, tokens, {}});
  ASSERT_TRUE(step.ok()) << step.status();
  std::vector<uint8_t> out(4 * (*client)->n_cols() * t->map.row_bytes[0]);
  const absl::Status s = step->Wait(0, RowFormat::kRaw, out);
  const absl::Duration took = absl::Now() - begin;
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("127.0.0.1:", (*server)->port())))
      << "the failure names the shard's replica: " << s;
  EXPECT_LT(took, absl::Seconds(5)) << "a misbehaving stream held the step for " << took;
  EXPECT_GE(bad.requests(), 1);
}

INSTANTIATE_TEST_SUITE_P(Misbehaviours, StreamLivenessTest,
                         ::testing::Values(Misbehaviour::kFreezeMidReply,
                                           Misbehaviour::kWrongSize));

}  // namespace
}  // namespace engram
