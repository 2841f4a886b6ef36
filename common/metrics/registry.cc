#include "common/metrics/registry.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "common/metrics/counter.h"
#include "common/metrics/gauge.h"
#include "common/metrics/histogram.h"

namespace engram::metrics {
namespace {

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::Counter:
      return "counter";
    case MetricType::Gauge:
      return "gauge";
    case MetricType::Histogram:
      return "histogram";
    case MetricType::Untyped:
      return "untyped";
  }
  return "unknown";
}

std::string FormatLabels(const Labels& labels) {
  std::string out = "{";
  for (const auto& [name, value] : labels) {
    if (out.size() > 1) out += ",";
    out += name + "=\"" + value + "\"";
  }
  return out + "}";
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(IsAlpha(c) || c == '_' || c == ':' || (i > 0 && IsDigit(c)))) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(IsAlpha(c) || c == '_' || (i > 0 && IsDigit(c)))) return false;
  }
  return true;
}

namespace detail {

void Fatal(const std::string& message) {
  std::fprintf(stderr, "engram::metrics: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

template <typename T>
Family<T>& Builder<T>::Register(Registry& registry) {
  return registry.Add<T>(name_, help_, labels_);
}

template class Builder<Counter>;
template class Builder<Gauge>;
template class Builder<Histogram>;

}  // namespace detail

detail::Builder<Counter> BuildCounter() { return {}; }
detail::Builder<Gauge> BuildGauge() { return {}; }
detail::Builder<Histogram> BuildHistogram() { return {}; }

template <typename T>
Family<T>& Registry::Add(const std::string& name, const std::string& help, const Labels& labels) {
  absl::MutexLock lock(&mutex_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    const Entry& entry = it->second;
    if (entry.type != T::metric_type) {
      detail::Fatal("metric \"" + name + "\" registered as " + TypeName(T::metric_type) +
                    " but already exists as " + TypeName(entry.type));
    }
    auto& family = static_cast<Family<T>&>(*entry.family);
    if (family.GetConstantLabels() != labels) {
      detail::Fatal("metric \"" + name + "\" registered with constant labels " +
                    FormatLabels(labels) + " but already exists with " +
                    FormatLabels(family.GetConstantLabels()));
    }
    return family;
  }
  auto family = std::make_unique<Family<T>>(name, help, labels);  // validates names
  Family<T>& ref = *family;
  families_.emplace(name, Entry{T::metric_type, std::move(family)});
  return ref;
}

template <typename T>
bool Registry::Remove(const Family<T>& family) {
  absl::MutexLock lock(&mutex_);
  auto it = families_.find(family.GetName());
  if (it == families_.end() || it->second.family.get() != &family) return false;
  families_.erase(it);
  return true;
}

template bool Registry::Remove(const Family<Counter>&);
template bool Registry::Remove(const Family<Gauge>&);
template bool Registry::Remove(const Family<Histogram>&);

std::vector<MetricFamily> Registry::Collect() const {
  {
    absl::MutexLock lock(&callbacks_mutex_);
    for (const auto& [id, callback] : callbacks_) callback();
  }
  std::vector<MetricFamily> result;
  absl::ReaderMutexLock lock(&mutex_);
  result.reserve(families_.size());
  for (const auto& [name, entry] : families_) {
    for (MetricFamily& family : entry.family->Collect()) result.push_back(std::move(family));
  }
  return result;
}

Registry::CollectCallbackId Registry::AddCollectCallback(std::function<void()> callback) {
  absl::MutexLock lock(&callbacks_mutex_);
  const CollectCallbackId id = next_callback_id_++;
  callbacks_.emplace(id, std::move(callback));
  return id;
}

void Registry::RemoveCollectCallback(CollectCallbackId id) {
  absl::MutexLock lock(&callbacks_mutex_);
  callbacks_.erase(id);
}

}  // namespace engram::metrics
