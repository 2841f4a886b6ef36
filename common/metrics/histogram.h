// Histogram: counts observations (latencies, sizes) into buckets with fixed
// upper bounds, plus their sum and count, as Prometheus histograms expose
// them (`_bucket{le=...}` cumulative, `_sum`, `_count`).
//
// Thread-safe and lock-free: Observe() does one relaxed fetch_add on the
// bucket counter of the calling thread's shard and one fetch_add on that
// shard's sum, each shard on its own cache lines. Collect() sums the shards.
// `_count` is derived from the bucket counters, so it always equals the
// `+Inf` bucket; `_sum` read concurrently with Observe() may lag or lead the
// counts by the observations in flight. Memory: kNumShards * 64 bytes per 8
// buckets, plus kNumShards * 64 bytes for the sums (2 KiB with 7 bounds).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/metrics/builder.h"
#include "common/metrics/detail.h"
#include "common/metrics/family.h"
#include "common/metrics/metric_family.h"

namespace engram::metrics {

class Histogram {
 public:
  // Upper bounds, strictly increasing, without NaN. A trailing +Inf may be
  // given and is dropped: the +Inf bucket always exists implicitly.
  using BucketBoundaries = std::vector<double>;

  static constexpr MetricType metric_type = MetricType::Histogram;

  // Invalid boundaries are a fatal error (detail::Fatal).
  explicit Histogram(const BucketBoundaries& buckets);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts `value` into the first bucket whose bound is >= value (NaN goes to
  // +Inf only) and adds it to the sum.
  void Observe(double value);

  // Adds pre-bucketed observations: bucket_increments[i] (non-cumulative) to
  // bucket i, where the last entry is the +Inf bucket, so the size must be
  // boundaries().size() + 1 (else fatal). Negative or NaN increments are
  // ignored; fractions are truncated. `sum_of_values` is added to the sum.
  void ObserveMultiple(const std::vector<double>& bucket_increments, double sum_of_values);

  const BucketBoundaries& boundaries() const { return bounds_; }

  ClientMetric Collect() const;

 private:
  static constexpr std::size_t kCountsPerLine = detail::kCacheLineSize / sizeof(std::uint64_t);
  struct alignas(detail::kCacheLineSize) CountLine {
    std::array<std::atomic<std::uint64_t>, kCountsPerLine> counts{};
  };
  struct alignas(detail::kCacheLineSize) SumCell {
    std::atomic<double> sum{0.0};
  };

  std::atomic<std::uint64_t>& CountCell(std::size_t shard, std::size_t bucket) const {
    return lines_[shard * lines_per_shard_ + bucket / kCountsPerLine]
        .counts[bucket % kCountsPerLine];
  }

  BucketBoundaries bounds_;
  std::size_t lines_per_shard_ = 0;
  std::unique_ptr<CountLine[]> lines_;  // kNumShards * lines_per_shard_
  std::array<SumCell, detail::kNumShards> sums_{};
};

// `count` bounds: start, start*factor, start*factor^2, ... (start > 0,
// factor > 1, count >= 1; else fatal).
Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, std::size_t count);
// `count` bounds: start, start+width, start+2*width, ... (width > 0,
// count >= 1; else fatal).
Histogram::BucketBoundaries LinearBuckets(double start, double width, std::size_t count);

// Starts building a Family<Histogram>; see detail::Builder. Each Add() takes
// the bucket boundaries: family.Add({{"op", "get"}}, Histogram::BucketBoundaries{...}).
detail::Builder<Histogram> BuildHistogram();

}  // namespace engram::metrics
