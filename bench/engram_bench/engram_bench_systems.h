// The systems engram-bench sets side by side, behind one interface: each
// hands out fetchers (FetchStep, bench_shard_measure.h) that deliver a
// stream's steps in the client library's output order (see
// engram_bench_workload.h), and reports what its server side did.
//
//   engram     engram-shard processes on 127.0.0.1 through EngramClient
//   redis      redis-server on 127.0.0.1, pipelined MGET through hiredis
//   rocksdb    RowStore::ReadRows (RocksDB MultiGet) on a shard directory,
//              in this process
//   memory     memcpy of every row from one in-RAM array (the ceiling of
//              assembling rows at all)
//   bare TCP   TcpRowServer / TcpRowClient (tcp_exchange.h)
//
// A networked system's fetcher with N connections spreads a step's layers
// over them round-robin (layer l on connection l % N) and uses them at
// once, as the client library does with ClientOptions::channels_per_replica
// = N: peers run one connection per thread, connection 0 on the caller's.
// Peers over a wire ask for each layer's distinct rows (what the client
// library sends) and scatter them into the output.
#ifndef ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_SYSTEMS_H_
#define ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_SYSTEMS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/common/bench_client_shards.h"
#include "bench/engram_bench/engram_bench_workload.h"
#include "bench/engram_bench/redis_peer.h"
#include "bench/shard/bench_shard_measure.h"
#include "bench/shard/bench_shard_workload.h"

namespace engram::bench {

// A system's cumulative server-side counters since it started; a
// measurement records the difference over its loops.
struct SystemCounters {
  double server_cpu_seconds = 0;  // of its server processes or threads
  double wire_bytes = 0;          // both directions, all connections
  double wire_rows = 0;           // rows that crossed the wire
  double disk_rows = 0;           // rows a shard server read from disk
  double disk_reads = 0;          // SST block reads of those rows
  // engram only: the client's RPCs and their latency (send to response),
  // and the servers' Lookups and their handler time (parse + gather, or
  // the disk reads; before the send).
  double rpcs = 0;
  double rpc_seconds = 0;
  double lookups = 0;
  double handler_seconds = 0;
  SystemCounters operator-(const SystemCounters& o) const;
  SystemCounters& operator+=(const SystemCounters& o);
};

// Not thread-safe: fetchers are made and counters read by one thread,
// while each fetcher runs on a thread of its own.
class BenchSystem {
 public:
  virtual ~BenchSystem() = default;

  // "engram 1 shard", "redis", ...
  const std::string& name() const { return name_; }
  // Networked systems take any number of connections, the others one.
  virtual bool networked() const = 0;
  // Whether the server's CPU time is part of this process's (the bare TCP
  // server's threads): the client's share is then the rest.
  virtual bool server_in_process() const { return false; }
  // Networked systems count the wire at this process's sockets to their
  // servers (LoopbackSocketBytes: TCP payload, framing included).

  // A fetcher of `stream`'s steps over `connections` connections (valid
  // while the system and the stream live). Preparation, such as a decode
  // stream's prefill, happens here, not in the measured calls.
  virtual absl::StatusOr<FetchStep> NewFetcher(const StepStream& stream, int connections) = 0;
  virtual absl::StatusOr<SystemCounters> Counters() const = 0;

 protected:
  explicit BenchSystem(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

struct EngramSystemOptions {
  std::string name;                     // REQUIRED
  std::string shard_binary;             // engram-shard. REQUIRED.
  std::string table_dir;                // for the client. REQUIRED.
  std::vector<std::string> shard_dirs;  // shard i first. REQUIRED.
  double hot_share = 1.0;               // hot tier / shard row bytes
  bool direct_io = false;               // engram-shard --direct-io
  // ClientOptions::pipeline_layers. Off (not the library's default): the
  // benchmark's worker needs every layer of a step at once, and the peers
  // are asked for all of them at once too.
  bool pipeline_layers = false;
  std::string log_dir;  // shard stderr files. REQUIRED.
  // Non-empty: gRPC and the row stream over TLS, with certificates made in
  // this directory at start (common/testing/test_certs.h).
  std::string tls_dir;
};
// Starts one engram-shard per shard directory.
absl::StatusOr<std::unique_ptr<BenchSystem>> StartEngram(const EngramSystemOptions& options);
// The engram-shard processes of `options` (what StartEngram and
// StartRawGrpc serve from).
absl::StatusOr<std::unique_ptr<Deployment>> StartShards(const EngramSystemOptions& options);

// A diagnostic peer: another engram-shard process for the one shard
// directory, fetched with one bare gRPC Lookup per step and connection
// (RawLookupClient, bench_shard_grpc.h) instead of the client library, so
// the report can tell the transport's cost from the library's.
absl::StatusOr<std::unique_ptr<BenchSystem>> StartRawGrpc(const EngramSystemOptions& options,
                                                          uint32_t row_bytes);

// Starts redis-server and loads every row of `rows` (layers of
// `layer_rows` rows) with pipelined SETs. MGETs carry at most `mget_keys`
// keys.
absl::StatusOr<std::unique_ptr<BenchSystem>> StartRedis(const RedisServerOptions& server,
                                                        const RowArray& rows,
                                                        const std::vector<uint64_t>& layer_rows,
                                                        size_t mget_keys);

// Bare TCP exchange servers over `rows`, one per connection (created as
// needed).
absl::StatusOr<std::unique_ptr<BenchSystem>> StartTcp(const RowArray& rows,
                                                      const std::vector<uint64_t>& layer_rows);

// RowStore on `shard_dir` in this process (RowStoreOptions defaults, as
// engram-shard uses them, with `direct_io`).
absl::StatusOr<std::unique_ptr<BenchSystem>> OpenRocksDb(const std::string& name,
                                                         const std::string& shard_dir,
                                                         bool direct_io);

// memcpy of every id's row from `rows`.
std::unique_ptr<BenchSystem> NewMemoryGather(const RowArray& rows);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_SYSTEMS_H_
