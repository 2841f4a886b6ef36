// ClientMetrics: publishes an EngramClient's counters (ClientStats) through
// the in-tree Prometheus client, for workers that expose /metrics.
// Internal to the client library. The counters are brought up to date from
// ClientStats right before each collection, so the hot path pays nothing.
#ifndef ENGRAM_CLIENT_CLIENT_METRICS_H_
#define ENGRAM_CLIENT_CLIENT_METRICS_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/engram_client.h"
#include "common/metrics/counter.h"
#include "common/metrics/registry.h"

namespace engram {

class ClientMetrics {
 public:
  // Registers the engram_client_* families in `registry`. `stats` is called
  // at every collection. REQUIRES: `stats` is callable until destruction.
  ClientMetrics(std::shared_ptr<metrics::Registry> registry, int n_shards,
                std::function<ClientStats()> stats);
  ~ClientMetrics();

 private:
  void Refresh();

  std::shared_ptr<metrics::Registry> registry_;
  std::function<ClientStats()> stats_;
  metrics::Registry::CollectCallbackId callback_ = 0;
  absl::Mutex mu_;  // Refresh() runs on scrape threads
  ClientStats last_ ABSL_GUARDED_BY(mu_);
  metrics::Counter *steps_, *ids_, *unique_, *local_, *fetched_, *bytes_in_, *bytes_out_, *rpcs_,
      *retries_, *hedges_, *failed_, *stream_;
  std::vector<metrics::Counter*> shard_seconds_, shard_rpcs_;
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_CLIENT_METRICS_H_
