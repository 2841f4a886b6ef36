// StreamServer: a shard server's row stream (proto/stream_wire.h), the
// fast path for Lookup next to gRPC.
//
// One thread per connection reads a request, serves it through
// StoreService::LookupBytes (rows in RAM are copied on that thread, with no
// hand-off) and writes the response with one sendmsg; a response that
// waits for disk reads is written by the RocksDB reader that finished them
// when the socket takes it at once, else queued for the connection's
// backlog writer: a reader never waits on a peer. While a connection's
// backlog holds over max_backlog_bytes, its next request is not read.
// A bad request gets an error response and the connection stays open; a
// malformed frame gets one (when its id is known) and the connection is
// closed. With TLS, the handshake comes first and every byte after it is
// TLS records; with tokens, a hello without the right one gets the
// connection's error (UNAUTHENTICATED) and the connection is closed.
//
// Thread-safe. The service must outlive the server; Shutdown() (also run by
// the destructor) returns once every connection is closed and every
// Lookup it started has answered.
#ifndef ENGRAM_SERVICE_STREAM_SERVER_H_
#define ENGRAM_SERVICE_STREAM_SERVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/net/tls.h"
#include "service/auth.h"
#include "service/shard_metrics.h"
#include "service/store_service.h"

namespace engram {

struct StreamServerOptions {
  // Host to bind ("127.0.0.1", "0.0.0.0", "::"); port 0 picks a free one.
  std::string host = "127.0.0.1";
  int port = 0;
  // Request payloads over this many bytes get RESOURCE_EXHAUSTED and the
  // connection is closed. Default: what 65,536 row ids take, plus room.
  size_t max_request_bytes = (size_t{65536} * 10) + 4096;
  // Connections beyond this are closed as soon as they are accepted.
  int max_connections = 256;
  // A connection that has not sent its hello within this time is closed.
  absl::Duration hello_timeout = absl::Seconds(10);
  // A connection whose peer has not taken a response within this time is
  // closed (a client that stops reading cannot hold a thread, or a
  // shutdown, for ever).
  absl::Duration write_timeout = absl::Seconds(10);
  // After the hello, a connection that sends no byte for this long is
  // closed once its in-flight Lookups have answered (and so is one that
  // stops mid-frame). Clients reconnect when they next need the stream.
  absl::Duration idle_timeout = absl::Minutes(10);
  // Lookups of one connection in flight at once; beyond them the server
  // reads no further request from the connection until one has answered
  // (back-pressure through TCP: a client's burst waits, it is not refused).
  int max_inflight_per_connection = 256;
  // Answers queued for a peer that does not take them as fast as they come;
  // past this many bytes the connection's next request is not read.
  size_t max_backlog_bytes = size_t{64} << 20;
  // TLS (common/net/tls.h) when set: a server context; the TLS handshake must
  // finish within hello_timeout.
  std::shared_ptr<TlsContext> tls;
  // The tokens a client's hello must carry (service/auth.h); nullptr or
  // one without a data token: none. REQUIRES: outlives the server.
  const TokenAuth* auth = nullptr;
};

class StreamServer {
 public:
  // Binds and starts accepting. Errors: Unavailable when the address cannot
  // be bound. REQUIRES: service and metrics outlive the server.
  static absl::StatusOr<std::unique_ptr<StreamServer>> Start(const StreamServerOptions& options,
                                                             StoreService* service,
                                                             ShardMetrics* metrics);
  ~StreamServer();
  StreamServer(const StreamServer&) = delete;
  StreamServer& operator=(const StreamServer&) = delete;

  int port() const { return port_; }
  // Stops accepting, ends every connection once its in-flight Lookups have
  // answered (their responses are still sent) and joins the threads.
  // Idempotent.
  void Shutdown();

 private:
  struct Connection;
  StreamServer(const StreamServerOptions& options, StoreService* service, ShardMetrics* metrics);
  void AcceptLoop();
  void Serve(Connection* c);
  // Reads the client's hello (and token), answers it and checks the
  // token. False: the connection is to be closed.
  bool Hello(Connection* c);
  // Joins the threads of finished connections. REQUIRES: mu_ held.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StreamServerOptions options_;
  StoreService* const service_;
  ShardMetrics* const metrics_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace engram

#endif  // ENGRAM_SERVICE_STREAM_SERVER_H_
