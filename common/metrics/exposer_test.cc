// Tests for common/metrics' Exposer: a live civetweb server on an ephemeral
// loopback port, fetched over a real socket, with promtool as the judge of
// the text format. Part of the metrics_test binary.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/metrics/counter.h"
#include "common/metrics/exposer.h"
#include "common/metrics/gauge.h"
#include "common/metrics/histogram.h"
#include "common/metrics/registry.h"
#include "common/metrics/scrape.h"
#include "common/metrics/text_serializer.h"
#include "gtest/gtest.h"

namespace engram::metrics {
namespace {

constexpr char kPromtool[] = "/usr/bin/promtool";

std::string Text(const Registry& registry) {
  return TextSerializer().Serialize(registry.Collect());
}

// A transport failure reads as status -1 with the reason in `error`.
struct Fetched : metrics::HttpResponse {
  std::string error;
};

Fetched HttpGet(int port, const std::string& path, const std::string& method = "GET") {
  Fetched f;
  absl::StatusOr<metrics::HttpResponse> r = metrics::HttpGet(port, path, method);
  if (r.ok()) {
    static_cast<metrics::HttpResponse&>(f) = *std::move(r);
  } else {
    f.status = -1;
    f.error = std::string(r.status().message());
  }
  return f;
}

// Runs `promtool check metrics` on `text`; returns its exit code and output.
std::pair<int, std::string> Promtool(const std::string& text) {
  // A file of its own: ctest runs the tests of this binary in parallel.
  std::string file = testing::TempDir() + "/metrics_test_scrape_XXXXXX";
  const int fd = ::mkstemp(file.data());
  if (fd < 0) return {-1, "mkstemp failed"};
  ::close(fd);
  std::ofstream(file) << text;
  const std::string command = std::string(kPromtool) + " check metrics < " + file + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  char buf[512];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) output.append(buf, n);
  const int status = ::pclose(pipe);
  ::unlink(file.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// A registry with one of everything, including awkward labels and values.
std::shared_ptr<Registry> PopulatedRegistry() {
  auto registry = std::make_shared<Registry>();
  auto& rows = BuildCounter()
                   .Name("engram_shard_rows_total")
                   .Help("Rows written.\nSecond line with a \\ backslash.")
                   .Labels({{"shard", "0"}})
                   .Register(*registry);
  rows.Add({{"layer", "0"}, {"tier", "hot"}}).Increment(41);
  rows.Add({{"layer", "0"}, {"tier", "hot"}}).Increment();
  rows.Add({{"layer", "1"}, {"tier", "we\"ird\\\nvalue"}}).Increment(0.5);
  auto& depth = BuildGauge().Name("engram_queue_depth").Help("Queue depth.").Register(*registry);
  depth.Add({{"queue", "flush"}}).Set(-3);
  depth.Add({{"queue", "inf"}}).Set(std::numeric_limits<double>::infinity());
  depth.Add({{"queue", "neginf"}}).Set(-std::numeric_limits<double>::infinity());
  depth.Add({{"queue", "nan"}}).Set(std::numeric_limits<double>::quiet_NaN());
  auto& latency = BuildHistogram()
                      .Name("engram_request_duration_seconds")
                      .Help("Request latency.")
                      .Register(*registry);
  auto& get = latency.Add({{"op", "get"}}, ExponentialBuckets(0.001, 4, 6));
  for (int i = 0; i < 100; ++i) get.Observe(0.0007 * i);
  latency.Add({{"op", "put"}}, Histogram::BucketBoundaries{0.1});
  return registry;
}

TEST(Promtool, RejectsBrokenExposition) {  // so that its approval below means something
  ASSERT_EQ(::access(kPromtool, X_OK), 0)
      << kPromtool << " is missing; run scripts/setup.sh (it installs the prometheus package)";
  EXPECT_NE(Promtool("# TYPE x_total counter\nx_total{a=\"unterminated} 1\n").first, 0);
  EXPECT_NE(Promtool("# HELP y_total Y.\n# TYPE y_total counter\ny_total one\n").first, 0);
}

TEST(Exposer, ServesMetricsThatPromtoolAccepts) {
  ASSERT_EQ(::access(kPromtool, X_OK), 0)
      << kPromtool << " is missing; run scripts/setup.sh (it installs the prometheus package)";
  auto registry = PopulatedRegistry();
  auto exposer = Exposer::Create("127.0.0.1:0");
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  (*exposer)->RegisterCollectable(registry);
  const int port = (*exposer)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ((*exposer)->GetListeningPorts(), std::vector<int>{port});

  const Fetched response = HttpGet(port, "/metrics");
  ASSERT_EQ(response.status, 200) << response.error << response.headers;
  EXPECT_NE(response.headers.find("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
            std::string::npos)
      << response.headers;
  EXPECT_EQ(response.body, Text(*registry));
  EXPECT_NE(
      response.body.find("engram_shard_rows_total{layer=\"0\",shard=\"0\",tier=\"hot\"} 42\n"),
      std::string::npos)
      << response.body;
  EXPECT_NE(response.body.find("engram_queue_depth{queue=\"nan\"} NaN\n"), std::string::npos);

  const auto [code, output] = Promtool(response.body);
  EXPECT_EQ(code, 0) << output << "\n--- scraped ---\n" << response.body;
  EXPECT_EQ(output, "") << "\n--- scraped ---\n" << response.body;
}

TEST(Exposer, UnknownPathMethodAndExpiredCollectable) {
  auto registry = PopulatedRegistry();
  auto exposer = Exposer::Create("127.0.0.1:0");
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  (*exposer)->RegisterCollectable(registry);
  (*exposer)->RegisterCollectable(registry);  // no-op: not served twice
  const int port = (*exposer)->port();
  EXPECT_EQ(HttpGet(port, "/nothing-here").status, 404);
  EXPECT_EQ(HttpGet(port, "/metrics", "POST").status, 405);
  const Fetched head = HttpGet(port, "/metrics", "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(HttpGet(port, "/metrics").body, Text(*registry));
  registry.reset();  // the exposer holds it weakly
  const Fetched after = HttpGet(port, "/metrics");
  EXPECT_EQ(after.status, 200);
  EXPECT_EQ(after.body, "");
}

TEST(Exposer, ScrapesWhileWritersRun) {
  auto registry = std::make_shared<Registry>();
  Counter& ops = BuildCounter().Name("engram_ops_total").Help("Ops.").Register(*registry).Add({});
  auto exposer = Exposer::Create("127.0.0.1:0");
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  (*exposer)->RegisterCollectable(registry, "/custom");
  const int port = (*exposer)->port();
  constexpr int kScrapes = 20;
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> written{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&] {
      std::uint64_t mine = 0;
      while (!done.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 1000; ++i, ++mine) ops.Increment();
      }
      written += mine;
    });
  }
  struct StopWriters {  // also on an early ASSERT return
    std::atomic<bool>& done;
    std::vector<std::thread>& writers;
    ~StopWriters() {
      done = true;
      for (auto& w : writers) {
        if (w.joinable()) w.join();
      }
    }
  } stop_writers{done, writers};
  double last = 0;
  for (int i = 0; i < kScrapes; ++i) {
    const Fetched r = HttpGet(port, "/custom");
    ASSERT_EQ(r.status, 200) << r.error;
    const std::string series = "\nengram_ops_total ";
    const auto pos = r.body.find(series);
    ASSERT_NE(pos, std::string::npos) << r.body;
    const double value = std::stod(r.body.substr(pos + series.size()));
    EXPECT_GE(value, last);  // monotonic across scrapes
    last = value;
  }
  done = true;
  for (auto& w : writers) w.join();
  EXPECT_GT(last, 0);
  const std::string expected = "engram_ops_total " + std::to_string(written.load()) + "\n";
  EXPECT_NE(HttpGet(port, "/custom").body.find(expected), std::string::npos) << expected;
}

TEST(Exposer, HostNameBindAndPromptStop) {
  auto exposer = Exposer::Create("localhost:0");
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  auto registry = PopulatedRegistry();
  (*exposer)->RegisterCollectable(registry);
  EXPECT_EQ(HttpGet((*exposer)->port(), "/metrics").status, 200);
  // civetweb alone needs up to 2 s to notice mg_stop(); the destructor wakes it.
  const auto start = std::chrono::steady_clock::now();
  exposer->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
}

TEST(Exposer, SecondExposerOnSamePortIsAnError) {
  auto first = Exposer::Create("127.0.0.1:0");
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = Exposer::Create(address);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_NE(second.status().message().find(address), std::string::npos) << second.status();
  EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status();
  // The first one is unharmed.
  EXPECT_EQ(HttpGet((*first)->port(), "/metrics").status, 404);  // nothing registered yet
}

TEST(Exposer, MalformedAddressIsInvalidArgument) {
  EXPECT_EQ(Exposer::Create("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Exposer::Create("not-an-address").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Exposer::Create("127.0.0.1:0", 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace engram::metrics
