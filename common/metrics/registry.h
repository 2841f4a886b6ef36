// Registry: owns metric families and is the Collectable an Exposer scrapes.
// Mirrors prometheus::Registry (with its default InsertBehavior::Merge).
//
//   auto registry = std::make_shared<Registry>();
//   auto& rows = BuildCounter().Name("engram_shard_rows_total")
//                    .Help("Rows written.").Register(*registry);
//   rows.Add({{"layer", "0"}, {"tier", "hot"}}).Increment();
//
// Registering a name again with the same type and the same constant labels
// returns the existing family (its help text is kept). A name already
// registered with another type or other constant labels is fatal
// (detail::Fatal), as are invalid metric or label names.
//
// Threading: every method is thread-safe. Families (and so every metric
// reference they hand out) live as long as the Registry unless Remove()d.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/builder.h"
#include "common/metrics/family.h"
#include "common/metrics/metric_family.h"

namespace engram::metrics {

class Registry : public Collectable {
 public:
  using CollectCallbackId = std::uint64_t;

  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  ~Registry() override = default;

  // Runs the collect callbacks, then returns one MetricFamily per registered
  // family, sorted by name. Concurrent calls are fine; their callback phases
  // are serialized.
  std::vector<MetricFamily> Collect() const override;

  // Destroys `family` and every metric in it. Returns false if it is not
  // registered here. Outstanding references into it become dangling.
  template <typename T>
  bool Remove(const Family<T>& family);

  // Registers `callback` to run at the start of every Collect(), e.g. to Set()
  // gauges such as process RSS just before a scrape. It runs on the scraping
  // thread and may use metrics and register families, but must not call
  // Add/RemoveCollectCallback or Collect on this registry. Not in
  // prometheus-cpp.
  CollectCallbackId AddCollectCallback(std::function<void()> callback);
  // After this returns, the callback is not running and will not run again.
  void RemoveCollectCallback(CollectCallbackId id);

 private:
  template <typename T>
  friend class detail::Builder;

  template <typename T>
  Family<T>& Add(const std::string& name, const std::string& help, const Labels& labels);

  struct Entry {
    MetricType type;
    std::unique_ptr<Collectable> family;  // a Family<T> of the T matching `type`
  };

  mutable absl::Mutex mutex_;
  std::map<std::string, Entry> families_ ABSL_GUARDED_BY(mutex_);

  mutable absl::Mutex callbacks_mutex_;
  std::map<CollectCallbackId, std::function<void()>> callbacks_ ABSL_GUARDED_BY(callbacks_mutex_);
  CollectCallbackId next_callback_id_ ABSL_GUARDED_BY(callbacks_mutex_) = 1;
};

}  // namespace engram::metrics
