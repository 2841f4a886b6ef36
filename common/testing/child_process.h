// Child processes for tests and benchmarks: one way to start a program
// (fork/exec), read its stdout line by line, signal it, stop it, and make
// sure it never outlives this process. Test-only (engram_common_testing).
#ifndef ENGRAM_COMMON_TESTING_CHILD_PROCESS_H_
#define ENGRAM_COMMON_TESTING_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace engram::testing {

struct ChildOptions {
  // Default: the child's stdout is a pipe read with ReadLine(). False: it
  // goes to stdout_path (appended), or is this process's stdout when that
  // is empty.
  bool pipe_stdout = true;
  std::string stdout_path;
  // Appended to when non-empty; otherwise this process's stderr.
  std::string stderr_path;
  // Read from when non-empty; otherwise /dev/null.
  std::string stdin_path;
  // The child gets SIGKILL when the thread that spawned it exits
  // (PR_SET_PDEATHSIG): spawn from the main thread.
  bool die_with_parent = false;
  // When >= 0: an open, writable cgroup.procs file (of a cgroup v1 or v2
  // group). The child writes "0" to it (moving itself there) before exec,
  // so the program starts, and allocates, inside that group; if the write
  // fails the child exits with 126 instead of running outside it.
  int cgroup_procs_fd = -1;
};

// One started program. Every live child is registered for
// InstallChildCleanup(). The destructor SIGKILLs a child that still runs and
// reaps it. Not thread-safe.
class ChildProcess {
 public:
  // argv[0] is a path, or a program name looked up on $PATH. NotFound when
  // it is not an executable.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                             const ChildOptions& options = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The next line of the child's stdout (without '\n'). DeadlineExceeded
  // after `timeout`, OutOfRange at the end of its output,
  // FailedPrecondition when stdout is not a pipe.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  void Signal(int sig);
  // True until the child has exited (then it is reaped).
  bool Running();
  // Waits for the exit; the raw wait status (the same on every call).
  int Wait();
  // SIGTERM, then SIGKILL once `grace` has passed; the raw wait status.
  int Stop(absl::Duration grace);

 private:
  ChildProcess(pid_t pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}
  void Reaped(int status);

  pid_t pid_;
  int stdout_fd_;  // -1 when stdout is not a pipe
  bool reaped_ = false;
  int wait_status_ = 0;
  std::string buffered_;
};

// Installs handlers for SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV and
// SIGABRT that SIGKILL and reap every live ChildProcess, then die of the
// same signal; ignores SIGPIPE. Call once, early in main().
void InstallChildCleanup();

// Runs argv to completion (stdout is this process's); its exit code.
// Internal when it was killed by a signal; Spawn's errors otherwise.
absl::StatusOr<int> RunCommand(const std::vector<std::string>& argv,
                               const std::string& stdin_path = "",
                               const std::string& stderr_path = "");

// The last non-empty line of a text file ("(empty)" when there is none).
std::string LastLineOf(const std::string& path);

}  // namespace engram::testing

#endif  // ENGRAM_COMMON_TESTING_CHILD_PROCESS_H_
