#include "common/hash/fast_mod.h"

#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace engram {
namespace {

TEST(FastModulo, EqualsTheHardwareRemainder) {
  std::mt19937_64 rng(9);
  const uint64_t kMax = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> divisors = {1,
                                    2,
                                    3,
                                    7,
                                    1024,
                                    99991,
                                    16000057,
                                    (uint64_t{1} << 32) - 5,
                                    (uint64_t{1} << 62) - 57,
                                    kMax / 2,
                                    kMax - 1,
                                    kMax};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + rng() % (uint64_t{1} << (1 + i % 63)));
  for (uint64_t d : divisors) {
    const FastModulo m(d);
    for (uint64_t a : {uint64_t{0}, uint64_t{1}, d - 1, d, d + 1, kMax, kMax - 1, 2 * d - 1}) {
      ASSERT_EQ(m.Mod(a), a % d) << a << " mod " << d;
    }
    for (int k = 0; k < 2000; ++k) {
      const uint64_t a = rng();
      ASSERT_EQ(m.Mod(a), a % d) << a << " mod " << d;
      uint64_t q, r;
      m.DivMod(a, &q, &r);
      ASSERT_EQ(q, a / d) << a << " / " << d;
      ASSERT_EQ(r, a % d) << a << " mod " << d;
    }
  }
}

}  // namespace
}  // namespace engram
