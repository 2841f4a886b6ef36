// Tests for MetricsExposer (a live civetweb server on an ephemeral loopback
// port, fetched over a real socket) and the scrape helpers.
#include "common/net/prometheus_exposer.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/net/prometheus_scrape.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace engram {
namespace {

std::shared_ptr<prometheus::Registry> PopulatedRegistry() {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& rows =
      prometheus::BuildCounter().Name("engram_rows_total").Help("Rows.").Register(*registry);
  rows.Add({{"layer", "0"}, {"tier", "pinned"}}).Increment(3);
  rows.Add({{"layer", "1"}, {"tier", "disk"}}).Increment(4);
  prometheus::BuildGauge()
      .Name("engram_label_escapes")
      .Help("A label value that needs escaping.")
      .Register(*registry)
      .Add({{"path", "a\"b\\c\nd"}})
      .Set(7);
  return registry;
}

TEST(MetricsExposer, ServesRegisteredCollectables) {
  auto exposer = MetricsExposer::Start("127.0.0.1:0");
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  ASSERT_GT((*exposer)->port(), 0);
  auto registry = PopulatedRegistry();
  (*exposer)->exposer().RegisterCollectable(registry);
  absl::StatusOr<scrape::HttpResponse> r = scrape::HttpGet((*exposer)->port(), "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  const std::vector<scrape::Sample> samples = scrape::ParseSamples(r->body);
  EXPECT_EQ(scrape::SumSamples(samples, "engram_rows_total"), 7);
  EXPECT_EQ(scrape::SumSamples(samples, "engram_rows_total", {{"tier", "disk"}}), 4);
  EXPECT_EQ(scrape::SumSamples(samples, "engram_label_escapes", {{"path", "a\"b\\c\nd"}}), 7);
}

TEST(MetricsExposer, StopsPromptly) {
  auto exposer = MetricsExposer::Start("127.0.0.1:0");
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  auto registry = PopulatedRegistry();
  (*exposer)->exposer().RegisterCollectable(registry);
  ASSERT_TRUE(scrape::HttpGet((*exposer)->port(), "/metrics").ok());
  // civetweb alone needs up to 2 s to notice a stop; the destructor wakes it.
  const auto start = std::chrono::steady_clock::now();
  exposer->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
}

TEST(MetricsExposer, TakenPortIsUnavailable) {
  auto first = MetricsExposer::Start("127.0.0.1:0");
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = MetricsExposer::Start(address);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_NE(second.status().message().find("cannot listen on \"" + address + "\""),
            std::string::npos)
      << second.status();
  EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status();
  // The first one is unharmed.
  EXPECT_TRUE(scrape::HttpGet((*first)->port(), "/metrics").ok());
}

TEST(MetricsExposer, MalformedAddressIsInvalidArgument) {
  EXPECT_EQ(MetricsExposer::Start("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsExposer::Start("not-an-address").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Scrape, ParsesTheTextFormat) {
  const std::string page = prometheus::TextSerializer().Serialize(PopulatedRegistry()->Collect());
  const std::vector<scrape::Sample> samples = scrape::ParseSamples(page + "garbage\n# comment\n");
  EXPECT_EQ(samples.size(), 3u) << page;
  EXPECT_EQ(scrape::SumSamples(samples, "engram_rows_total", {{"layer", "0"}}), 3);
  EXPECT_EQ(scrape::SumSamples(samples, "engram_missing"), 0);
}

}  // namespace
}  // namespace engram
