#include "common/metrics/histogram.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace engram::metrics {
namespace {

Histogram::BucketBoundaries Normalize(Histogram::BucketBoundaries bounds) {
  if (!bounds.empty() && bounds.back() == std::numeric_limits<double>::infinity()) {
    bounds.pop_back();
  }
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (std::isnan(bounds[i])) {
      detail::Fatal("histogram bucket boundary " + std::to_string(i) + " is NaN");
    }
    if (i > 0 && !(bounds[i - 1] < bounds[i])) {
      detail::Fatal("histogram bucket boundaries must be strictly increasing (boundary " +
                    std::to_string(i) + ")");
    }
  }
  return bounds;
}

}  // namespace

Histogram::Histogram(const BucketBoundaries& buckets)
    : bounds_(Normalize(buckets)),
      lines_per_shard_((bounds_.size() + 1 + kCountsPerLine - 1) / kCountsPerLine),
      lines_(new CountLine[detail::kNumShards * lines_per_shard_]) {}

void Histogram::Observe(double value) {
  // std::lower_bound would put NaN in bucket 0; it belongs in +Inf only.
  const std::size_t bucket =
      std::isnan(value)
          ? bounds_.size()
          : static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                     bounds_.begin());
  const std::size_t shard = detail::ThisThreadShard();
  CountCell(shard, bucket).fetch_add(1, std::memory_order_relaxed);
  sums_[shard].sum.fetch_add(value, std::memory_order_relaxed);
}

void Histogram::ObserveMultiple(const std::vector<double>& bucket_increments,
                                double sum_of_values) {
  if (bucket_increments.size() != bounds_.size() + 1) {
    detail::Fatal("Histogram::ObserveMultiple: got " + std::to_string(bucket_increments.size()) +
                  " bucket increments, want " + std::to_string(bounds_.size() + 1) +
                  " (one per boundary plus +Inf)");
  }
  const std::size_t shard = detail::ThisThreadShard();
  for (std::size_t i = 0; i < bucket_increments.size(); ++i) {
    const double inc = bucket_increments[i];
    if (!(inc >= 1.0)) continue;  // ignores 0, fractions below 1, negatives, NaN
    const auto n =
        inc >= 1.8e19 ? std::numeric_limits<std::uint64_t>::max() : static_cast<std::uint64_t>(inc);
    CountCell(shard, i).fetch_add(n, std::memory_order_relaxed);
  }
  sums_[shard].sum.fetch_add(sum_of_values, std::memory_order_relaxed);
}

ClientMetric Histogram::Collect() const {
  ClientMetric metric;
  auto& hist = metric.histogram;
  hist.bucket.resize(bounds_.size() + 1);
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b <= bounds_.size(); ++b) {
    for (std::size_t s = 0; s < detail::kNumShards; ++s) {
      cumulative += CountCell(s, b).load(std::memory_order_relaxed);
    }
    hist.bucket[b].cumulative_count = cumulative;
    hist.bucket[b].upper_bound =
        b < bounds_.size() ? bounds_[b] : std::numeric_limits<double>::infinity();
  }
  hist.sample_count = cumulative;
  double sum = 0.0;
  for (const SumCell& cell : sums_) sum += cell.sum.load(std::memory_order_relaxed);
  hist.sample_sum = sum;
  return metric;
}

Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, std::size_t count) {
  if (!(start > 0.0) || !(factor > 1.0) || count == 0) {
    detail::Fatal("ExponentialBuckets: need start > 0, factor > 1, count >= 1");
  }
  Histogram::BucketBoundaries bounds;
  bounds.reserve(count);
  double bound = start;
  for (std::size_t i = 0; i < count; ++i, bound *= factor) bounds.push_back(bound);
  return bounds;
}

Histogram::BucketBoundaries LinearBuckets(double start, double width, std::size_t count) {
  if (!(width > 0.0) || count == 0) {
    detail::Fatal("LinearBuckets: need width > 0, count >= 1");
  }
  Histogram::BucketBoundaries bounds;
  bounds.reserve(count);
  for (std::size_t i = 0; i < count; ++i) bounds.push_back(start + width * static_cast<double>(i));
  return bounds;
}

}  // namespace engram::metrics
