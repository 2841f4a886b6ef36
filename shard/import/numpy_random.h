// numpy's random stream, as far as the Engram hash's multipliers reach:
// numpy.random.default_rng(seed).integers(0, high, size=n, dtype=int64),
// reproduced exactly (SeedSequence, PCG64 and Lemire's bounded integers;
// numpy's bit_generator.pyx, pcg64.c and distributions.c are the spec).
// Its arithmetic wraps modulo 2^32, 2^64 and 2^128 on purpose.
#ifndef ENGRAM_SHARD_IMPORT_NUMPY_RANDOM_H_
#define ENGRAM_SHARD_IMPORT_NUMPY_RANDOM_H_

#include <cstdint>
#include <vector>

#include "absl/numeric/int128.h"

namespace engram {

// numpy.random.default_rng(seed).integers(0, high, size=n, dtype=int64),
// the seed an unsigned integer of up to 128 bits. Pure and thread-safe.
// REQUIRES: high >= 1, n >= 0.
std::vector<int64_t> NumpyIntegers(absl::uint128 seed, int64_t high, int n);

}  // namespace engram

#endif  // ENGRAM_SHARD_IMPORT_NUMPY_RANDOM_H_
