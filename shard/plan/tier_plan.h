// Capacity planning: from a TierReplay (shard/plan/tier_replay.h) at a RAM
// budget to disk load and the exposed wait a worker would see, through a
// small, stated model of the hardware. What `engramctl plan` prints
// (docs/operating.md, "Planning the RAM budget: engramctl plan").
//
// Rates. steps/s = workers x tokens_per_second / batch (every worker
// decodes the same kind of trace against the same shards). A shard's tail
// rows/s = its replayed disk rows per step x steps/s; its disk utilisation
// = tail rows/s / disk_iops (>= 1: the disk cannot keep up).
//
// Time of one step (FetchModel), replayed step by step with each step's
// own rows and tail rows per (layer, shard): layer l's request to shard s
// carries n rows of b bytes, t of them from disk;
//   disk(l, s)  = t > 0 ? disk_latency + t / free_iops(s) : 0
//   send(l, s)  = n * b / link         (link = network_gbps / 8 bytes/s)
//   fetch(l)    = rtt + max(max_s disk(l, s) + send(l, s), sum_s send(l, s))
// (each shard reads its tail then sends; the worker's own link carries
// every shard's rows), free_iops(s) = disk_iops x (1 - (W - 1) / W x
// utilisation(s)): the other W - 1 workers' reads take their mean share of
// the disk. When the layers go out is PlanModelOptions::fetch_order:
//
//   kDeadlineFirst  every layer is sent at Prefetch (the step's start) and
//                   each shard's disk reads the step's tail rows in need
//                   order (layers by engram_layer_ids) at its free rate:
//                     arrival(l) = rtt + max(max_s disk*(l, s) + send(l, s),
//                                            sum_{j <= l} sum_s send(j, s))
//                     disk*(l, s) = t > 0 ? disk_latency + (tail rows on s
//                                   of the layers needed no later than l)
//                                   / free_iops(s) : 0
//                   (j <= l: needed no later than l). The shards' disks work
//                   for the first layer first, and a later layer's window
//                   is left to its own tail.
//   kSequential     the client's pipeline_layers: layer l leaves when layer
//                   l - 1 has arrived, layer 0 at the step's start, so
//                   arrival(l) = fetch(0) + ... + fetch(l).
//
// The model needs layer l at block engram_layer_ids[l] of `blocks`, i.e.
// at engram_layer_ids[l] x block_us after the step's start plus whatever
// the step has already waited; exposed(l) = max(0, arrival(l) - that).
// A step lasts blocks x block_us + its exposed time; the predicted exposed
// wait is sum(exposed) / sum(step times), the share of wall time a worker
// spends blocked (engram-demo measures it the same way). The client's own
// CPU (hashing, de-duplication, copies) and request bytes are left out.
//
// IdealExposedWaitPercent is a lower bound of any such model for one
// replayed placement: each layer's tail read at the disk's full rate, in
// deadline order, starting at Prefetch, with no round trip, no network and
// no other workers. A benchmark can call it with the rate and latency it
// measured to tell how far a measured wait is from what the placement
// allows. Choosing the placement itself: shard/plan/placement.h.
#ifndef ENGRAM_SHARD_PLAN_TIER_PLAN_H_
#define ENGRAM_SHARD_PLAN_TIER_PLAN_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shard/plan/tier_replay.h"

namespace engram {

// When a step's layers are sent and read (the top of this file).
enum class FetchOrder { kDeadlineFirst, kSequential };
// "deadline" / "sequential".
const char* FetchOrderName(FetchOrder order);
// InvalidArgument naming the accepted values for anything else.
absl::StatusOr<FetchOrder> ParseFetchOrder(std::string_view name);

// Defaults: DeepSeek-V4.1-Flash's 43 blocks at 500 us, 25 GbE, one NVMe
// read of 80 us at depth 1, a layer sent once the one before it arrived
// (the client's pipeline_layers).
struct PlanModelOptions {
  // Random 4 KiB reads per second one shard's disk sustains at depth.
  // REQUIRED, > 0.
  double disk_iops = 0;
  double disk_latency_us = 80;  // one read at depth 1, >= 0
  double network_gbps = 25;     // every link, > 0
  double rtt_us = 50;           // a request's round trip without its data, >= 0
  double block_us = 500;        // one transformer block, > 0
  int blocks = 43;              // blocks of the model; > every Engram layer's block
  // Tokens per second of one worker; 0 = decoding back to back:
  // batch / (blocks x block_us).
  double tokens_per_second = 0;
  int workers = 1;  // inference workers sharing the shards, >= 1
  // kSequential models the client's pipeline_layers (its default);
  // kDeadlineFirst a client with it off.
  FetchOrder fetch_order = FetchOrder::kSequential;

  // InvalidArgument naming the first bad field; `layer_blocks` are the
  // layout's engram_layer_ids.
  absl::Status Validate(std::span<const int64_t> layer_blocks) const;
};

// The per-step time model above, for one budget's disk utilisations.
class FetchModel {
 public:
  // `layer_blocks`: engram_layer_ids; `row_bytes` per layer;
  // `utilization` per shard (its disk, all workers); every entry < 1.
  FetchModel(const PlanModelOptions& options, std::vector<int64_t> layer_blocks,
             std::vector<uint32_t> row_bytes, const std::vector<double>& utilization);

  // One step: rows[l * K + s] and tail[l * K + s] (layer-major) give each
  // layer's exposed seconds in `exposed` (resized to the layers); returns
  // their sum.
  double Step(std::span<const uint32_t> rows, std::span<const uint32_t> tail,
              std::vector<double>* exposed) const;
  double step_seconds() const { return step_seconds_; }  // blocks x block_us

 private:
  // arrival[l] of each order.
  void SequentialArrivals(std::span<const uint32_t> rows, std::span<const uint32_t> tail,
                          std::vector<double>* arrival) const;
  void DeadlineArrivals(std::span<const uint32_t> rows, std::span<const uint32_t> tail,
                        std::vector<double>* arrival) const;

  PlanModelOptions o_;
  std::vector<int64_t> layer_blocks_;
  std::vector<uint32_t> row_bytes_;
  std::vector<double> free_iops_;  // per shard
  std::vector<int> need_order_;    // layers by the block that needs them
  double link_bytes_per_second_;
  double step_seconds_;
};

struct ShardPlan {
  ReplayCounts rows;  // replayed, whole trace
  double hit_ratio = 0;
  double tail_rows_per_step = 0;
  double tail_rows_per_second = 0;  // all workers
  double disk_utilization = 0;      // tail_rows_per_second / disk_iops
  uint64_t pinned_rows = 0, cache_slots = 0;
};

struct BudgetPlan {
  uint64_t budget_bytes = 0;
  double percent_of_shard = 0;  // of TierReplay::shard_bytes()
  double hit_ratio = 0;         // all shards
  std::vector<ShardPlan> shards;
  double max_tail_rows_per_second = 0;
  double max_disk_utilization = 0;
  // Some shard's disk utilisation >= 1 at the model's token rate: the
  // workers cannot keep that rate. Their steps are then paced by the disk,
  // and exposed_wait_percent is that of steps whose tails are read at each
  // worker's share of the disk's rate (IdealExposedWaitPercent with
  // disk_iops / workers; the layers' shares are that figure too).
  bool disk_saturated = false;
  double exposed_wait_percent = 0;
  std::vector<double> layer_exposed_wait_percent;
};

// Budget-independent traffic of the trace at the model's rates.
struct TrafficPlan {
  double steps_per_second = 0;            // all workers
  double tokens_per_second = 0;           // per worker (the default resolved)
  std::vector<double> rows_per_step;      // per shard, all layers
  double max_shard_link_utilization = 0;  // rows bytes/s of a shard, all workers / link
  double worker_link_utilization = 0;     // one worker's row bytes/s / link
};

TrafficPlan PlanTraffic(const TierReplay& replay, const PlanModelOptions& model);

// The plan of one replayed budget. InvalidArgument for a bad model.
absl::StatusOr<BudgetPlan> PlanBudget(const TierReplay& replay, const BudgetReplay& budget,
                                      const PlanModelOptions& model);

// Replays and plans each budget, in the order given.
absl::StatusOr<std::vector<BudgetPlan>> PlanBudgets(const TierReplay& replay,
                                                    const std::vector<uint64_t>& budgets,
                                                    const PlanModelOptions& model);

// The lower bound of the exposed wait (percent of wall time) of
// `budget`'s placement: every step's tail rows of each shard
// (BudgetReplay::step_tail) read at `disk_reads_per_second` in need order
// (layers by engram_layer_ids) starting at Prefetch, a layer's rows there
// once its shards have read them (disk_latency_us, then its rows and those
// of the layers needed before it, at the full rate); no round trip, no
// network, no other workers. Layer l is needed engram_layer_ids[l] x
// block_us into the step (plus what the step has waited); a step lasts
// blocks x block_us plus its waits. REQUIRES: disk_reads_per_second > 0,
// block_us > 0; `budget` a Run of `replay`.
double IdealExposedWaitPercent(const TierReplay& replay, const BudgetReplay& budget,
                               double disk_reads_per_second, double disk_latency_us,
                               double block_us, int blocks);

// A shard's tail read as the sequential model charges it (disk(l, s) =
// latency + t / iops), fitted to fetches measured on a deployment: the
// device's depth-1 latency and rate leave out what a read costs on the
// request path (a reader's wake-up, RocksDB's block path, the CPU it
// shares with the gathers), and that can be most of a one-block window.
struct TailReadFit {
  double latency_us = 0;  // the fit's intercept
  double iops = 0;        // per shard: 1 / the fit's slope
  size_t fetches = 0;     // (step, layer) fetches that read the tail
};

// Fits latency_us and iops to the fetches of a run sent in sequence
// (FetchOrder::kSequential) whose tail rows `budget` replays:
// fetch_us[l][step] is layer l's fetch in that step (its arrival less the
// previous layer's, the first layer's less the end of Prefetch) and rtt_us
// the request path without the disk, so that fetch_us - rtt_us = latency_us
// + t / iops, t the most tail rows any shard read for that layer and step.
// Fetches without a tail row are left out. The fit is Theil-Sen's (the
// median of the pairwise slopes, then the median intercept), so a few
// fetches stalled by the device do not move it; its time and memory grow
// with the square of the fetches (a calibration run's few hundred: about a
// megabyte). InvalidArgument when
// fewer than `min_fetches` fetches read the tail, fetch_us has another
// shape than the replay's layers and steps (a prefix of its steps is
// fine), or the slope is not positive (the tail rows do not explain the
// fetches' times).
// REQUIRES: `budget` a Run of `replay`.
absl::StatusOr<TailReadFit> FitTailReads(const TierReplay& replay, const BudgetReplay& budget,
                                         const std::vector<std::vector<double>>& fetch_us,
                                         double rtt_us, size_t min_fetches = 20);

}  // namespace engram

#endif  // ENGRAM_SHARD_PLAN_TIER_PLAN_H_
