// StreamConnection: one row stream connection (proto/stream_wire.h) from
// the client to one replica, the fast path for Lookup next to gRPC.
//
// Its own thread learns the replica's stream port from Info (over the
// replica's gRPC channel), connects, reads responses straight into pooled
// buffers and hands each to its call; it also fails calls whose deadline
// has passed and reconnects with backoff after a failure. A request is
// written by the thread that sends it, without blocking (what the socket
// does not take at once is finished by a writer thread), so no thread
// ever waits on a peer that is waiting on it.
//
// While connecting, calls queue; when the replica does not answer at all
// they fail at once with UNAVAILABLE until the next attempt (so the caller
// can try the next replica). A replica that offers no stream, or whose
// stream cannot be reached while its gRPC port answers, sends its calls
// back to the caller for gRPC (the stream is retried with backoff in the
// second case). Thread-safe. Internal to the client library.
#ifndef ENGRAM_CLIENT_STREAM_CONNECTION_H_
#define ENGRAM_CLIENT_STREAM_CONNECTION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/stream_buffer_pool.h"
#include "common/net/tls.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/stream_wire.h"

namespace engram {

// A call carried by a StreamConnection. Exactly one of its methods is
// called, once, on the connection's thread or on the thread that sent or
// cancelled it.
class StreamCall {
 public:
  // The response (`status` OK, `response` its LookupResponse bytes) or
  // the failure.
  virtual void StreamDone(const absl::Status& status, grpc::ByteBuffer* response) = 0;
  // The replica offers no row stream: nothing was sent; send it over gRPC.
  virtual void UseGrpc() = 0;

 protected:
  ~StreamCall() = default;
};

struct StreamConnectionOptions {
  std::string address;                     // the replica's gRPC host:port
  std::shared_ptr<grpc::Channel> channel;  // the replica's, for Info
  absl::Duration connect_timeout = absl::Seconds(2);
  absl::Duration min_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  StreamBufferPool* buffers = nullptr;  // REQUIRED; outlives the connection
  // TLS to the stream (a client context), and the name the replica's
  // certificate must carry (empty = the address's host).
  std::shared_ptr<TlsContext> tls;
  std::string tls_server_name;
  // Bearer token sent in the hello (empty = none).
  std::string auth_token;
};

class StreamConnection {
 public:
  // Starts connecting at once.
  explicit StreamConnection(StreamConnectionOptions options);
  // Fails what is still outstanding with CANCELLED, closes, joins.
  ~StreamConnection();
  StreamConnection(const StreamConnection&) = delete;
  StreamConnection& operator=(const StreamConnection&) = delete;

  // Sends `request` (a serialized LookupRequest) for `call`, to be answered
  // by `deadline` with a response of `response_bytes` (a frame claiming
  // another size ends the connection before anything is allocated). The
  // request slice is referenced until written.
  void Send(StreamCall* call, const grpc::Slice& request, size_t response_bytes,
            absl::Time deadline);
  // Fails `call` with CANCELLED if it is still outstanding (its response,
  // if one comes, is dropped).
  void Cancel(StreamCall* call);

 private:
  // kFallback: the replica answers gRPC but its stream cannot be reached;
  // calls go over gRPC while the stream is retried with backoff.
  enum class State { kConnecting, kReady, kBackoff, kFallback, kNoStream, kStopping };
  struct Outstanding {
    uint32_t id;
    StreamCall* call;
    size_t response_bytes;
    absl::Time deadline;
    grpc::Slice request;  // until queued for writing (then empty)
  };
  struct Write {
    uint8_t header[stream::kHeaderBytes + stream::kTimeoutBytes];
    size_t header_bytes = stream::kHeaderBytes;  // + kTimeoutBytes for a timed Lookup
    grpc::Slice payload;
    std::vector<uint8_t> sealed;  // with TLS: the frame's records (header and payload empty)
    size_t done = 0;              // bytes of header + payload (or sealed) written
  };

  void Run();  // the connection thread
  void WriteLoop();
  // Learns the stream port and connects: the socket, -1 when the replica
  // offers no stream, or the failure; *grpc_answered tells whether Info did.
  // A positive `wait_for_ready` sends Info wait-for-ready, bounded by it.
  absl::StatusOr<int> Connect(bool* grpc_answered, absl::Duration wait_for_ready);
  // Reads responses from `fd` until it fails; returns why.
  absl::Status ReadLoop(int fd);
  // Reads n bytes of the stream from `fd` (through tls_ when on). The
  // connection thread only.
  bool Read(int fd, void* buf, size_t n, bool quick_ack = false);
  // The TLS handshake (when on) and the hello on a connected socket.
  absl::Status Greet(int fd);
  // Removes the call with `id` (nullptr when there is none) or every call
  // from outstanding_.
  StreamCall* TakeLocked(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The response size the call with `id` expects, or 0 when there is none.
  size_t ExpectedBytesLocked(uint32_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<StreamCall*> TakeAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the calls whose deadline is at or before `now`.
  std::vector<StreamCall*> TakeExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails each with DEADLINE_EXCEEDED.
  void FailExpired(const std::vector<StreamCall*>& calls);
  // Queues the frame of `o` for writing (and tries to write it now when
  // nothing is ahead of it). REQUIRES: mu_ held, state_ kReady.
  void WriteOrQueueLocked(const Outstanding& o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wake();

  const StreamConnectionOptions options_;
  std::string host_;
  int wake_fd_ = -1;  // eventfd: a call due before poll_until_, or stopping
  // The row stream version the shard agreed to (its hello), 0 before one.
  std::atomic<uint32_t> version_{0};

  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kConnecting;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  // fd_'s TLS session: set and reset with fd_ by the connection thread
  // (which alone reads through it), sealed into under mu_ by writers.
  std::unique_ptr<TlsSession> tls_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // +1 per connection
  uint32_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<Outstanding> outstanding_ ABSL_GUARDED_BY(mu_);
  std::deque<Write> writes_ ABSL_GUARDED_BY(mu_);
  bool writer_busy_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* connecting_ ABSL_GUARDED_BY(mu_) = nullptr;  // Info in flight
  // When the reader's poll returns at the latest; InfiniteFuture while it is
  // not polling (it looks at every outstanding call before it polls again).
  // A Send wakes it only for a call due earlier: waking it for each call
  // costs the sender tens of microseconds a request on a VM.
  absl::Time poll_until_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();

  std::thread reader_;
  std::thread writer_;
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_STREAM_CONNECTION_H_
