// Tests for common/metrics values, families, the registry and the text
// format: real metrics driven by real threads. The HTTP side is in
// exposer_test.cc (same test binary).

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics/counter.h"
#include "common/metrics/gauge.h"
#include "common/metrics/histogram.h"
#include "common/metrics/registry.h"
#include "common/metrics/text_serializer.h"
#include "gtest/gtest.h"

namespace engram::metrics {
namespace {

constexpr int kThreads = 8;
constexpr int kPerThread = 100000;

template <typename Fn>
void RunThreads(int n, Fn fn) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(fn, i);
  for (auto& t : threads) t.join();
}

std::string Text(const Registry& registry) {
  return TextSerializer().Serialize(registry.Collect());
}

// ---- names -----------------------------------------------------------------

TEST(Names, MetricAndLabelRules) {
  EXPECT_TRUE(IsValidMetricName("engram_shard_rows_total"));
  EXPECT_TRUE(IsValidMetricName("job:rate5m"));
  EXPECT_TRUE(IsValidMetricName("_x9"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("9lives"));
  EXPECT_FALSE(IsValidMetricName("has-dash"));
  EXPECT_FALSE(IsValidMetricName("has space"));
  EXPECT_TRUE(IsValidLabelName("tier"));
  EXPECT_TRUE(IsValidLabelName("_layer0"));
  EXPECT_FALSE(IsValidLabelName(""));
  EXPECT_FALSE(IsValidLabelName("__reserved"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("0a"));
}

TEST(NamesDeathTest, InvalidNamesAbortWithMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Registry registry;
  EXPECT_DEATH(BuildCounter().Name("bad-name").Register(registry),
               "engram::metrics: invalid metric name \"bad-name\"");
  EXPECT_DEATH(BuildGauge().Name("ok").Labels({{"__x", "1"}}).Register(registry),
               "invalid label name \"__x\"");
  auto& family = BuildCounter().Name("ok_total").Labels({{"shard", "1"}}).Register(registry);
  EXPECT_DEATH(family.Add({{"bad label", "1"}}), "invalid label name \"bad label\"");
  EXPECT_DEATH(family.Add({{"shard", "2"}}), "already a constant label");
  auto& hist = BuildHistogram().Name("lat_seconds").Register(registry);
  EXPECT_DEATH(hist.Add({{"le", "1"}}, Histogram::BucketBoundaries{1}), "\"le\" is reserved");
  EXPECT_DEATH(BuildGauge().Name("ok_total").Register(registry),
               "registered as gauge but already exists as counter");
  EXPECT_DEATH(BuildCounter().Name("ok_total").Labels({{"shard", "2"}}).Register(registry),
               "already exists with \\{shard=\"1\"\\}");
  EXPECT_DEATH(Histogram(Histogram::BucketBoundaries{1, 1}), "strictly increasing");
  EXPECT_DEATH(Histogram(Histogram::BucketBoundaries{2, 1}), "strictly increasing");
}

// ---- counter / gauge / histogram values -----------------------------------

TEST(Counter, ConcurrentIncrementsAreExact) {
  Registry registry;
  auto& family = BuildCounter().Name("engram_test_ops_total").Help("ops").Register(registry);
  Counter& ones = family.Add({{"kind", "one"}});
  Counter& mixed = family.Add({{"kind", "mixed"}});
  RunThreads(kThreads, [&](int) {
    for (int i = 0; i < kPerThread; ++i) {
      ones.Increment();
      mixed.Increment(2.0);  // whole: uint64 path
      mixed.Increment(0.5);  // fractional: double path (exact in binary)
    }
  });
  EXPECT_EQ(ones.Value(), double{kThreads} * kPerThread);
  EXPECT_EQ(mixed.Value(), 2.5 * kThreads * kPerThread);
}

TEST(Counter, IgnoresNegativeAndNaN) {
  Counter c;
  c.Increment(3);
  c.Increment(-1);
  c.Increment(std::numeric_limits<double>::quiet_NaN());
  c.Increment(1e300);  // too big for the integer path, still counted
  EXPECT_EQ(c.Value(), 3 + 1e300);
}

TEST(Gauge, ConcurrentIncrementDecrementAndSet) {
  Registry registry;
  auto& family = BuildGauge().Name("engram_test_depth").Help("depth").Register(registry);
  Gauge& g = family.Add({});
  RunThreads(kThreads, [&](int t) {
    for (int i = 0; i < kPerThread; ++i) {
      if (t % 2 == 0) {
        g.Increment();
        g.Increment(3);
      } else {
        g.Decrement();
      }
    }
  });
  // 4 even threads add 4 per step, 4 odd threads take 1.
  EXPECT_EQ(g.Value(), (kThreads / 2) * kPerThread * 4.0 - (kThreads / 2) * kPerThread * 1.0);
  g.Set(-7.25);
  EXPECT_EQ(g.Value(), -7.25);
  g.SetToCurrentTime();
  EXPECT_GT(g.Value(), 1.6e9);
}

TEST(Histogram, ConcurrentObservationsAreExact) {
  Histogram h({1, 2, 4});
  RunThreads(kThreads, [&](int t) {
    for (int i = 0; i < kPerThread; ++i) h.Observe(t % 2 == 0 ? 0.5 : 3.0);
  });
  const auto hist = h.Collect().histogram;
  const std::uint64_t half = std::uint64_t{kThreads / 2} * kPerThread;
  ASSERT_EQ(hist.bucket.size(), 4u);
  EXPECT_EQ(hist.bucket[0].cumulative_count, half);      // le=1: the 0.5s
  EXPECT_EQ(hist.bucket[1].cumulative_count, half);      // le=2
  EXPECT_EQ(hist.bucket[2].cumulative_count, 2 * half);  // le=4: + the 3s
  EXPECT_EQ(hist.bucket[3].cumulative_count, 2 * half);  // +Inf
  EXPECT_TRUE(std::isinf(hist.bucket[3].upper_bound));
  EXPECT_EQ(hist.sample_count, 2 * half);
  EXPECT_EQ(hist.sample_sum, 0.5 * half + 3.0 * half);
}

TEST(Histogram, BucketEdgesNaNAndObserveMultiple) {
  const double inf = std::numeric_limits<double>::infinity();
  Histogram h({0.25, 1, inf});  // trailing +Inf is implicit and dropped
  EXPECT_EQ(h.boundaries(), (Histogram::BucketBoundaries{0.25, 1}));
  h.Observe(0.25);  // a value equal to a bound falls into that bucket (le)
  h.Observe(1);
  h.Observe(1.0000001);
  h.Observe(std::numeric_limits<double>::quiet_NaN());  // +Inf only
  h.ObserveMultiple({2, 0, 5}, 10);
  const auto hist = h.Collect().histogram;
  EXPECT_EQ(hist.bucket[0].cumulative_count, 3u);
  EXPECT_EQ(hist.bucket[1].cumulative_count, 4u);
  EXPECT_EQ(hist.bucket[2].cumulative_count, 11u);
  EXPECT_EQ(hist.sample_count, 11u);
  EXPECT_TRUE(std::isnan(hist.sample_sum));
}

TEST(Histogram, BucketHelpers) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (Histogram::BucketBoundaries{1, 2, 4, 8}));
  EXPECT_EQ(LinearBuckets(0, 0.5, 3), (Histogram::BucketBoundaries{0, 0.5, 1}));
}

// ---- families and registry -------------------------------------------------

TEST(Family, AddReturnsSameMetricForSameLabels) {
  Registry registry;
  auto& family = BuildCounter().Name("engram_shard_rows_total").Help("rows").Register(registry);
  Counter& a = family.Add({{"layer", "0"}, {"tier", "hot"}});
  Counter& b = family.Add({{"tier", "hot"}, {"layer", "0"}});
  Counter& c = family.Add({{"layer", "1"}, {"tier", "hot"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
  // Growing the family does not move existing metrics.
  for (int i = 0; i < 1000; ++i) family.Add({{"layer", std::to_string(i + 2)}});
  EXPECT_EQ(&family.Add({{"layer", "0"}, {"tier", "hot"}}), &a);
  EXPECT_TRUE(family.Has({{"layer", "1"}, {"tier", "hot"}}));
  family.Remove(&c);
  EXPECT_FALSE(family.Has({{"layer", "1"}, {"tier", "hot"}}));
}

TEST(Registry, ReRegisterReturnsSameFamilyAndRemoveWorks) {
  Registry registry;
  auto& f1 =
      BuildGauge().Name("engram_g").Help("first").Labels({{"shard", "1"}}).Register(registry);
  auto& f2 =
      BuildGauge().Name("engram_g").Help("second").Labels({{"shard", "1"}}).Register(registry);
  EXPECT_EQ(&f1, &f2);
  EXPECT_EQ(f2.GetHelp(), "first");
  f1.Add({}).Set(1);
  EXPECT_TRUE(registry.Remove(f1));
  EXPECT_EQ(Text(registry), "");
  Family<Gauge> other("engram_g", "", {});
  EXPECT_FALSE(registry.Remove(other));
}

TEST(Registry, StableOrderAndConstantLabels) {
  Registry registry;
  auto& zeta = BuildGauge().Name("zeta").Help("Z.").Register(registry);
  auto& alpha =
      BuildCounter().Name("alpha_total").Help("A.").Labels({{"node", "n1"}}).Register(registry);
  BuildCounter().Name("empty_total").Help("No samples, not printed.").Register(registry);
  zeta.Add({}).Set(0.5);
  alpha.Add({{"op", "put"}}).Increment(2);
  alpha.Add({{"op", "get"}}).Increment();
  alpha.Add({{"a", "first"}}).Increment(1e20);
  const std::string expected =
      "# HELP alpha_total A.\n"
      "# TYPE alpha_total counter\n"
      "alpha_total{a=\"first\",node=\"n1\"} 1e+20\n"
      "alpha_total{node=\"n1\",op=\"get\"} 1\n"
      "alpha_total{node=\"n1\",op=\"put\"} 2\n"
      "# HELP zeta Z.\n"
      "# TYPE zeta gauge\n"
      "zeta 0.5\n";
  EXPECT_EQ(Text(registry), expected);
  EXPECT_EQ(Text(registry), expected);  // and again: deterministic
}

TEST(Registry, CollectCallbacksRunBeforeEachCollection) {
  Registry registry;
  auto& rss = BuildGauge().Name("engram_rss_bytes").Help("RSS.").Register(registry).Add({});
  int calls = 0;
  const auto id = registry.AddCollectCallback([&] { rss.Set(++calls * 1024); });
  EXPECT_NE(Text(registry).find("engram_rss_bytes 1024\n"), std::string::npos);
  EXPECT_NE(Text(registry).find("engram_rss_bytes 2048\n"), std::string::npos);
  registry.RemoveCollectCallback(id);
  EXPECT_NE(Text(registry).find("engram_rss_bytes 2048\n"), std::string::npos);
  EXPECT_EQ(calls, 2);
}

// ---- text format -----------------------------------------------------------

TEST(TextFormat, Values) {
  EXPECT_EQ(TextSerializer::FormatValue(1), "1");
  EXPECT_EQ(TextSerializer::FormatValue(0.25), "0.25");
  EXPECT_EQ(TextSerializer::FormatValue(-3.5), "-3.5");
  EXPECT_EQ(TextSerializer::FormatValue(0.1), "0.1");
  EXPECT_EQ(TextSerializer::FormatValue(400000), "400000");
  EXPECT_EQ(TextSerializer::FormatValue(-1e15), "-1000000000000000");
  EXPECT_EQ(TextSerializer::FormatValue(1e20), "1e+20");
  EXPECT_EQ(TextSerializer::FormatValue(0.0001), "1e-04");
  EXPECT_EQ(TextSerializer::FormatValue(-0.0), "0");
  EXPECT_EQ(TextSerializer::FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(TextSerializer::FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(TextSerializer::FormatValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
}

TEST(TextFormat, EscapesLabelValuesAndHelp) {
  Registry registry;
  auto& family = BuildCounter()
                     .Name("engram_escape_total")
                     .Help("Back\\slash and\nnewline, \"quotes\" kept.")
                     .Register(registry);
  family.Add({{"path", "C:\\dir\n\"x\""}}).Increment();
  EXPECT_EQ(Text(registry),
            "# HELP engram_escape_total Back\\\\slash and\\nnewline, \"quotes\" kept.\n"
            "# TYPE engram_escape_total counter\n"
            "engram_escape_total{path=\"C:\\\\dir\\n\\\"x\\\"\"} 1\n");
}

TEST(TextFormat, HistogramBucketsAreCumulative) {
  Registry registry;
  auto& family = BuildHistogram()
                     .Name("engram_get_latency_seconds")
                     .Help("Get latency.")
                     .Labels({{"shard", "0"}})
                     .Register(registry);
  auto& h = family.Add({{"op", "get"}}, Histogram::BucketBoundaries{0.005, 0.1, 1});
  for (double v : {0.001, 0.004, 0.05, 0.5, 0.5, 7.0}) h.Observe(v);
  EXPECT_EQ(Text(registry),
            "# HELP engram_get_latency_seconds Get latency.\n"
            "# TYPE engram_get_latency_seconds histogram\n"
            "engram_get_latency_seconds_bucket{op=\"get\",shard=\"0\",le=\"0.005\"} 2\n"
            "engram_get_latency_seconds_bucket{op=\"get\",shard=\"0\",le=\"0.1\"} 3\n"
            "engram_get_latency_seconds_bucket{op=\"get\",shard=\"0\",le=\"1\"} 5\n"
            "engram_get_latency_seconds_bucket{op=\"get\",shard=\"0\",le=\"+Inf\"} 6\n"
            "engram_get_latency_seconds_sum{op=\"get\",shard=\"0\"} 8.055\n"
            "engram_get_latency_seconds_count{op=\"get\",shard=\"0\"} 6\n");
}

}  // namespace
}  // namespace engram::metrics
