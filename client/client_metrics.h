// ClientMetrics: publishes an EngramClient's counters (ClientStats) as
// engram_client_* counters of a prometheus-cpp Registry, for workers that
// expose /metrics. Internal to the client library.
//
// The hot path pays nothing: a thread of its own brings the counters up to
// date from ClientStats once every refresh period (and once more at
// destruction), so a scrape sees values at most one period old.
//
// Threading: thread-safe; Refresh() may run concurrently with scrapes of
// the registry. Ownership: shares the registry; the families stay in it
// after destruction, with their last values.
#ifndef ENGRAM_CLIENT_CLIENT_METRICS_H_
#define ENGRAM_CLIENT_CLIENT_METRICS_H_

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/engram_client.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace engram {

class ClientMetrics {
 public:
  static constexpr absl::Duration kRefreshPeriod = absl::Seconds(1);

  // Registers the engram_client_* families in `registry` (merged with
  // families of the same name and type already there) and starts the
  // refresh thread. `stats` is called at every refresh. InvalidArgument if
  // `registry` holds one of the names with another type (prometheus-cpp
  // throws; the exception stops here). REQUIRES: `stats` is callable until
  // destruction.
  static absl::StatusOr<std::unique_ptr<ClientMetrics>> Create(
      std::shared_ptr<prometheus::Registry> registry, int n_shards,
      std::function<ClientStats()> stats);
  // Stops the thread after a last refresh.
  ~ClientMetrics();
  ClientMetrics(const ClientMetrics&) = delete;
  ClientMetrics& operator=(const ClientMetrics&) = delete;

  // Brings the counters up to date now.
  void Refresh();

 private:
  ClientMetrics(std::shared_ptr<prometheus::Registry> registry, int n_shards,
                std::function<ClientStats()> stats);
  void RefreshLoop();

  std::shared_ptr<prometheus::Registry> registry_;
  std::function<ClientStats()> stats_;
  absl::Mutex mu_;
  ClientStats last_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  prometheus::Counter *steps_, *ids_, *unique_, *local_, *fetched_, *bytes_in_, *bytes_out_, *rpcs_,
      *retries_, *hedges_, *failed_, *stream_;
  std::vector<prometheus::Counter*> shard_seconds_, shard_rpcs_;
  std::thread refresher_;  // last: started once everything above exists
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_CLIENT_METRICS_H_
