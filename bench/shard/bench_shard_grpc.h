// The gRPC side of engram-bench-shard: the engram-shard daemon run as a
// child process on 127.0.0.1 (so its CPU time is its own), and two clients
// of its Lookup: raw ByteBuffers with the hand codec (as the client library
// calls) and the generated protobuf stub (for context).
#ifndef ENGRAM_BENCH_SHARD_BENCH_SHARD_GRPC_H_
#define ENGRAM_BENCH_SHARD_BENCH_SHARD_GRPC_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/shard/bench_shard_measure.h"
#include "engram/v1/engram_store.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/wire.h"
#include "service/testing/server_test_util.h"
#include "service/testing/shard_process.h"

namespace engram::bench {

struct ShardDaemonOptions {
  std::string binary;             // the engram-shard executable
  std::string db_dir;             // shard directory
  uint64_t ram_budget_bytes = 0;  // --ram-budget
  bool direct_io = false;         // --direct-io
  int reader_threads = 32;        // --reader-threads
};

// One engram-shard process serving on 127.0.0.1 (a testing::ShardProcess)
// and what engram-bench-shard reads from it. Start() returns once it
// serves; the destructor stops it. Not thread-safe.
class ShardDaemon {
 public:
  static absl::StatusOr<std::unique_ptr<ShardDaemon>> Start(const ShardDaemonOptions& options,
                                                            int n_layers);
  ShardDaemon(const ShardDaemon&) = delete;
  ShardDaemon& operator=(const ShardDaemon&) = delete;

  int port() const { return process_->port(); }
  int stream_port() const { return process_->stream_port(); }  // -1: none
  pid_t pid() const { return process_->pid(); }
  // Rows by tier, RocksDB block reads and Lookup handler time, scraped
  // from /metrics; CPU time from /proc/PID/stat.
  absl::StatusOr<ServerCounters> Counters() const;

 private:
  ShardDaemon(std::unique_ptr<testing::ShardProcess> process, int n_layers)
      : process_(std::move(process)), n_layers_(n_layers) {}

  std::unique_ptr<testing::ShardProcess> process_;
  int n_layers_;
};

// A channel to 127.0.0.1:port of its own (not shared with other channels)
// accepting messages of any size.
std::shared_ptr<grpc::Channel> BenchChannel(int port);

// The table name and version a shard serves (what a Lookup must name),
// learnt once from Info.
struct ServedTable {
  std::string table;
  uint64_t version = 0;  // 0 until learnt
  absl::Status Learn(grpc::Channel& channel);
};

// Lookup with raw ByteBuffers over a GenericStub: EncodeLookupRequest, one
// unary call driven on this thread's own completion queue, then the rows
// read in place from the reply's slices (LocateLookupResponseRows), as the
// client library reads them. Not thread-safe.
class RawLookupClient {
 public:
  explicit RawLookupClient(std::shared_ptr<grpc::Channel> channel);
  ~RawLookupClient();

  // The rows of `layers`, in request order; valid until the next call.
  // The first call learns the table and version to ask for from Info.
  absl::StatusOr<RowPieces> Lookup(std::span<const wire::LayerRowIds> layers, size_t rows_bytes);

 private:
  std::shared_ptr<grpc::Channel> channel_;
  ServedTable served_;
  grpc::GenericStub stub_;
  grpc::CompletionQueue cq_;
  wire::ResponseRows rows_;
};

// Lookup through the generated stub: a LookupRequest message built per call
// and a LookupResponse parsed by protobuf (rows in its `bytes` field, the
// message reused across calls). Not thread-safe.
class ProtoLookupClient {
 public:
  explicit ProtoLookupClient(std::shared_ptr<grpc::Channel> channel)
      : channel_(channel), stub_(v1::EngramStore::NewStub(std::move(channel))) {}

  absl::StatusOr<RowPieces> Lookup(std::span<const wire::LayerRowIds> layers, size_t rows_bytes);

 private:
  std::shared_ptr<grpc::Channel> channel_;
  ServedTable served_;
  std::unique_ptr<v1::EngramStore::Stub> stub_;
  v1::LookupResponse response_;
  std::span<const uint8_t> piece_;
};

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_SHARD_BENCH_SHARD_GRPC_H_
