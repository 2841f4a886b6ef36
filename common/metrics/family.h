// Family<T>: all metrics of one name and type (T = Counter, Gauge or
// Histogram), one per distinct set of variable labels, plus constant labels
// shared by all of them. Created by BuildCounter()/BuildGauge()/
// BuildHistogram()...Register(registry), which owns it.
//
// Threading: every method is thread-safe. Add(), Remove() and Has() take the
// family's mutex, so look a metric up once and keep the reference; updating
// the returned metric takes no lock. Collect() holds the mutex (shared) while
// it reads the metrics.
//
// Lifetime: a reference returned by Add() stays valid until that metric is
// Remove()d or the family (i.e. its Registry) is destroyed.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/detail.h"
#include "common/metrics/metric_family.h"

namespace engram::metrics {

template <typename T>
class Family : public Collectable {
 public:
  // Invalid names, or a constant label named "le" on a histogram family, are
  // fatal (detail::Fatal). Prefer the builders over calling this directly.
  Family(const std::string& name, const std::string& help, const Labels& constant_labels)
      : name_(name), help_(help), constant_labels_(constant_labels) {
    if (!IsValidMetricName(name_)) detail::Fatal("invalid metric name \"" + name_ + "\"");
    for (const auto& [label, value] : constant_labels_) CheckLabelName(label);
  }
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  // Returns the metric with these variable labels, constructing it from
  // `args` (e.g. the BucketBoundaries of a Histogram) if it does not exist
  // yet. With an existing label set, `args` are ignored and the same object
  // is returned. An invalid label name, or one that repeats a constant
  // label, is fatal.
  template <typename... Args>
  T& Add(const Labels& labels, Args&&... args) {
    absl::MutexLock lock(&mutex_);
    auto it = metrics_.find(labels);
    if (it != metrics_.end()) return *it->second;
    for (const auto& [label, value] : labels) {
      CheckLabelName(label);
      if (constant_labels_.count(label) != 0) {
        detail::Fatal("metric \"" + name_ + "\": label \"" + label +
                      "\" is already a constant label of the family");
      }
    }
    auto metric = std::make_unique<T>(std::forward<Args>(args)...);
    T& ref = *metric;
    metrics_.emplace(labels, std::move(metric));
    return ref;
  }

  // Destroys `metric` (which must have come from this family's Add(); others
  // are ignored). References to it become dangling.
  void Remove(T* metric) {
    absl::MutexLock lock(&mutex_);
    for (auto it = metrics_.begin(); it != metrics_.end(); ++it) {
      if (it->second.get() == metric) {
        metrics_.erase(it);
        return;
      }
    }
  }

  bool Has(const Labels& labels) const {
    absl::ReaderMutexLock lock(&mutex_);
    return metrics_.count(labels) != 0;
  }

  const std::string& GetName() const { return name_; }
  const std::string& GetHelp() const { return help_; }
  const Labels& GetConstantLabels() const { return constant_labels_; }

  // One MetricFamily whose samples are ordered by variable label set; each
  // sample's labels are the constant and variable labels, sorted by name.
  std::vector<MetricFamily> Collect() const override {
    MetricFamily family;
    family.name = name_;
    family.help = help_;
    family.type = T::metric_type;
    absl::ReaderMutexLock lock(&mutex_);
    family.metric.reserve(metrics_.size());
    for (const auto& [labels, metric] : metrics_) {
      ClientMetric sample = metric->Collect();
      Labels all = constant_labels_;
      all.insert(labels.begin(), labels.end());
      sample.label.reserve(all.size());
      for (const auto& [label, value] : all) sample.label.push_back({label, value});
      family.metric.push_back(std::move(sample));
    }
    std::vector<MetricFamily> result;
    result.push_back(std::move(family));
    return result;
  }

 private:
  void CheckLabelName(const std::string& label) const {
    if (!IsValidLabelName(label)) {
      detail::Fatal("metric \"" + name_ + "\": invalid label name \"" + label + "\"");
    }
    if (T::metric_type == MetricType::Histogram && label == "le") {
      detail::Fatal("histogram \"" + name_ + "\": label name \"le\" is reserved");
    }
  }

  const std::string name_;
  const std::string help_;
  const Labels constant_labels_;
  mutable absl::Mutex mutex_;
  std::map<Labels, std::unique_ptr<T>> metrics_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace engram::metrics
