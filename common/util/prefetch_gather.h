// PrefetchGather: copies scattered fixed-size rows into one contiguous
// buffer with the loads of later rows in flight while earlier ones are
// copied. A large hot request (12,288 rows of 264 bytes from a table of
// hundreds of MB) otherwise waits out one cache miss after another (what
// the loads in flight buy: docs/benchmarks.md, "Settings chosen by
// measurement").
//
//   PrefetchGather(ids.size(), row_bytes, out,
//                  [&](size_t i) { return table + ids[i] * row_bytes; },
//                  [](size_t) {}, [&](size_t i, uint8_t*) { bad = i; });
//
// Header-only and allocation-free; runs on the calling thread.
#ifndef ENGRAM_COMMON_UTIL_PREFETCH_GATHER_H_
#define ENGRAM_COMMON_UTIL_PREFETCH_GATHER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace engram {

// How many rows ahead of the copy a row is loaded (and, twice as far
// ahead, its hint runs). Eight 264-byte rows keep ~40 cache lines in
// flight, about what one core's fill buffers sustain.
inline constexpr size_t kGatherAhead = 8;

// Starts loading the cache lines of [p, p + n). REQUIRES: n > 0.
inline void PrefetchBytes(const uint8_t* p, size_t n) {
  for (size_t off = 0; off < n; off += 64) __builtin_prefetch(p + off);
  __builtin_prefetch(p + n - 1);
}

// For i in [0, n): copies row_bytes from src(i) to dst + i * row_bytes, or,
// when src(i) is nullptr, calls miss(i, dst + i * row_bytes) instead.
// hint(i) runs 2 * kGatherAhead iterations before src(i), for a lookup
// structure whose entry src(i) will read (e.g. a prefetch of a hash index
// bucket); src(i) runs kGatherAhead iterations before the copy. Each of
// hint, src and miss is called exactly once per row, in row order.
template <typename HintFn, typename SrcFn, typename MissFn>
void PrefetchGather(size_t n, size_t row_bytes, uint8_t* dst, HintFn&& hint, SrcFn&& src,
                    MissFn&& miss) {
  constexpr size_t kRing = 2 * kGatherAhead;  // rows found, not yet copied
  static_assert((kRing & (kRing - 1)) == 0);
  const uint8_t* ring[kRing];
  auto find = [&](size_t i) {
    const uint8_t* p = src(i);
    if (p != nullptr) PrefetchBytes(p, row_bytes);
    ring[i & (kRing - 1)] = p;
  };
  for (size_t i = 0; i < std::min(n, 2 * kGatherAhead); ++i) hint(i);
  for (size_t i = 0; i < std::min(n, kGatherAhead); ++i) find(i);
  for (size_t i = 0; i < n; ++i) {
    if (i + 2 * kGatherAhead < n) hint(i + 2 * kGatherAhead);
    if (i + kGatherAhead < n) find(i + kGatherAhead);
    uint8_t* out = dst + i * row_bytes;
    if (const uint8_t* p = ring[i & (kRing - 1)]; p != nullptr) {
      std::memcpy(out, p, row_bytes);
    } else {
      miss(i, out);
    }
  }
}

}  // namespace engram

#endif  // ENGRAM_COMMON_UTIL_PREFETCH_GATHER_H_
