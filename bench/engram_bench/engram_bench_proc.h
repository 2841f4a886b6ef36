// Resource counters of processes, for engram-bench: CPU time, loopback
// bytes, free ports.
#ifndef ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_PROC_H_
#define ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_PROC_H_

#include <sys/types.h>

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/common/proc_stat.h"

namespace engram::bench {

// This process's user + system CPU seconds, every thread (getrusage).
double SelfCpuSeconds();

// TCP payload bytes, both directions, of this process's sockets connected
// to 127.0.0.1 on any of `peer_ports` (tcp_info: bytes sent and
// acknowledged + bytes received), summed over the sockets open now. The
// difference over a window, with the same sockets open throughout, is what
// crossed the wire: protocol framing included, TCP/IP headers not.
double LoopbackSocketBytes(std::span<const int> peer_ports);

// The port of "host:port"; -1 when there is none.
int PortOf(const std::string& host_port);

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then
// released): another process may take it first, so callers retry.
absl::StatusOr<int> FreeLoopbackPort();

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_PROC_H_
