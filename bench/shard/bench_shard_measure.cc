#include "bench/shard/bench_shard_measure.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/util/status_macros.h"

namespace engram::bench {
namespace {

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

double Latencies::Percentile(double q) const {
  if (us_.empty()) return 0;
  std::vector<double> sorted = us_;
  const size_t k =
      std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())));
  std::nth_element(sorted.begin(), sorted.begin() + k, sorted.end());
  return sorted[k];
}

ServerCounters ServerCounters::operator-(const ServerCounters& o) const {
  return {pinned - o.pinned,          cached - o.cached,     disk - o.disk,
          file_reads - o.file_reads,  requests - o.requests, handler_seconds - o.handler_seconds,
          cpu_seconds - o.cpu_seconds};
}

ServerCounters& ServerCounters::operator+=(const ServerCounters& o) {
  pinned += o.pinned;
  cached += o.cached;
  disk += o.disk;
  file_reads += o.file_reads;
  requests += o.requests;
  handler_seconds += o.handler_seconds;
  cpu_seconds += o.cpu_seconds;
  return *this;
}

void LoopResult::Merge(const LoopResult& other) {
  requests += other.requests;
  seconds += other.seconds;
  process_cpu_seconds += other.process_cpu_seconds;
  latency_us.Merge(other.latency_us);
}

std::vector<uint8_t> JoinPieces(RowPieces pieces) {
  std::vector<uint8_t> out;
  for (std::span<const uint8_t> piece : pieces) out.insert(out.end(), piece.begin(), piece.end());
  return out;
}

absl::StatusOr<LoopResult> RunLoop(const LoopLimits& limits, std::span<const FetchStep> fetchers,
                                   size_t n_steps, uint64_t* next_step, const CheckStep& check) {
  struct ThreadState {
    Latencies latency_us;
    bool fetched = false;
    size_t last_step = 0;
    RowPieces last_rows;
    absl::Status status;
  };
  std::vector<ThreadState> states(fetchers.size());
  const uint64_t first = *next_step;
  std::atomic<uint64_t> issued{0};
  std::atomic<bool> failed{false};
  const double cpu_start = ProcessCpuSeconds();
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + limits.duration;

  std::vector<std::thread> threads;
  for (size_t t = 0; t < fetchers.size(); ++t) {
    threads.emplace_back([&, t] {
      ThreadState& state = states[t];
      for (;;) {
        if (failed.load(std::memory_order_relaxed) || absl::Now() >= deadline) {
          break;
        }
        const uint64_t i = issued.fetch_add(1, std::memory_order_relaxed);
        if (i >= limits.max_requests) break;
        const size_t step = static_cast<size_t>((first + i) % n_steps);
        const absl::Time begin = absl::Now();
        absl::StatusOr<RowPieces> rows = fetchers[t](step);
        const absl::Time end = absl::Now();
        if (!rows.ok()) {
          state.status = rows.status();
          failed.store(true);
          break;
        }
        state.latency_us.Add(absl::ToDoubleMicroseconds(end - begin));
        state.fetched = true;
        state.last_step = step;
        state.last_rows = *rows;
      }
    });
  }
  for (std::thread& t : threads) t.join();

  LoopResult result;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result.process_cpu_seconds = ProcessCpuSeconds() - cpu_start;
  for (ThreadState& state : states) {
    if (!state.status.ok()) return state.status;
    if (check && state.fetched) {
      RETURN_IF_ERROR(check(state.last_step, state.last_rows));
    }
    result.requests += state.latency_us.count();
    result.latency_us.Merge(state.latency_us);
  }
  *next_step = first + result.requests;
  return result;
}

}  // namespace engram::bench
