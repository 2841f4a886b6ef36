// What engram-bench prints and writes: the measurements as a table, the
// shape of each id stream, the ratios of ours to each peer and the targets
// they are held to (docs/benchmarks.md, "Side by side"), the section of
// docs/benchmarks.md, and the data of the batch-size plot.
#ifndef ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_REPORT_H_
#define ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_REPORT_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/engram_bench/engram_bench_measure.h"
#include "bench/engram_bench/engram_bench_workload.h"

namespace engram::bench {

// Names the report looks measurements up by.
inline constexpr char kOursOneShard[] = "engram 1 shard";
inline constexpr char kOursTls[] = "engram 1 shard, TLS";
inline constexpr char kOursTail[] = "engram 1 shard, tail";
inline constexpr char kOursPipelined[] = "engram 1 shard, layers pipelined";
inline constexpr char kRedis[] = "redis";
inline constexpr char kBareTcp[] = "bare TCP";
inline constexpr char kMemoryGather[] = "memory gather";
inline constexpr char kRawGrpc[] = "gRPC, no client library";
inline constexpr char kHeadlineStream[] = "decode B=256";
inline constexpr int kHeadlineQueueDepth = 32;

struct ShapeRow {
  std::string table;
  std::string stream;
  StreamShape shape;
};

struct Report {
  std::string command;              // the command line of the run
  std::vector<std::string> setup;   // lines describing machine and tables
  std::string workload_line;        // where the tokens came from
  std::string hot_table;            // label of the headline in-RAM table
  std::string disk_table;           // label of the on-disk table
  double headline_row_bytes = 264;  // row size of the hot table
  std::vector<ShapeRow> shapes;
  std::vector<Measurement> rows;
};

// The headline ratios (0 when a side is missing).
struct Headline {
  double redis_ratio = 0;   // ours / Redis rows/s
  double tcp_ratio = 0;     // ours / bare TCP rows/s
  double p99_ratio = 0;     // ours / bare TCP p99 per step
  double memory_ratio = 0;  // ours / memory gather rows/s
  double disk_ratio = 0;    // ours' disk rows/s / raw O_DIRECT reads/s, QD32
  double wire_bytes_per_row = 0;
};
Headline ComputeHeadline(const Report& report);

// The tables, the ratios against the targets, and as the very last line
//   bench: redis_ratio=R tcp_ratio=T disk_ratio=D wire_bytes_per_row=W
void PrintReport(const Report& report, std::FILE* out);

// The generated part of the section (Markdown).
std::string MarkdownSection(const Report& report, const std::string& plot_png);

// Replaces the generated part of "## Side by side (engram-bench)" in the
// Markdown file at `path` (between its begin/end markers), creating the
// section before the first other "## " section when it is missing; the
// rest of the file is kept as it is. Written atomically.
absl::Status WriteDocSection(const std::string& path, const std::string& generated);

// rows/s and p99 per step of each system on `table` with one connection,
// against the step size: a tab-separated table with a header row.
absl::Status WritePlotData(const Report& report, const std::string& path);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_REPORT_H_
