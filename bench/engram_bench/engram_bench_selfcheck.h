// engram-bench --self-check: every system of the benchmark, on a tiny
// table built in a temporary directory, returns exactly the right bytes for
// a few batches of each kind (decode and prefill steps, one and two
// connections, RAM and disk). Correctness only: nothing is timed. ctest
// runs it (tests/CMakeLists.txt).
#ifndef ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_SELFCHECK_H_
#define ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_SELFCHECK_H_

#include "bench/engram_bench/engram_bench_tables.h"

namespace engram::bench {

// Prints one line per system checked and a final "self-check: ok ..."
// line; returns the exit status (0 = every byte matched). env.work_dir is
// not used: the check builds and removes a directory of its own.
int RunSelfCheck(const BenchEnv& env);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_SELFCHECK_H_
