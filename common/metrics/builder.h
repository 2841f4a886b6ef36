// Fluent builder behind BuildCounter() / BuildGauge() / BuildHistogram(),
// shaped like prometheus-cpp's detail::Builder:
//
//   auto& family = BuildCounter()
//                      .Name("engram_shard_rows_total")
//                      .Help("Rows written.")
//                      .Labels({{"shard", "3"}})   // constant labels
//                      .Register(registry);
//
// A Builder is a short-lived value; use it from one thread. Register() is
// thread-safe with respect to the registry.
#pragma once

#include <string>

#include "common/metrics/metric_family.h"

namespace engram::metrics {

class Registry;
template <typename T>
class Family;

namespace detail {

template <typename T>
class Builder {
 public:
  // Constant labels, attached to every metric of the family.
  Builder& Labels(const ::engram::metrics::Labels& labels) {
    labels_ = labels;
    return *this;
  }
  Builder& Name(const std::string& name) {
    name_ = name;
    return *this;
  }
  Builder& Help(const std::string& help) {
    help_ = help;
    return *this;
  }
  // Returns the registry's family of this name, creating it if needed. See
  // Registry for the rules on registering a name twice; invalid names are a
  // fatal error (detail::Fatal).
  Family<T>& Register(Registry& registry);

 private:
  ::engram::metrics::Labels labels_;
  std::string name_;
  std::string help_;
};

}  // namespace detail
}  // namespace engram::metrics
