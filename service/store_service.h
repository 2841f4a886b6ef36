// StoreService: the engram.v1.EngramStore implementation of a shard server
// (internal to service/; ShardServer is the public face).
//
// Lookup is a raw callback method: the request arrives as a ByteBuffer and
// is parsed by the hand codec (proto/wire.h) into a pooled id array; the
// response is one slice of exactly the response's size (from a pool of
// recycled buffers when large), framed as a LookupResponse, into which rows
// are copied straight from the hot tier or RocksDB. Hot-tier hits are copied on the gRPC thread;
// misses go to RowStore::ReadRowsAsync and the call finishes from the read's completion, so one
// request's disk reads never hold up another request's hot hits.
//
// Every request is validated completely before any row is touched; a bad
// request gets a status naming the bad value and never partial rows. With
// tokens (service/auth.h), a call without the data token is refused before
// it is parsed; past max_inflight_requests, a Lookup is answered
// RESOURCE_EXHAUSTED at once. A call's deadline is honoured: past it, the
// call reads no more rows from disk and is answered DEADLINE_EXCEEDED.
// A call's disk reads queue by its need-by (NeedBy), earliest first, with
// every other call's, gRPC and row stream.
//
// The row stream (service/stream_server.h) serves the same Lookup through
// LookupBytes.
//
// Thread-safe: gRPC calls the handlers concurrently. The store, the tier and
// the metrics must outlive the service, and the gRPC server must be shut
// down (which waits for in-flight calls, including their disk reads) before
// the service is destroyed.
#ifndef ENGRAM_SERVICE_STORE_SERVICE_H_
#define ENGRAM_SERVICE_STORE_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engram/v1/engram_store.grpc.pb.h"
#include "proto/wire.h"
#include "service/auth.h"
#include "service/gather_pool.h"
#include "service/response_pool.h"
#include "service/serving_table.h"
#include "service/shard_metrics.h"
#include "shard/hot_tier.h"
#include "shard/row_store.h"

namespace engram {

struct GatherShare;  // one part of a request's gather

// What a StoreService refuses (RESOURCE_EXHAUSTED) and how it gathers.
struct StoreServiceLimits {
  uint32_t max_rows_per_request = 65536;
  // Lookups in flight at once, gRPC and row stream; 0 = no limit.
  int max_inflight_requests = 0;
  // GatherPool helpers for large requests' hot rows.
  int gather_threads = 0;
};

class StoreService final : public v1::EngramStore::WithRawCallbackMethod_Lookup<
                               v1::EngramStore::WithCallbackMethod_Info<v1::EngramStore::Service>> {
 public:
  // Serves `table` until SwapTable. `auth`: the tokens Lookup and Info need
  // (nullptr: none). REQUIRES: metrics and auth outlive the service.
  StoreService(std::shared_ptr<ServingTable> table, ShardMetrics& metrics,
               const StoreServiceLimits& limits, const TokenAuth* auth);
  ~StoreService() override;

  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Info(grpc::CallbackServerContext* context,
                                 const v1::InfoRequest* request,
                                 v1::InfoResponse* response) override;

  // The answer to a Lookup served outside gRPC (the row stream): the status
  // and, when OK, the serialized LookupResponse. The callee owns the slice
  // and must let it go (its buffer returns to this service's pool) before
  // it lets a shutdown proceed: nothing of the service is touched after.
  using LookupDone = std::function<void(const absl::Status&, grpc::Slice)>;
  // Serves one serialized LookupRequest exactly as Lookup does; `done` runs
  // exactly once, on this thread (rows all in RAM, or an error) or on a
  // RocksDB reader thread (after the disk reads). `deadline`: the caller's
  // (as a gRPC call's): once past, no more of its rows are read from disk
  // and it finishes DEADLINE_EXCEEDED.
  void LookupBytes(std::span<const uint8_t> request, LookupDone done,
                   absl::Time deadline = absl::InfiniteFuture());

  // The row stream's port, for InfoResponse.stream_port (0 = none).
  void set_stream_port(int port) { stream_port_.store(port); }

  // The table served now (Lookups that started before a swap keep theirs).
  std::shared_ptr<ServingTable> table() const { return table_.load(); }
  // Serves `next` from the next request on; returns the table it replaces,
  // which requests in flight still hold.
  std::shared_ptr<ServingTable> SwapTable(std::shared_ptr<ServingTable> next) {
    return table_.exchange(std::move(next));
  }

  // Checks a parsed request against what `table` serves: the table's name
  // and version exactly (FAILED_PRECONDITION otherwise: rows of another
  // version are never served), layers, row ranges, row ownership.
  static absl::Status Validate(const ServingTable& table, const wire::LookupQuery& query);

  // When a request that arrived at `arrival` needs its rows
  // (RowStore::ReadRowsAsync's need_by): `need_within_us` after arrival
  // (LookupRequest.need_within_us); without it (0), its deadline; without
  // either, one second after arrival.
  static absl::Time NeedBy(absl::Time arrival, uint32_t need_within_us, absl::Time deadline);

 private:
  struct Call;  // the state of one Lookup, pooled

  std::unique_ptr<Call> NewCall();
  void RecycleCall(std::unique_ptr<Call> call);
  // Copies hot rows into the call's response and lists the misses (large
  // requests in shares over gather_pool_).
  void Gather(Call& call);
  void GatherRange(Call& call, size_t lo, size_t hi, GatherShare& share);
  // Recycles the call, then sends its response (status OK) or `status`.
  void Finish(std::unique_ptr<Call> call, const absl::Status& status);
  // Validates the parsed call (`parsed`: the parse's status), gathers its
  // hot rows and reads the rest; Finish answers it.
  void Serve(std::unique_ptr<Call> call, absl::Status parsed);

  std::atomic<std::shared_ptr<ServingTable>> table_;
  ShardMetrics& metrics_;
  const uint32_t max_rows_per_request_;
  const int max_inflight_;
  const TokenAuth* const auth_;
  std::atomic<int> inflight_{0};

  std::atomic<int> stream_port_{0};
  ResponseBufferPool responses_;
  GatherPool gather_pool_;
  absl::Mutex pool_mutex_;
  std::vector<std::unique_ptr<Call>> pool_ ABSL_GUARDED_BY(pool_mutex_);
};

}  // namespace engram

#endif  // ENGRAM_SERVICE_STORE_SERVICE_H_
