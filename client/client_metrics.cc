#include "client/client_metrics.h"

#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace engram {
namespace {

prometheus::Counter* NewCounter(prometheus::Registry& r, const std::string& name,
                                const std::string& help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

void Advance(prometheus::Counter* c, uint64_t now, uint64_t before) {
  if (now > before) c->Increment(static_cast<double>(now - before));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClientMetrics>> ClientMetrics::Create(
    std::shared_ptr<prometheus::Registry> registry, int n_shards,
    std::function<ClientStats()> stats) {
  try {
    return std::unique_ptr<ClientMetrics>(
        new ClientMetrics(std::move(registry), n_shards, std::move(stats)));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_registry: cannot register the client's metrics: ", e.what()));
  }
}

ClientMetrics::ClientMetrics(std::shared_ptr<prometheus::Registry> registry, int n_shards,
                             std::function<ClientStats()> stats)
    : registry_(std::move(registry)), stats_(std::move(stats)) {
  prometheus::Registry& r = *registry_;
  steps_ = NewCounter(r, "engram_client_steps_total", "Steps prefetched.");
  ids_ = NewCounter(r, "engram_client_ids_total", "Row ids hashed (before de-duplication).");
  unique_ = NewCounter(r, "engram_client_unique_rows_total", "Rows after de-duplication.");
  local_ = NewCounter(r, "engram_client_local_cache_hits_total",
                      "Unique rows served by the worker-side cache.");
  fetched_ = NewCounter(r, "engram_client_rows_fetched_total", "Rows requested from shards.");
  bytes_in_ = NewCounter(r, "engram_client_received_bytes_total", "Lookup response bytes.");
  bytes_out_ = NewCounter(r, "engram_client_sent_bytes_total", "Lookup request bytes.");
  rpcs_ = NewCounter(r, "engram_client_rpcs_total", "Lookup RPCs started.");
  retries_ = NewCounter(r, "engram_client_retries_total", "Attempts on another replica.");
  stream_ = NewCounter(r, "engram_client_stream_answers_total",
                       "Attempts answered over a row stream (the rest over gRPC).");
  hedges_ = NewCounter(r, "engram_client_hedges_total", "Hedged attempts sent.");
  failed_ = NewCounter(r, "engram_client_failed_rpcs_total", "RPCs no replica answered.");
  auto& seconds = prometheus::BuildCounter()
                      .Name("engram_client_shard_rpc_seconds_total")
                      .Help("Latency of successful RPCs, summed, per shard.")
                      .Register(r);
  auto& count = prometheus::BuildCounter()
                    .Name("engram_client_shard_rpcs_total")
                    .Help("Successful RPCs per shard.")
                    .Register(r);
  for (int s = 0; s < n_shards; ++s) {
    shard_seconds_.push_back(&seconds.Add({{"shard", std::to_string(s)}}));
    shard_rpcs_.push_back(&count.Add({{"shard", std::to_string(s)}}));
  }
  {
    absl::MutexLock l(&mu_);
    last_.shard_latency_sum_seconds.assign(static_cast<size_t>(n_shards), 0);
    last_.shard_rpcs.assign(static_cast<size_t>(n_shards), 0);
  }
  refresher_ = std::thread([this] { RefreshLoop(); });
}

ClientMetrics::~ClientMetrics() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  refresher_.join();
  Refresh();
}

void ClientMetrics::RefreshLoop() {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), kRefreshPeriod)) return;
    }
    Refresh();
  }
}

void ClientMetrics::Refresh() {
  const ClientStats now = stats_();
  absl::MutexLock l(&mu_);
  Advance(steps_, now.steps, last_.steps);
  Advance(ids_, now.ids, last_.ids);
  Advance(unique_, now.unique_rows, last_.unique_rows);
  Advance(local_, now.local_hits, last_.local_hits);
  Advance(fetched_, now.rows_fetched, last_.rows_fetched);
  Advance(bytes_in_, now.bytes_received, last_.bytes_received);
  Advance(bytes_out_, now.bytes_sent, last_.bytes_sent);
  Advance(rpcs_, now.rpcs, last_.rpcs);
  Advance(retries_, now.retries, last_.retries);
  Advance(stream_, now.stream_answers, last_.stream_answers);
  Advance(hedges_, now.hedges, last_.hedges);
  Advance(failed_, now.failed_rpcs, last_.failed_rpcs);
  for (size_t s = 0; s < shard_rpcs_.size() && s < now.shard_rpcs.size(); ++s) {
    Advance(shard_rpcs_[s], now.shard_rpcs[s], last_.shard_rpcs[s]);
    const double d = now.shard_latency_sum_seconds[s] - last_.shard_latency_sum_seconds[s];
    if (d > 0) shard_seconds_[s]->Increment(d);
  }
  last_ = now;
}

}  // namespace engram
