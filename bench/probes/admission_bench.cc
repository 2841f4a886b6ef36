// admission_bench: hit ratios of the hot tier's admission cache against
// plain CLOCK and LRU on a Zipf(s) key stream, for docs/architecture.md.
//
//   admission_bench [keys] [accesses] [s]
//
// Every policy sees the same stream (Zipf ranks scattered over the key space
// by a fixed permutation) and the same protocol as the shard server: look
// up, and on a miss offer the row.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <list>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shard/admission_cache.h"

namespace engram {
namespace {

// The textbook LRU, for comparison only (allocates per entry).
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}
  bool Lookup(uint64_t key) {
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    order_.splice(order_.begin(), order_, it->second);
    return true;
  }
  void Admit(uint64_t key) {
    if (capacity_ == 0 || map_.count(key)) return;
    if (map_.size() == capacity_) {
      map_.erase(order_.back());
      order_.pop_back();
    }
    order_.push_front(key);
    map_[key] = order_.begin();
  }

 private:
  size_t capacity_;
  std::list<uint64_t> order_;
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> map_;
};

// The hit ratio of an oracle that holds the `slots` most popular keys (what
// a perfect hot-row profile pins).
double OracleHitRatio(uint64_t keys, uint64_t slots, double s) {
  double top = 0, all = 0;
  for (uint64_t k = 0; k < keys; ++k) {
    const double p = 1.0 / std::pow(k + 1, s);
    all += p;
    if (k < slots) top += p;
  }
  return top / all;
}

std::vector<uint64_t> ZipfStream(uint64_t keys, uint64_t n, double s) {
  std::vector<double> cdf(keys);
  double sum = 0;
  for (uint64_t k = 0; k < keys; ++k) cdf[k] = sum += 1.0 / std::pow(k + 1, s);
  std::vector<uint64_t> perm(keys);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(42);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<uint64_t> out(n);
  for (uint64_t& k : out) {
    const uint64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
    k = perm[std::min(rank, keys - 1)];
  }
  return out;
}

double HitRatio(AdmissionCacheOptions::Policy policy, uint64_t slots,
                const std::vector<uint64_t>& stream) {
  AdmissionCache cache({.slots = slots, .slot_bytes = 8, .policy = policy});
  uint64_t hits = 0;
  uint8_t buf[8];
  for (uint64_t key : stream) {
    if (cache.Lookup(key, buf, 8)) {
      ++hits;
    } else {
      cache.Admit(key, reinterpret_cast<const uint8_t*>(&key), 8);
    }
  }
  return 1.0 * hits / stream.size();
}

double LruHitRatio(uint64_t slots, const std::vector<uint64_t>& stream) {
  LruCache cache(slots);
  uint64_t hits = 0;
  for (uint64_t key : stream) {
    if (cache.Lookup(key)) {
      ++hits;
    } else {
      cache.Admit(key);
    }
  }
  return 1.0 * hits / stream.size();
}

// Lookups+admits per second from `threads` threads sharing one cache of
// 264-byte rows.
double Throughput(int threads, uint64_t slots, const std::vector<uint64_t>& stream) {
  AdmissionCache cache({.slots = slots, .slot_bytes = 264});
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      uint8_t row[264] = {0};
      for (size_t i = t; i < stream.size(); i += threads) {
        if (!cache.Lookup(stream[i], row, 264)) cache.Admit(stream[i], row, 264);
      }
    });
  }
  for (std::thread& t : ts) t.join();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stream.size() / secs;
}

}  // namespace
}  // namespace engram

int main(int argc, char** argv) {
  const uint64_t keys = argc > 1 ? std::stoull(argv[1]) : 1000000;
  const uint64_t n = argc > 2 ? std::stoull(argv[2]) : 10000000;
  const double s = argc > 3 ? std::stod(argv[3]) : 1.1;
  const std::vector<uint64_t> stream = engram::ZipfStream(keys, n, s);
  std::printf("Zipf(%.2f) over %llu keys, %llu accesses\n", s,
              static_cast<unsigned long long>(keys), static_cast<unsigned long long>(n));
  std::printf(
      "| cache / keys | TinyLFU+CLOCK | CLOCK | LRU | oracle (top keys) |\n"
      "|---|---|---|---|---|\n");
  for (double frac : {0.001, 0.01, 0.05, 0.10}) {
    const uint64_t slots = static_cast<uint64_t>(frac * keys);
    using P = engram::AdmissionCacheOptions::Policy;
    std::printf("| %.1f%% | %.3f | %.3f | %.3f | %.3f |\n", 100 * frac,
                engram::HitRatio(P::kTinyLfu, slots, stream),
                engram::HitRatio(P::kClock, slots, stream), engram::LruHitRatio(slots, stream),
                engram::OracleHitRatio(keys, slots, s));
  }
  for (int threads : {1, 2, 4}) {
    std::printf("%d threads: %.1f M lookups/s (1%% cache, 264-byte rows)\n", threads,
                engram::Throughput(threads, keys / 100, stream) / 1e6);
  }
  return 0;
}
