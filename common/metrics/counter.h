// Counter: a monotonically increasing value (requests served, rows written).
//
// Thread-safe and lock-free: Increment() is a relaxed fetch_add on a
// cache-line-padded cell belonging to the calling thread's shard (see
// detail::ThisThreadShard), so concurrent writers on different cores do not
// contend. Value() / Collect() sum the shards; a read concurrent with writes
// sees each increment either fully or not at all.
//
// Whole-number increments are kept exactly in a uint64 cell; fractional
// ones go to a separate double cell (std::atomic<double>::fetch_add).
// The price is memory: a Counter is kNumShards * 64 bytes (1 KiB).
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "common/metrics/builder.h"
#include "common/metrics/detail.h"
#include "common/metrics/family.h"
#include "common/metrics/metric_family.h"

namespace engram::metrics {

class Counter {
 public:
  static constexpr MetricType metric_type = MetricType::Counter;

  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds 1.
  void Increment() {
    cells_[detail::ThisThreadShard()].whole.fetch_add(1, std::memory_order_relaxed);
  }

  // Adds `value`. Negative and NaN values are ignored (a counter never goes
  // down; prometheus-cpp ignores negatives the same way).
  void Increment(double value) {
    if (!(value >= 0.0)) return;
    Cell& cell = cells_[detail::ThisThreadShard()];
    // 2^53: every whole number below it is exact both as double and uint64.
    if (value < 9007199254740992.0 && value == std::floor(value)) {
      cell.whole.fetch_add(static_cast<std::uint64_t>(value), std::memory_order_relaxed);
    } else {
      cell.fraction.fetch_add(value, std::memory_order_relaxed);
    }
  }

  // The current total, summed over shards.
  double Value() const {
    std::uint64_t whole = 0;
    double fraction = 0.0;
    for (const Cell& cell : cells_) {
      whole += cell.whole.load(std::memory_order_relaxed);
      fraction += cell.fraction.load(std::memory_order_relaxed);
    }
    return static_cast<double>(whole) + fraction;
  }

  ClientMetric Collect() const {
    ClientMetric metric;
    metric.counter.value = Value();
    return metric;
  }

 private:
  struct alignas(detail::kCacheLineSize) Cell {
    std::atomic<std::uint64_t> whole{0};
    std::atomic<double> fraction{0.0};
  };
  std::array<Cell, detail::kNumShards> cells_{};
};

// Starts building a Family<Counter>; see detail::Builder.
detail::Builder<Counter> BuildCounter();

}  // namespace engram::metrics
