// Reading metrics back: an HTTP GET of a /metrics page and a parser for the
// text exposition format's samples. For tests, the demo and benchmarks that
// read a shard server's counters the way Prometheus does. No shared state:
// thread-safe.
#ifndef ENGRAM_COMMON_NET_PROMETHEUS_SCRAPE_H_
#define ENGRAM_COMMON_NET_PROMETHEUS_SCRAPE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace engram::scrape {

struct HttpResponse {
  int status = 0;
  std::string headers;  // status line and headers, without the blank line
  std::string body;
};

// A blocking HTTP/1.1 request to 127.0.0.1:port (Connection: close), with
// a 10 s receive timeout. Unavailable when the connection fails.
absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& path,
                                     const std::string& method = "GET");

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The samples of a text exposition (comments skipped). Lines it cannot
// parse are skipped too: use promtool to validate.
std::vector<Sample> ParseSamples(const std::string& text);

// Sum of the samples named `name` whose labels include every pair of
// `match`.
double SumSamples(const std::vector<Sample>& samples, const std::string& name,
                  const std::map<std::string, std::string>& match = {});

}  // namespace engram::scrape

#endif  // ENGRAM_COMMON_NET_PROMETHEUS_SCRAPE_H_
