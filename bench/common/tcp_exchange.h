// A bare TCP exchange of Engram rows on loopback: the ceiling that
// engram-bench-shard holds a shard server's hot path against.
//
// One connection, TCP_NODELAY on both ends. A request is a header
// (u32 n_layers, then u32 ids per layer, host order) followed by the 8-byte
// ids of every layer; the server gathers each id's row from one in-RAM array
// with one memcpy per row (as a real server would) into one reused buffer
// and writes it back with one write loop; the response is the rows only, in
// request order. No framing, validation or metrics beyond that: this is
// what the hardware and the kernel allow, not a protocol.
#ifndef ENGRAM_BENCH_COMMON_TCP_EXCHANGE_H_
#define ENGRAM_BENCH_COMMON_TCP_EXCHANGE_H_

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <ctime>
#include <memory>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace engram::bench {

struct TcpRowServerOptions {
  // The rows: layer l's row id is at rows + (layer_base[l] + id) * row_bytes.
  // Not owned; must outlive the server.
  const uint8_t* rows = nullptr;
  uint32_t row_bytes = 0;
  std::vector<uint64_t> layer_base;
  std::vector<uint64_t> layer_rows;  // an id >= this drops the connection
};

// What a TcpRowServer has done so far.
struct TcpRowServerStats {
  uint64_t requests = 0;
  double handler_seconds = 0;  // from the last id read to the gather's end
  double cpu_seconds = 0;      // of the serving thread, user + system
};

// Listens on 127.0.0.1 (a free port) and serves one connection at a time on
// one thread. port() and stats() are thread-safe; the destructor closes the
// sockets and joins the thread.
class TcpRowServer {
 public:
  static absl::StatusOr<std::unique_ptr<TcpRowServer>> Start(TcpRowServerOptions options);
  ~TcpRowServer();
  TcpRowServer(const TcpRowServer&) = delete;
  TcpRowServer& operator=(const TcpRowServer&) = delete;

  int port() const { return port_; }
  TcpRowServerStats stats() const;

 private:
  explicit TcpRowServer(TcpRowServerOptions options) : options_(std::move(options)) {}
  void Serve();
  // Serves requests on `fd` until the peer closes it or sends a bad header.
  void ServeConnection(int fd);

  const TcpRowServerOptions options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> handler_nanos_{0};
  absl::Mutex mu_;
  int conn_fd_ ABSL_GUARDED_BY(mu_) = -1;
  std::thread thread_;
  clockid_t cpu_clock_{};
};

// The client end: one connection. Not thread-safe; one per thread.
class TcpRowClient {
 public:
  static absl::StatusOr<std::unique_ptr<TcpRowClient>> Connect(int port);
  ~TcpRowClient();
  TcpRowClient(const TcpRowClient&) = delete;
  TcpRowClient& operator=(const TcpRowClient&) = delete;

  // Sends layer l's ids as layer l (at most 64 layers) and reads every row
  // into rows_out, whose size must be the rows' total size.
  absl::Status Exchange(std::span<const std::span<const uint64_t>> layers,
                        std::span<uint8_t> rows_out);

 private:
  explicit TcpRowClient(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_COMMON_TCP_EXCHANGE_H_
