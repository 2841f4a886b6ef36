// The row stream side of engram-bench-shard: Lookup over a shard's row
// stream (proto/stream_wire.h), the transport the client library uses by
// default, without the library around it.
#ifndef ENGRAM_BENCH_SHARD_BENCH_SHARD_STREAM_H_
#define ENGRAM_BENCH_SHARD_BENCH_SHARD_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/shard/bench_shard_grpc.h"
#include "bench/shard/bench_shard_measure.h"
#include "grpcpp/channel.h"
#include "proto/wire.h"

namespace engram::bench {

// One blocking row stream connection to 127.0.0.1:stream_port: the hello,
// then per call one kLookup frame carrying EncodeLookupRequest's bytes and
// its response read into a reused buffer, the rows located in place
// (LocateLookupResponseRows), as the library reads them. The first call
// learns the table and version from Info over `channel` and connects.
// Not thread-safe.
class StreamLookupClient {
 public:
  StreamLookupClient(std::shared_ptr<grpc::Channel> channel, int stream_port)
      : channel_(std::move(channel)), stream_port_(stream_port) {}
  ~StreamLookupClient();
  StreamLookupClient(const StreamLookupClient&) = delete;
  StreamLookupClient& operator=(const StreamLookupClient&) = delete;

  // The rows of `layers`, in request order; valid until the next call.
  absl::StatusOr<RowPieces> Lookup(std::span<const wire::LayerRowIds> layers, size_t rows_bytes);

 private:
  absl::Status Open();

  std::shared_ptr<grpc::Channel> channel_;
  int stream_port_;
  int fd_ = -1;
  ServedTable served_;
  uint32_t next_id_ = 1;
  std::vector<uint8_t> payload_;
  wire::ResponseRows rows_;
};

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_SHARD_BENCH_SHARD_STREAM_H_
