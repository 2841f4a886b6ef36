// engram-shard-bench: Lookup throughput of a real ShardServer (every row in
// the hot tier) against a bare TCP exchange of the same request and
// response sizes on the same machine, both over 127.0.0.1.
//
//   engram-shard-bench [--rows 256,1024,4096,16384] [--streams 1]
//                      [--seconds 2]
//
// The TCP baseline is the floor of any RPC: a length-prefixed request is
// read and a response of the Lookup's size is written from a ready buffer;
// the client reads it into its row buffer. The gRPC side is what a worker
// does: encode the request, call Lookup (raw ByteBuffers), decode the rows
// into its row buffer with the wire codec. Each stream is its own
// connection on both sides. Prints one line per batch size.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/table_gen.h"
#include "engram/v1/engram_store.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "service/shard_server.h"
#include "service/testing/server_test_util.h"
#include "service/wire.h"
#include "shard/importer.h"

ABSL_FLAG(std::string, rows, "256,1024,4096,16384", "rows per request");
ABSL_FLAG(int, streams, 1, "concurrent connections");
ABSL_FLAG(double, seconds, 2.0, "duration of each measurement");
ABSL_FLAG(int64_t, vocab, 2000, "engram_vocab_size of the synthetic v41 table");
ABSL_FLAG(std::string, client_args, "",
          "extra integer channel args for the client, name=value,...");

namespace engram {
namespace {

bool ReadFull(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= r;
  }
  return true;
}

bool WriteFull(int fd, const void* data, size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= w;
  }
  return true;
}

using Call = std::function<bool()>;

// Runs `streams` closed loops of `call` for `seconds`; response MB/s.
double Measure(int streams, double seconds, size_t response_bytes,
               const std::function<Call()>& make_call) {
  std::atomic<uint64_t> calls{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int s = 0; s < streams; ++s) {
    threads.emplace_back([&] {
      Call call = make_call();
      for (int i = 0; i < 3; ++i) call();  // warm up
      while (!stop.load(std::memory_order_relaxed)) {
        if (!call()) std::abort();
        calls.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(200));
  const uint64_t start_calls = calls.load();
  const absl::Time start = absl::Now();
  absl::SleepFor(absl::Seconds(seconds));
  const uint64_t n = calls.load() - start_calls;
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  stop = true;
  for (std::thread& t : threads) t.join();
  return static_cast<double>(n) * response_bytes / elapsed / 1e6;
}

// A TCP server answering every length-prefixed request with `response`.
class TcpEcho {
 public:
  explicit TcpEcho(size_t response_bytes) : response_(response_bytes, 'r') {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listen_fd_, 64);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] {
      int fd;
      while ((fd = ::accept(listen_fd_, nullptr, nullptr)) >= 0) {
        handlers_.emplace_back([this, fd] { Serve(fd); });
      }
    });
  }
  ~TcpEcho() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    acceptor_.join();
    for (std::thread& t : handlers_) t.join();
  }
  int port() const { return port_; }

 private:
  void Serve(int fd) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::string request;
    uint64_t n;
    while (ReadFull(fd, &n, sizeof(n))) {
      request.resize(n);
      if (!ReadFull(fd, request.data(), n)) break;
      const uint64_t size = response_.size();
      if (!WriteFull(fd, &size, sizeof(size)) ||
          !WriteFull(fd, response_.data(), size)) {
        break;
      }
    }
    ::close(fd);
  }

  std::string response_;
  int listen_fd_;
  int port_;
  std::thread acceptor_;
  std::vector<std::thread> handlers_;
};

constexpr int kRepetitions = 3;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::shared_ptr<grpc::Channel> BenchChannel(int port) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own connection
  for (absl::string_view kv : absl::StrSplit(absl::GetFlag(FLAGS_client_args),
                                             ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, '=');
    int v = 0;
    if (!absl::SimpleAtoi(p.second, &v)) std::abort();
    args.SetInt(p.first, v);
  }
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

// What a worker does with the wire codec: raw request, rows decoded once
// into its buffer.
Call RawLookupCall(int port, const std::vector<uint64_t>& ids,
                   size_t rows_size) {
  auto channel = BenchChannel(port);
  const wire::LayerRowIds layer{0, ids};
  auto request = std::make_shared<grpc::Slice>(
      wire::EncodeLookupRequest("", 0, {&layer, 1}));
  auto rows = std::make_shared<std::string>(rows_size, '\0');
  return [channel, request, rows] {
    grpc::ClientContext context;
    grpc::ByteBuffer in(request.get(), 1), out;
    const grpc::internal::RpcMethod method(
        "/engram.v1.EngramStore/Lookup", grpc::internal::RpcMethod::NORMAL_RPC);
    const grpc::Status s = grpc::internal::BlockingUnaryCall(
        channel.get(), method, &context, in, &out);
    return s.ok() &&
           wire::DecodeLookupResponse(
               out, {reinterpret_cast<uint8_t*>(rows->data()), rows->size()})
               .ok();
  };
}

// The generated stub: protobuf request and response, rows copied out of
// the parsed message into the worker's buffer.
Call StubLookupCall(int port, const std::vector<uint64_t>& ids) {
  auto stub = std::shared_ptr<v1::EngramStore::Stub>(
      v1::EngramStore::NewStub(BenchChannel(port)));
  auto request = std::make_shared<v1::LookupRequest>();
  v1::LayerRows* layer = request->add_layers();
  for (uint64_t id : ids) layer->add_row_ids(id);
  auto rows = std::make_shared<std::string>();
  return [stub, request, rows] {
    grpc::ClientContext context;
    v1::LookupResponse response;
    if (!stub->Lookup(&context, *request, &response).ok()) return false;
    rows->assign(response.rows());
    return true;
  };
}

// The floor: a length-prefixed exchange of the same sizes over one socket.
Call TcpCall(int port, size_t request_size, size_t rows_size) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::abort();
  }
  auto conn = std::shared_ptr<int>(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  auto request = std::make_shared<std::string>(request_size, 'q');
  auto rows = std::make_shared<std::string>(rows_size, '\0');
  return [conn, request, rows] {
    const uint64_t n = request->size();
    uint64_t size;
    return WriteFull(*conn, &n, sizeof(n)) &&
           WriteFull(*conn, request->data(), n) &&
           ReadFull(*conn, &size, sizeof(size)) && size == rows->size() &&
           ReadFull(*conn, rows->data(), size);
  };
}

int Main() {
  testing::TempDir dir("engram_shard_bench");
  GenTableOptions gen;
  gen.out_dir = dir.path() + "/table";
  gen.preset = "v41";  // 264-byte rows
  gen.engram_vocab_size = absl::GetFlag(FLAGS_vocab);
  if (absl::Status s = GenerateTable(gen, nullptr); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  ImportOptions import;
  import.table_dir = gen.out_dir;
  import.n_shards = 1;
  import.out_dir = dir.path() + "/shard";
  auto imported = ImportShard(import, nullptr);
  if (!imported.ok()) {
    std::fprintf(stderr, "%s\n", imported.status().ToString().c_str());
    return 1;
  }
  ShardServerOptions options;
  options.db_dir = import.out_dir;
  // Exactly the shard: every row pinned.
  for (uint32_t l = 0; l < imported->map.layer_rows.size(); ++l) {
    options.ram_budget_bytes +=
        imported->map.RowsOnShard(l, 0) * imported->map.row_bytes[l];
  }
  auto server = ShardServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  const ShardMap& map = (*server)->shard_map();
  const uint32_t row_bytes = map.row_bytes[0];
  const int streams = absl::GetFlag(FLAGS_streams);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int port = (*server)->port();
  std::printf(
      "rows/request  response_bytes  tcp_MB/s  raw_MB/s  proto_MB/s  raw/tcp  "
      "proto/tcp  (%d streams, median of %d)\n",
      streams, kRepetitions);
  for (absl::string_view text :
       absl::StrSplit(absl::GetFlag(FLAGS_rows), ',')) {
    size_t n_rows;
    if (!absl::SimpleAtoi(text, &n_rows)) return 2;
    std::mt19937_64 rng(1);
    std::vector<uint64_t> ids(n_rows);
    for (uint64_t& id : ids) id = rng() % map.layer_rows[0];
    const size_t rows_size = n_rows * row_bytes;
    TcpEcho echo(rows_size);
    // Alternate the three so that load from elsewhere hits them alike.
    std::vector<double> tcp, raw, proto;
    for (int rep = 0; rep < kRepetitions; ++rep) {
      tcp.push_back(Measure(streams, seconds, rows_size, [&] {
        return TcpCall(echo.port(), ids.size() * 3, rows_size);
      }));
      raw.push_back(Measure(streams, seconds, rows_size, [&] {
        return RawLookupCall(port, ids, rows_size);
      }));
      proto.push_back(Measure(streams, seconds, rows_size,
                              [&] { return StubLookupCall(port, ids); }));
    }
    const double t = Median(tcp), r = Median(raw), p = Median(proto);
    std::printf("%12zu  %14zu  %8.0f  %8.0f  %10.0f  %7.2f  %9.2f\n", n_rows,
                rows_size, t, r, p, r / t, p / t);
    std::fflush(stdout);
  }
  (*server)->Shutdown(absl::Seconds(1));
  return 0;
}

}  // namespace
}  // namespace engram

int main(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(
      absl::OnDeadlockCycle::kIgnore);  // as engram-shard
  absl::ParseCommandLine(argc, argv);
  return engram::Main();
}
