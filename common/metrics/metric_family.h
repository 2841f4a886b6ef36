// Plain data that a collection produces, and the interface of anything that
// can be collected. Mirrors prometheus-cpp's client_metric.h,
// metric_family.h, metric_type.h and collectable.h in one header.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace engram::metrics {

// A label set: label name -> label value. Ordered, so equal sets compare equal
// and iterate in name order (which is also the order samples are written in).
using Labels = std::map<std::string, std::string>;

enum class MetricType {
  Counter,
  Gauge,
  Histogram,
  Untyped,
};

// One sample (or, for a histogram, one group of samples) of one label set, as
// returned by Counter::Collect(), Gauge::Collect(), Histogram::Collect().
// A value type; no threading concerns.
struct ClientMetric {
  struct Label {
    std::string name;
    std::string value;
    bool operator==(const Label&) const = default;
  };
  // Constant labels of the family plus the metric's own labels, sorted by
  // name. Filled in by Family::Collect().
  std::vector<Label> label;

  struct Counter {
    double value = 0.0;
  };
  Counter counter;

  struct Gauge {
    double value = 0.0;
  };
  Gauge gauge;

  struct Bucket {
    std::uint64_t cumulative_count = 0;
    double upper_bound = 0.0;  // the last bucket's is +Inf
  };
  struct Histogram {
    std::uint64_t sample_count = 0;
    double sample_sum = 0.0;
    std::vector<Bucket> bucket;  // cumulative, ascending upper_bound
  };
  Histogram histogram;

  struct Untyped {
    double value = 0.0;
  };
  Untyped untyped;
};

// Everything collected from one family: the unit the text format groups under
// one `# HELP` / `# TYPE` header. A value type.
struct MetricFamily {
  std::string name;
  std::string help;
  MetricType type = MetricType::Untyped;
  std::vector<ClientMetric> metric;
};

// Something an Exposer can scrape: a Registry, or a custom source.
// Implementations must make Collect() safe to call from any thread,
// concurrently with updates and with other Collect() calls.
class Collectable {
 public:
  virtual ~Collectable() = default;
  virtual std::vector<MetricFamily> Collect() const = 0;
};

}  // namespace engram::metrics
