// CPU time of a child process, for the benchmarks' CPU-per-row figures.
#ifndef ENGRAM_BENCH_COMMON_PROC_STAT_H_
#define ENGRAM_BENCH_COMMON_PROC_STAT_H_

#include <sys/types.h>

namespace engram::bench {

// User + system CPU seconds of process `pid` (/proc/PID/stat), 0 if gone.
double ProcessCpuSeconds(pid_t pid);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_COMMON_PROC_STAT_H_
