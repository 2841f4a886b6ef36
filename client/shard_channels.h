// ShardChannels: the gRPC channels of every replica of every shard, and one
// Lookup RPC with retry on the next replica and optional hedging.
//
// Internal to the client library (not part of its public API).
#ifndef ENGRAM_CLIENT_SHARD_CHANNELS_H_
#define ENGRAM_CLIENT_SHARD_CHANNELS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/stream_connection.h"
#include "grpcpp/alarm.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"

namespace engram {

// Lock-free running counters of RPC outcomes, shared by all steps.
struct RpcCounters {
  std::atomic<uint64_t> rpcs{0}, retries{0}, hedges{0}, failed{0};
  std::atomic<uint64_t> stream_answers{0};  // attempts answered OK over a row stream
  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0};
};

// A ring of recent RPC latencies; p95 for the default hedge delay.
// Thread-safe.
class LatencyWindow {
 public:
  void Add(absl::Duration d);
  absl::Duration P95() const;

 private:
  static constexpr int kSize = 512;
  mutable absl::Mutex mu_;
  std::vector<int64_t> ns_ ABSL_GUARDED_BY(mu_) = std::vector<int64_t>(kSize, 0);
  int next_ ABSL_GUARDED_BY(mu_) = 0;
  int filled_ ABSL_GUARDED_BY(mu_) = 0;
};

struct ChannelOptions {
  int channels_per_replica = 1;
  absl::Duration max_reconnect_backoff = absl::Seconds(2);
  // ClientOptions::http2_bdp_probe and http2_window_bytes.
  bool http2_bdp_probe = true;
  uint32_t http2_window_bytes = 16 << 20;
  // ClientOptions::transport == kRowStream: one StreamConnection per
  // channel, used where the replica offers a row stream.
  bool row_stream = true;
  absl::Duration stream_connect_timeout = absl::Seconds(2);
  // TLS: gRPC's channel credentials and the row stream's context (both
  // null: plaintext), and the name the shards' certificates must carry
  // (empty: each address's host).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::shared_ptr<TlsContext> stream_tls;
  std::string tls_server_name;
  // Bearer token sent with every call (empty: none).
  std::string auth_token;
};

// A completion of ShardChannels' queue: an RPC attempt or an alarm.
class CqTag {
 public:
  virtual void Complete(bool ok) = 0;

 protected:
  ~CqTag() = default;
};

// Owns the channels, each replica's row stream connections (one per
// channel), and one completion queue for every gRPC call and alarm made on
// them, drained by one thread of its own: a response is read from the
// socket and handed to its RPC by the same thread, with no hand-off
// between threads (a row stream's own thread does the same for its
// responses). Thread-safe; immutable after construction.
// REQUIRES: every RPC has finished, and every response slice is released,
// before destruction.
class ShardChannels {
 public:
  ShardChannels(const std::vector<std::vector<std::string>>& addresses,
                const ChannelOptions& options);
  ~ShardChannels();

  int n_shards() const { return static_cast<int>(replicas_.size()); }
  int n_replicas(int shard) const { return static_cast<int>(replicas_[shard].size()); }
  const std::string& address(int shard, int replica) const { return addresses_[shard][replica]; }
  // "Bearer <token>" for every call's metadata; empty without a token.
  const std::string& authorization() const { return authorization_; }
  // "a|b|c": the shard's replicas, for error messages.
  std::string Describe(int shard) const;
  // The replica's next channel index, round-robin.
  int NextChannel(int shard, int replica);
  grpc::GenericStub* Stub(int shard, int replica, int channel) {
    return replicas_[shard][replica]->stubs[channel].get();
  }
  // The channel's row stream, or nullptr when the row stream is off.
  StreamConnection* Stream(int shard, int replica, int channel) {
    Replica& r = *replicas_[shard][replica];
    return r.streams.empty() ? nullptr : r.streams[channel].get();
  }
  // The queue; each tag put on it must be a CqTag.
  grpc::CompletionQueue* cq() { return &cq_; }

 private:
  struct Replica {
    std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
    std::vector<std::unique_ptr<StreamConnection>> streams;  // empty: off
    std::atomic<uint32_t> next{0};
  };
  StreamBufferPool buffers_;  // first: outlives the streams
  std::vector<std::vector<std::string>> addresses_;
  std::string authorization_;
  std::vector<std::vector<std::unique_ptr<Replica>>> replicas_;
  grpc::CompletionQueue cq_;
  std::thread completions_;
};

struct RpcPolicy {
  absl::Duration deadline = absl::Seconds(2);
  bool hedge = false;
  absl::Duration hedge_delay;  // resolved (never zero when hedge is on)
};

// Where a ShardRpc delivers (the step that sent it: client/step_engine.h).
// Each method runs on the thread that completed an attempt (the channels'
// completion thread, a row stream's thread, or the sender's for an attempt
// refused at once).
class RpcReceiver {
 public:
  // An attempt's OK response; an error makes the attempt fail (a malformed
  // response). Called under the RPC's lock, at most once per attempt.
  virtual absl::Status Decode(const grpc::ByteBuffer& response) = 0;
  // Exactly once: OK after Decode accepted a response, or the error of the
  // last attempt.
  virtual void Done(const absl::Status& status) = 0;
  // Exactly once, after Done: nothing of the RPC calls back any more. May
  // destroy the RPC.
  virtual void Quiet() = 0;

 protected:
  ~RpcReceiver() = default;
};

// One Lookup of one shard's chunk of a step, with its attempts, each over
// the replica's row stream where it offers one, else over gRPC. Created and
// started by the step, it reports to `receiver` (RpcReceiver). The object
// must outlive RpcReceiver::Quiet(); Cancel() hurries it.
class ShardRpc {
 public:
  // `response_bytes`: the exact size of a right answer (a row stream
  // response that claims more is refused before anything is allocated).
  // REQUIRES: `receiver` outlives its Quiet().
  ShardRpc(ShardChannels* channels, RpcCounters* counters, LatencyWindow* latency, int shard,
           grpc::Slice request, size_t response_bytes, RpcReceiver* receiver);
  ~ShardRpc();

  // Sends the first attempt (replica `first_replica`, then the others in
  // order on failure).
  void Start(const RpcPolicy& policy, int first_replica);
  // Cancels attempts still in flight (they finish with CANCELLED).
  void Cancel();
  int shard() const { return shard_; }
  absl::Duration latency() const { return latency_; }

 private:
  struct Attempt final : CqTag, StreamCall {
    ShardRpc* rpc = nullptr;
    grpc::ClientContext context;
    std::unique_ptr<grpc::GenericClientAsyncResponseReader> call;
    grpc::ByteBuffer response;
    grpc::Status status;
    int replica = 0;
    int channel = 0;
    std::atomic<StreamConnection*> stream{nullptr};  // while sent on one
    absl::Time start;
    void Complete(bool) override {
      rpc->OnAttemptDone(this, absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                            status.error_message()));
    }
    void StreamDone(const absl::Status& s, grpc::ByteBuffer* r) override {
      if (r != nullptr) response.Swap(r);
      if (s.ok()) rpc->counters_->stream_answers.fetch_add(1, std::memory_order_relaxed);
      rpc->OnAttemptDone(this, s);
    }
    void UseGrpc() override { rpc->LaunchGrpc(this); }
  };
  struct HedgeTag final : CqTag {
    ShardRpc* rpc = nullptr;
    void Complete(bool fired) override { rpc->OnHedgeAlarm(fired); }
  };
  // REQUIRES: mu_ held. Reserves the next replica's attempt; nullptr when
  // every replica was tried.
  Attempt* NextAttemptLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Launch(Attempt* a);
  void LaunchGrpc(Attempt* a);
  void OnAttemptDone(Attempt* a, const absl::Status& status);
  void OnHedgeAlarm(bool fired);
  // REQUIRES: mu_ held. True once nothing can call back any more.
  bool QuietLocked() const { return done_ && outstanding_ == 0 && !alarm_pending_; }

  ShardChannels* const channels_;
  RpcCounters* const counters_;
  LatencyWindow* const latency_window_;
  const int shard_;
  const grpc::Slice request_slice_;  // the serialized LookupRequest (row stream)
  const size_t response_bytes_;
  const grpc::ByteBuffer request_;  // the same bytes, for gRPC
  RpcReceiver* const receiver_;

  absl::Mutex mu_;
  RpcPolicy policy_;  // set under mu_ by Start(), read-only afterwards
  std::vector<std::unique_ptr<Attempt>> attempts_ ABSL_GUARDED_BY(mu_);  // at most one per replica
  int next_replica_ ABSL_GUARDED_BY(mu_) = 0;
  int tried_ ABSL_GUARDED_BY(mu_) = 0;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool alarm_pending_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  absl::Duration latency_;  // set under mu_ when done, read after on_done_
  grpc::Alarm alarm_;
  HedgeTag hedge_tag_;
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_SHARD_CHANNELS_H_
