// Internals shared by the metric classes: name validation, the fatal-error
// path for programmer errors, and the per-thread shard index that keeps
// increments off shared cache lines. Not part of the public API except
// IsValidMetricName / IsValidLabelName.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>

namespace engram::metrics {

// Prometheus data model rules: metric names match [a-zA-Z_:][a-zA-Z0-9_:]*,
// label names match [a-zA-Z_][a-zA-Z0-9_]* and must not start with "__"
// (reserved for Prometheus itself).
bool IsValidMetricName(std::string_view name);
bool IsValidLabelName(std::string_view name);

namespace detail {

// Prints "engram::metrics: <message>" to stderr and aborts. Used for
// programmer errors (invalid names, mismatched re-registration), where
// prometheus-cpp would throw.
[[noreturn]] void Fatal(const std::string& message);

inline constexpr std::size_t kCacheLineSize = 64;

// Number of cells a sharded metric spreads its writes over. Threads are
// assigned to shards round-robin, so up to kNumShards threads update a metric
// without sharing a cache line.
inline constexpr std::size_t kNumShards = 16;

// The calling thread's shard in [0, kNumShards). Stable for the thread's life.
inline std::size_t ThisThreadShard() {
  constexpr std::size_t kUnassigned = ~std::size_t{0};
  // Constant-initialized, so reading it needs no TLS init guard.
  thread_local std::size_t shard = kUnassigned;
  if (shard == kUnassigned) [[unlikely]] {
    static std::atomic<std::size_t> next{0};
    shard = next.fetch_add(1, std::memory_order_relaxed) % kNumShards;
  }
  return shard;
}

}  // namespace detail
}  // namespace engram::metrics
