// MetricsExposer: prometheus-cpp's Exposer (an embedded civetweb HTTP
// server answering GET /metrics) behind a Status-returning start and a
// prompt stop, for the shard daemon and the demo.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<MetricsExposer> exposer,
//                    MetricsExposer::Start("127.0.0.1:0"));
//   exposer->exposer().RegisterCollectable(registry);  // any prometheus::Collectable
//   int port = exposer->port();                         // the bound port
//
// prometheus::Exposer's constructor throws when it cannot listen; Start()
// turns that into a Status, so no exception leaves this file. Destroying a
// prometheus::Exposer waits for civetweb's accept loop, which looks at its
// stop flag once every 2 s; ~MetricsExposer wakes it by connecting to the
// port, so a stop takes milliseconds.
//
// Threading: scrapes run Collect() of the registered collectables on
// civetweb's threads (2), so they must be thread-safe. exposer() and port()
// may be called from any thread. Ownership: the exposer keeps weak pointers
// only; a collectable destroyed before the exposer simply stops appearing.
#ifndef ENGRAM_COMMON_NET_PROMETHEUS_EXPOSER_H_
#define ENGRAM_COMMON_NET_PROMETHEUS_EXPOSER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"

namespace engram {

class MetricsExposer {
 public:
  // Listens on `bind_address`, civetweb's "NUMERIC_HOST:PORT" (port 0: an
  // ephemeral one, see port()). InvalidArgument for a malformed address,
  // Unavailable when it cannot be bound (port taken, host not local); the
  // message is `metrics exposer: cannot listen on "ADDRESS": REASON`.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(const std::string& bind_address);
  ~MetricsExposer();
  MetricsExposer(const MetricsExposer&) = delete;
  MetricsExposer& operator=(const MetricsExposer&) = delete;

  prometheus::Exposer& exposer() { return *exposer_; }
  // The bound port.
  int port() const { return port_; }

 private:
  MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, int port,
                 std::vector<char> knock_address);

  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
  std::vector<char> knock_address_;  // a sockaddr reaching the listener, or empty
};

}  // namespace engram

#endif  // ENGRAM_COMMON_NET_PROMETHEUS_EXPOSER_H_
