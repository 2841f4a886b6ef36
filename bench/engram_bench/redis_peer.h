// Redis as a peer of engram-store in engram-bench: a redis-server process
// of its own on 127.0.0.1 (a free port, persistence off) and a hiredis
// connection that loads a table's rows as keys with pipelined SETs and
// fetches batches of them with pipelined MGETs.
//
// Keys are binary, 8 bytes: (layer << 48 | row) big-endian, the key the
// shard's RocksDB uses; values are the stored row bytes. On the wire a key
// costs 14 bytes ("$8\r\n" key "\r\n") and a row 6 + row_bytes + 2.
#ifndef ENGRAM_BENCH_ENGRAM_BENCH_REDIS_PEER_H_
#define ENGRAM_BENCH_ENGRAM_BENCH_REDIS_PEER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/testing/child_process.h"

struct redisContext;

namespace engram::bench {

struct RedisServerOptions {
  std::string binary = "/usr/bin/redis-server";
  std::string work_dir;  // its --dir and redis.log. REQUIRED.
  absl::Duration start_timeout = absl::Seconds(20);
};

// One redis-server started with --bind 127.0.0.1 --port P --save ""
// --appendonly no. Start() returns once it answers PING. The process dies
// with the thread that started it (ChildOptions::die_with_parent); the
// destructor sends SIGTERM and reaps it (SIGKILL after 10 s). Not
// thread-safe.
class RedisServer {
 public:
  // NotFound without the binary; Unavailable (with the log's last line)
  // when it does not answer within start_timeout.
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(const RedisServerOptions& options);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return child_->pid(); }

 private:
  RedisServer(std::unique_ptr<testing::ChildProcess> child, int port)
      : child_(std::move(child)), port_(port) {}
  std::unique_ptr<testing::ChildProcess> child_;
  int port_;
};

// One MGET: the rows of `ids` of `layer`, written consecutively to `dst`
// (ids.size() * row_bytes bytes).
struct MgetBatch {
  uint32_t layer = 0;
  std::span<const uint64_t> ids;
  uint8_t* dst = nullptr;
};

// One connection to a redis-server (TCP_NODELAY, 60 s socket timeouts).
// Not thread-safe; one per thread.
class RedisRowClient {
 public:
  static absl::StatusOr<std::unique_ptr<RedisRowClient>> Connect(int port);
  ~RedisRowClient();
  RedisRowClient(const RedisRowClient&) = delete;
  RedisRowClient& operator=(const RedisRowClient&) = delete;

  // SETs rows [0, n) of `layer` (row_bytes each, consecutive in `rows`),
  // `pipeline` commands in flight at a time.
  absl::Status LoadLayer(uint32_t layer, const uint8_t* rows, uint64_t n, uint32_t row_bytes,
                         int pipeline = 4096);

  // Sends every batch as one MGET (pipelined: all are written before the
  // first reply is read), then reads the replies in order into their
  // destinations. DataLoss naming the row when a key is missing or a value
  // is not row_bytes long; Unavailable when the connection fails.
  absl::Status Mget(std::span<const MgetBatch> batches, uint32_t row_bytes);

 private:
  explicit RedisRowClient(redisContext* context) : context_(context) {}
  redisContext* context_;
  // Reused argument arrays of the MGET being formatted.
  std::vector<uint8_t> keys_;
  std::vector<const char*> argv_;
  std::vector<size_t> argv_len_;
};

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_ENGRAM_BENCH_REDIS_PEER_H_
