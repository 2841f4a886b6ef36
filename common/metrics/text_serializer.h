// TextSerializer: writes collected families in the Prometheus text
// exposition format, version 0.0.4 (what promtool and Prometheus scrape).
// Mirrors prometheus::TextSerializer.
//
// Output is deterministic for a given input: families in the order given
// (Registry::Collect sorts them by name), samples in the order given (by
// label set), labels in the order given (by name). A family with no samples
// is omitted entirely. Values use the shortest round-trip decimal form, and
// +Inf, -Inf, NaN for non-finite ones.
//
// Stateless; safe to use from any number of threads.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics/metric_family.h"

namespace engram::metrics {

class TextSerializer {
 public:
  std::string Serialize(const std::vector<MetricFamily>& families) const;
  void Serialize(std::ostream& out, const std::vector<MetricFamily>& families) const;

  // Building blocks, exposed for tests and custom collectables.
  static std::string FormatValue(double value);              // "1", "0.25", "+Inf", "NaN"
  static std::string EscapeLabelValue(std::string_view in);  // \\  \"  \n
  static std::string EscapeHelp(std::string_view in);        // \\  \n
};

}  // namespace engram::metrics
