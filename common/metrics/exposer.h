// Exposer: an embedded HTTP server (civetweb) that serves the text format of
// registered Collectables (usually Registries) on GET <uri>, "/metrics" by
// default, with Content-Type `text/plain; version=0.0.4; charset=utf-8`.
// Mirrors prometheus::Exposer, but is built with a factory that returns an
// error status instead of a constructor that throws.
//
//   auto exposer = Exposer::Create("127.0.0.1:0");   // port 0: ephemeral
//   if (!exposer.ok()) return exposer.status();
//   (*exposer)->RegisterCollectable(registry);       // shared_ptr<Registry>
//   int port = (*exposer)->port();
//
// Threading: all methods are thread-safe and may be called while requests are
// served. Requests run on civetweb's worker threads (num_threads of them),
// each scrape calling Collect() on the registered collectables. Collectables
// are held weakly: one that has been destroyed is skipped. The destructor
// stops the server and waits for requests in flight.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metric_family.h"

struct mg_context;
struct mg_connection;

namespace engram::metrics {

class Exposer {
 public:
  // Starts serving on `bind_address`, in civetweb's listening_ports syntax:
  // "IPV4:PORT", "HOST:PORT" or "PORT" (all IPv4 interfaces); "[IPV6]:PORT"
  // only where civetweb is built with IPv6 (Debian's 1.15 is not, and
  // rejects it as InvalidArgument). PORT 0 picks a free port (see port()).
  // Errors: InvalidArgument for a malformed address or num_threads == 0;
  // Unavailable when the address cannot be bound (e.g. the port is taken).
  // The message carries civetweb's reason.
  static absl::StatusOr<std::unique_ptr<Exposer>> Create(const std::string& bind_address,
                                                         std::size_t num_threads = 2);

  Exposer(const Exposer&) = delete;
  Exposer& operator=(const Exposer&) = delete;
  ~Exposer();

  // Serves `collectable` on `uri` (must start with '/', else fatal) from now
  // on. Several collectables on one uri are concatenated in registration
  // order; they should not share family names. Registering the same one
  // twice on a uri is a no-op.
  void RegisterCollectable(const std::weak_ptr<Collectable>& collectable,
                           const std::string& uri = "/metrics");
  void RemoveCollectable(const std::weak_ptr<Collectable>& collectable,
                         const std::string& uri = "/metrics");

  // The ports actually bound, in the order of bind_address.
  std::vector<int> GetListeningPorts() const { return ports_; }
  // The first bound port (the ephemeral one when asked for port 0).
  int port() const { return ports_.empty() ? -1 : ports_.front(); }

 private:
  struct Endpoint {
    absl::Mutex mutex;
    std::vector<std::weak_ptr<Collectable>> collectables ABSL_GUARDED_BY(mutex);
  };

  Exposer() = default;
  static int HandleRequest(mg_connection* conn, void* endpoint);
  static int LogMessage(const mg_connection* conn, const char* message);

  // Wakes civetweb's accept loop so that mg_stop() returns promptly.
  void KnockUntil(const std::atomic<bool>& stopped) const;

  mg_context* context_ = nullptr;
  std::vector<int> ports_;  // set once in Create()
  // A sockaddr (raw bytes) that reaches the first listening port, for
  // KnockUntil(); empty if none could be derived from the bind address.
  std::vector<char> knock_address_;

  absl::Mutex mutex_;
  // Never erased before the server stops: civetweb holds raw pointers.
  std::map<std::string, std::unique_ptr<Endpoint>> endpoints_ ABSL_GUARDED_BY(mutex_);

  absl::Mutex log_mutex_;
  bool starting_ ABSL_GUARDED_BY(log_mutex_) = true;
  std::string startup_log_ ABSL_GUARDED_BY(log_mutex_);
};

}  // namespace engram::metrics
