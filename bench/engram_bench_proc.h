// Processes and their resource counters, for engram-bench: the peers it
// starts (redis-server) and what it reads from /proc about every server it
// measures.
#ifndef ENGRAM_BENCH_ENGRAM_BENCH_PROC_H_
#define ENGRAM_BENCH_ENGRAM_BENCH_PROC_H_

#include <sys/types.h>

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/proc_stat.h"

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

// Starts argv[0] (a path) with stdin from /dev/null and stdout + stderr
// appended to `log_path`. The child is killed (SIGKILL) when the thread
// that called this exits (PR_SET_PDEATHSIG), so call it from the main
// thread: a child then never outlives this process, whatever way it ends.
absl::StatusOr<pid_t> SpawnLinkedChild(const std::vector<std::string>& argv,
                                       const std::string& log_path);

// True while `pid` (a child of this process) has not exited; reaps it once
// it has.
bool ChildRunning(pid_t pid);

// SIGTERM, then SIGKILL once `grace` has passed; reaps the child.
void StopChild(pid_t pid, absl::Duration grace);

// The last non-empty line of a text file ("(empty)" when there is none).
std::string LastLineOf(const std::string& path);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_ENGRAM_BENCH_PROC_H_
