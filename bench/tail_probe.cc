// shard_tail_probe: how long one request's tail rows take to read from a
// cuckoo shard, through RowStore both ways, for docs/table-format.md
// ("Mapped cuckoo tail").
//
//   shard_tail_probe SHARD_DIR [rows_per_request] [requests]
//
// Opens the shard (an `engramctl import --tail-format cuckoo` directory)
// with the tail mapped (RowStoreOptions::map_cuckoo_tail) and then through
// MultiGet on its reader threads, and for each times `requests` ReadRows
// calls of `rows_per_request` random rows of the shard's first layer
// (what one shard reads for an Engram layer's decode step) twice: back to
// back, and with 20 ms of sleep before each call, as in a decode loop
// where a shard waits a step between requests and its CPU caches go cold.
// Prints the time Open took (for the mapped tail: the scan that learns
// every row's place) and the p50 per call and per row. Every row read is compared with the
// other access path's bytes for the same row.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shard/row_store.h"

namespace engram {
namespace {

struct Timing {
  double warm_us = 0;  // p50 per call, back to back
  double cold_us = 0;  // p50 per call after 20 ms asleep
};

// Reads `requests` batches of rows drawn from `rng` into `out` (the last
// batch's bytes are left there). False on a read error.
bool Time(RowStore& store, size_t n, int requests, std::chrono::microseconds gap, uint64_t seed,
          std::vector<uint8_t>* out, double* p50_us) {
  const ShardMap& map = store.shard_map();
  const uint32_t rb = map.row_bytes[0];
  const uint64_t owned = map.RowsOnShard(0, store.shard_index());
  std::mt19937_64 rng(seed);
  out->assign(n * rb, 0);
  std::vector<RowRef> refs(n);
  std::vector<double> us;
  for (int i = 0; i < requests; ++i) {
    for (size_t k = 0; k < n; ++k) {
      refs[k] = {0, store.shard_index() + (rng() % owned) * map.n_shards, out->data() + k * rb};
    }
    if (gap.count() > 0) std::this_thread::sleep_for(gap);
    const auto start = std::chrono::steady_clock::now();
    const absl::Status s = store.ReadRows(refs);
    const auto end = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "shard_tail_probe: %s\n", s.ToString().c_str());
      return false;
    }
    us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  std::sort(us.begin(), us.end());
  *p50_us = us[us.size() / 2];
  return true;
}

int Run(const std::string& dir, size_t n, int requests) {
  std::vector<std::vector<uint8_t>> last;  // per access path: cold run's last batch
  std::printf("%zu random rows of layer 0 per ReadRows call, p50 of %d calls\n", n, requests);
  std::printf("| %-34s | %7s | %12s | %12s | %12s | %12s |\n", "access", "open ms", "warm us/call",
              "warm us/row", "cold us/call", "cold us/row");
  for (bool map : {true, false}) {
    RowStoreOptions o;
    o.map_cuckoo_tail = map;
    const auto open_start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<RowStore>> store = RowStore::Open(dir, o);
    const double open_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - open_start)
            .count();
    if (!store.ok()) {
      std::fprintf(stderr, "shard_tail_probe: %s\n", store.status().ToString().c_str());
      return 1;
    }
    if (map && !(*store)->tail_mapped()) {
      std::fprintf(stderr, "shard_tail_probe: %s is not a mappable cuckoo tail: %s\n", dir.c_str(),
                   (*store)->tail_access().c_str());
      return 1;
    }
    Timing t;
    std::vector<uint8_t> bytes;
    if (!Time(**store, n, requests, std::chrono::microseconds(0), 1, &bytes, &t.warm_us) ||
        !Time(**store, n, requests, std::chrono::milliseconds(20), 2, &bytes, &t.cold_us)) {
      return 1;
    }
    last.push_back(std::move(bytes));
    std::printf("| %-34s | %7.0f | %12.0f | %12.3f | %12.0f | %12.3f |\n",
                map ? "mapped table files" : (*store)->tail_access().c_str(), open_ms, t.warm_us,
                t.warm_us / static_cast<double>(n), t.cold_us, t.cold_us / static_cast<double>(n));
  }
  if (last[0] != last[1]) {
    std::fprintf(stderr, "shard_tail_probe: the two access paths read different bytes\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace engram

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: shard_tail_probe SHARD_DIR [rows_per_request] [requests]\n");
    return 2;
  }
  const long n = argc > 2 ? std::atol(argv[2]) : 240;
  const int requests = argc > 3 ? std::atoi(argv[3]) : 300;
  if (n <= 0 || requests <= 0) {
    std::fprintf(stderr, "shard_tail_probe: rows_per_request and requests must be positive\n");
    return 2;
  }
  return engram::Run(argv[1], static_cast<size_t>(n), requests);
}
