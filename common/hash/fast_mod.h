// FastModulo: `a % d` for a divisor fixed at construction, without a
// divide. Used where a modulo sits in a per-id loop: the hash's floor-mod
// per (order, head) and routing a row to its shard (row % n_shards).
//
// Barrett reduction with a 64-bit reciprocal: with M = floor((2^64 - 1) / d),
// q = high64(a * M) is floor(a / d) or one less for every 64-bit a (the
// error a * (2^64 / d - M) / 2^64 is below 1), so a - q * d needs at most
// one correction: one widening multiply, one multiply, one compare.
// Immutable; safe to share between threads.
#ifndef ENGRAM_COMMON_HASH_FAST_MOD_H_
#define ENGRAM_COMMON_HASH_FAST_MOD_H_

#include <cstdint>

namespace engram {

class FastModulo {
 public:
  // REQUIRES: d >= 1.
  explicit FastModulo(uint64_t d = 1) : d_(d), magic_(~uint64_t{0} / d) {}

  uint64_t divisor() const { return d_; }
  uint64_t Mod(uint64_t a) const {
    uint64_t q, r;
    DivMod(a, &q, &r);
    return r;
  }
  // *q = a / d, *r = a % d.
  void DivMod(uint64_t a, uint64_t* q, uint64_t* r) const {
    __extension__ typedef unsigned __int128 u128;
    *q = static_cast<uint64_t>((static_cast<u128>(a) * magic_) >> 64);
    *r = a - *q * d_;
    if (*r >= d_) {
      *r -= d_;
      ++*q;
    }
  }

 private:
  uint64_t d_;
  uint64_t magic_;
};

}  // namespace engram

#endif  // ENGRAM_COMMON_HASH_FAST_MOD_H_
