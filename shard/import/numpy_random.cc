#include "shard/import/numpy_random.h"

#include <array>
#include <climits>
#include <cstdint>
#include <vector>

namespace engram {
namespace {

// ---------------------------------------------------------------------------
// numpy's random stack, as far as Generator.integers(0, high, dtype=int64)
// reaches: SeedSequence -> PCG64 -> random_bounded_uint64_fill (Lemire).

// SeedSequence (numpy/random/bit_generator.pyx): the entropy pool of 4
// 32-bit words and the state words drawn from it.
class SeedSequence {
 public:
  // `entropy`: the seed as 32-bit words, least significant first ([0] for
  // a zero seed), as _coerce_to_uint32_array gives it.
  explicit SeedSequence(const std::vector<uint32_t>& entropy) {
    uint32_t hash_const = kInitA;
    auto hashmix = [&hash_const](uint32_t value) {
      value ^= hash_const;
      hash_const *= kMultA;
      value *= hash_const;
      return value ^ (value >> kXShift);
    };
    auto mix = [](uint32_t x, uint32_t y) {
      const uint32_t r = kMixMultL * x - kMixMultR * y;
      return r ^ (r >> kXShift);
    };
    for (size_t i = 0; i < kPoolSize; ++i) {
      pool_[i] = hashmix(i < entropy.size() ? entropy[i] : 0);
    }
    for (size_t src = 0; src < kPoolSize; ++src) {
      for (size_t dst = 0; dst < kPoolSize; ++dst) {
        if (src != dst) pool_[dst] = mix(pool_[dst], hashmix(pool_[src]));
      }
    }
    for (size_t src = kPoolSize; src < entropy.size(); ++src) {
      for (size_t dst = 0; dst < kPoolSize; ++dst) {
        pool_[dst] = mix(pool_[dst], hashmix(entropy[src]));
      }
    }
  }

  // generate_state(n_words, uint64): 2 * n_words 32-bit words paired
  // little-endian (the first of each pair is the low half).
  std::vector<uint64_t> GenerateState64(size_t n_words) const {
    uint32_t hash_const = kInitB;
    std::vector<uint64_t> out(n_words, 0);
    for (size_t i = 0; i < 2 * n_words; ++i) {
      uint32_t v = pool_[i % kPoolSize];
      v ^= hash_const;
      hash_const *= kMultB;
      v *= hash_const;
      v ^= v >> kXShift;
      out[i / 2] |= static_cast<uint64_t>(v) << (32 * (i % 2));
    }
    return out;
  }

 private:
  static constexpr size_t kPoolSize = 4;
  static constexpr uint32_t kInitA = 0x43b0d7e5;
  static constexpr uint32_t kMultA = 0x931e8875;
  static constexpr uint32_t kInitB = 0x8b51f9dd;
  static constexpr uint32_t kMultB = 0x58f38ded;
  static constexpr uint32_t kMixMultL = 0xca01f9dd;
  static constexpr uint32_t kMixMultR = 0x4973f715;
  static constexpr int kXShift = 16;

  std::array<uint32_t, kPoolSize> pool_;
};

// PCG64 (numpy/random/src/pcg64): a 128-bit LCG with the XSL-RR output,
// and numpy's 32-bit draws that serve both halves of one 64-bit output.
class Pcg64 {
 public:
  explicit Pcg64(const SeedSequence& seq) {
    const std::vector<uint64_t> w = seq.GenerateState64(4);
    const absl::uint128 init_state = absl::MakeUint128(w[0], w[1]);
    const absl::uint128 init_seq = absl::MakeUint128(w[2], w[3]);
    inc_ = (init_seq << 1) | 1;
    state_ = 0;
    Step();
    state_ += init_state;
    Step();
  }

  uint64_t Next64() {
    Step();
    const uint64_t x = absl::Uint128High64(state_) ^ absl::Uint128Low64(state_);
    const unsigned rot = static_cast<unsigned>(absl::Uint128High64(state_) >> 58);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }

  // Low half of a fresh 64-bit output first, then its high half.
  uint32_t Next32() {
    if (has_half_) {
      has_half_ = false;
      return half_;
    }
    const uint64_t x = Next64();
    has_half_ = true;
    half_ = static_cast<uint32_t>(x >> 32);
    return static_cast<uint32_t>(x);
  }

 private:
  void Step() {
    static const absl::uint128 kMultiplier =
        absl::MakeUint128(2549297995355413924ull, 4865540595714422341ull);
    state_ = state_ * kMultiplier + inc_;
  }

  absl::uint128 state_;
  absl::uint128 inc_;
  bool has_half_ = false;
  uint32_t half_ = 0;
};

// Lemire's method for a value in [0, rng] from 32-bit draws.
// REQUIRES: 0 < rng < 0xFFFFFFFF.
uint32_t BoundedLemire32(Pcg64* g, uint32_t rng) {
  const uint32_t excl = rng + 1;
  uint64_t m = static_cast<uint64_t>(g->Next32()) * excl;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < excl) {
    const uint32_t threshold = (UINT32_MAX - rng) % excl;
    while (leftover < threshold) {
      m = static_cast<uint64_t>(g->Next32()) * excl;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

// Lemire's method for a value in [0, rng] from 64-bit draws.
// REQUIRES: 0 < rng < UINT64_MAX.
uint64_t BoundedLemire64(Pcg64* g, uint64_t rng) {
  const uint64_t excl = rng + 1;
  absl::uint128 m = absl::uint128(g->Next64()) * excl;
  uint64_t leftover = absl::Uint128Low64(m);
  if (leftover < excl) {
    const uint64_t threshold = (UINT64_MAX - rng) % excl;
    while (leftover < threshold) {
      m = absl::uint128(g->Next64()) * excl;
      leftover = absl::Uint128Low64(m);
    }
  }
  return absl::Uint128High64(m);
}

// random_bounded_uint64_fill with use_masked = false: n values in
// [0, rng], the 32-bit draws when rng fits them.
std::vector<uint64_t> BoundedFill(Pcg64* g, uint64_t rng, int n) {
  std::vector<uint64_t> out(n, 0);
  for (uint64_t& v : out) {
    if (rng == 0) {
      v = 0;
    } else if (rng < 0xFFFFFFFFull) {
      v = BoundedLemire32(g, static_cast<uint32_t>(rng));
    } else if (rng == 0xFFFFFFFFull) {
      v = g->Next32();
    } else if (rng < UINT64_MAX) {
      v = BoundedLemire64(g, rng);
    } else {
      v = g->Next64();
    }
  }
  return out;
}

}  // namespace

std::vector<int64_t> NumpyIntegers(absl::uint128 seed, int64_t high, int n) {
  std::vector<uint32_t> entropy;
  do {
    entropy.push_back(static_cast<uint32_t>(absl::Uint128Low64(seed)));
    seed >>= 32;
  } while (seed != 0);
  Pcg64 g{SeedSequence(entropy)};
  const std::vector<uint64_t> drawn = BoundedFill(&g, static_cast<uint64_t>(high) - 1, n);
  return std::vector<int64_t>(drawn.begin(), drawn.end());  // each < high: fits
}

}  // namespace engram
