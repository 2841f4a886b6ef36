#include "common/metrics/text_serializer.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <system_error>

namespace engram::metrics {
namespace {

void AppendValue(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
  } else if (value == std::trunc(value) && std::fabs(value) < 9007199254740992.0) {
    // Whole numbers below 2^53 as plain integers: "400000", not "4e+05".
    char buf[24];
    const auto result = std::to_chars(buf, buf + sizeof(buf), static_cast<std::int64_t>(value));
    out.append(buf, result.ptr);
  } else {
    // Shortest representation that parses back to the same double.
    char buf[32];
    const auto result = std::to_chars(buf, buf + sizeof(buf), value);
    out.append(buf, result.ptr);
  }
}

void AppendCount(std::string& out, std::uint64_t value) {
  char buf[24];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  out.append(buf, result.ptr);
}

void AppendEscaped(std::string& out, std::string_view in, bool quote) {
  for (const char c : in) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '"':
        if (quote) {
          out += "\\\"";
          break;
        }
        [[fallthrough]];
      default:
        out += c;
    }
  }
}

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
  return "untyped";
}

// Appends `name<suffix>{labels[,extra_name="extra_value"]} ` (with the
// trailing space); the caller appends the value and newline.
void AppendSeries(std::string& out, const std::string& name, std::string_view suffix,
                  const ClientMetric& metric, std::string_view extra_name = {},
                  double extra_value = 0.0) {
  out += name;
  out += suffix;
  if (!metric.label.empty() || !extra_name.empty()) {
    out += '{';
    bool first = true;
    for (const auto& label : metric.label) {
      if (!first) out += ',';
      first = false;
      out += label.name;
      out += "=\"";
      AppendEscaped(out, label.value, /*quote=*/true);
      out += '"';
    }
    if (!extra_name.empty()) {
      if (!first) out += ',';
      out += extra_name;
      out += "=\"";
      AppendValue(out, extra_value);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
}

void AppendSample(std::string& out, const std::string& name, const ClientMetric& metric,
                  double value) {
  AppendSeries(out, name, "", metric);
  AppendValue(out, value);
  out += '\n';
}

void AppendFamily(std::string& out, const MetricFamily& family) {
  if (family.metric.empty()) return;
  out += "# HELP ";
  out += family.name;
  if (!family.help.empty()) {
    out += ' ';
    AppendEscaped(out, family.help, /*quote=*/false);
  }
  out += "\n# TYPE ";
  out += family.name;
  out += ' ';
  out += TypeName(family.type);
  out += '\n';
  for (const ClientMetric& metric : family.metric) {
    switch (family.type) {
      case MetricType::Counter:
        AppendSample(out, family.name, metric, metric.counter.value);
        break;
      case MetricType::Gauge:
        AppendSample(out, family.name, metric, metric.gauge.value);
        break;
      case MetricType::Untyped:
        AppendSample(out, family.name, metric, metric.untyped.value);
        break;
      case MetricType::Histogram: {
        const auto& hist = metric.histogram;
        constexpr double kInf = std::numeric_limits<double>::infinity();
        bool wrote_inf = false;
        for (const auto& bucket : hist.bucket) {
          AppendSeries(out, family.name, "_bucket", metric, "le", bucket.upper_bound);
          AppendCount(out, bucket.cumulative_count);
          out += '\n';
          wrote_inf = bucket.upper_bound == kInf;
        }
        if (!wrote_inf) {
          AppendSeries(out, family.name, "_bucket", metric, "le", kInf);
          AppendCount(out, hist.sample_count);
          out += '\n';
        }
        AppendSeries(out, family.name, "_sum", metric);
        AppendValue(out, hist.sample_sum);
        out += '\n';
        AppendSeries(out, family.name, "_count", metric);
        AppendCount(out, hist.sample_count);
        out += '\n';
        break;
      }
    }
  }
}

}  // namespace

std::string TextSerializer::Serialize(const std::vector<MetricFamily>& families) const {
  std::string out;
  for (const MetricFamily& family : families) AppendFamily(out, family);
  return out;
}

void TextSerializer::Serialize(std::ostream& out, const std::vector<MetricFamily>& families) const {
  out << Serialize(families);
}

std::string TextSerializer::FormatValue(double value) {
  std::string out;
  AppendValue(out, value);
  return out;
}

std::string TextSerializer::EscapeLabelValue(std::string_view in) {
  std::string out;
  AppendEscaped(out, in, /*quote=*/true);
  return out;
}

std::string TextSerializer::EscapeHelp(std::string_view in) {
  std::string out;
  AppendEscaped(out, in, /*quote=*/false);
  return out;
}

}  // namespace engram::metrics
