// AdmissionCache (shard/admission_cache.h): the TinyLFU policy it runs by
// default keeps more of a Zipfian stream than plain CLOCK, and every hit
// returns the bytes admitted for its key.
#include "shard/admission_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace engram {
namespace {

// Hit ratio of a cache of `slots` rows on a Zipf(1.1) stream over `keys`.
double ZipfHitRatio(AdmissionCacheOptions::Policy policy, uint64_t keys, uint64_t slots,
                    int accesses) {
  std::vector<double> cdf(keys);
  double sum = 0;
  for (uint64_t k = 0; k < keys; ++k) cdf[k] = sum += 1.0 / std::pow(k + 1, 1.1);
  // Scatter ranks over the key space so popularity is unrelated to hashing.
  std::vector<uint64_t> perm(keys);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(5);
  std::shuffle(perm.begin(), perm.end(), rng);
  AdmissionCache cache({.slots = slots, .slot_bytes = 8, .shards = 4, .policy = policy});
  std::uniform_real_distribution<double> u(0, sum);
  int hits = 0;
  uint8_t buf[8];
  for (int i = 0; i < accesses; ++i) {
    const uint64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
    const uint64_t key = perm[std::min(rank, keys - 1)];
    if (cache.Lookup(key, buf, 8)) {
      ++hits;
      EXPECT_EQ(0, std::memcmp(buf, &key, 8));
    } else {
      cache.Admit(key, reinterpret_cast<const uint8_t*>(&key), 8);
    }
  }
  EXPECT_LE(cache.resident(), slots);
  return static_cast<double>(hits) / accesses;
}

TEST(AdmissionCacheTest, TinyLfuBeatsPlainClockOnZipf) {
  const double tiny = ZipfHitRatio(AdmissionCacheOptions::Policy::kTinyLfu, 100000, 1000, 400000);
  const double clock = ZipfHitRatio(AdmissionCacheOptions::Policy::kClock, 100000, 1000, 400000);
  EXPECT_GT(tiny, clock + 0.03) << "tinylfu " << tiny << " clock " << clock;
}

}  // namespace
}  // namespace engram
