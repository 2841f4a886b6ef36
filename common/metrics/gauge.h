// Gauge: a value that goes up and down (queue depth, RSS, open files).
//
// Thread-safe and lock-free: one cache-line-padded std::atomic<double>.
// Set() is a store; Increment()/Decrement() are atomic read-modify-writes, so
// they never lose updates, but unlike Counter the cell is shared by all
// threads (Set() has to see a single value). For a very hot path prefer a
// Counter, or keep a thread-local tally and Set() it from a collect callback
// (Registry::AddCollectCallback).
#pragma once

#include <atomic>
#include <chrono>

#include "common/metrics/builder.h"
#include "common/metrics/detail.h"
#include "common/metrics/family.h"
#include "common/metrics/metric_family.h"

namespace engram::metrics {

class alignas(detail::kCacheLineSize) Gauge {
 public:
  static constexpr MetricType metric_type = MetricType::Gauge;

  Gauge() = default;
  explicit Gauge(double value) : value_(value) {}
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Increment() { Increment(1.0); }
  void Increment(double value) { value_.fetch_add(value, std::memory_order_relaxed); }
  void Decrement() { Decrement(1.0); }
  void Decrement(double value) { value_.fetch_sub(value, std::memory_order_relaxed); }
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }

  // Sets the gauge to the current Unix time in seconds.
  void SetToCurrentTime() {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    Set(std::chrono::duration<double>(now).count());
  }

  double Value() const { return value_.load(std::memory_order_relaxed); }

  ClientMetric Collect() const {
    ClientMetric metric;
    metric.gauge.value = Value();
    return metric;
  }

 private:
  std::atomic<double> value_{0.0};
};

// Starts building a Family<Gauge>; see detail::Builder.
detail::Builder<Gauge> BuildGauge();

}  // namespace engram::metrics
