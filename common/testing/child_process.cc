#include "common/testing/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/util/status_macros.h"

namespace engram::testing {
namespace {

// Live children, for the fatal-signal handler (lock-free slots).
constexpr int kMaxChildren = 128;
std::atomic<pid_t> g_children[kMaxChildren];

void RegisterChild(pid_t pid) {
  for (std::atomic<pid_t>& slot : g_children) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, pid)) return;
  }
}

void UnregisterChild(pid_t pid) {
  for (std::atomic<pid_t>& slot : g_children) {
    pid_t p = pid;
    if (slot.compare_exchange_strong(p, 0)) return;
  }
}

// Async-signal-safe: kill, waitpid, signal and raise only.
void KillChildrenAndDie(int sig) {
  for (std::atomic<pid_t>& slot : g_children) {
    const pid_t p = slot.exchange(0);
    if (p > 0) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// argv0 itself when it names a path; otherwise the first executable of
// that name on $PATH ("" when there is none).
std::string ResolveProgram(const std::string& argv0) {
  if (argv0.find('/') != std::string::npos) {
    return ::access(argv0.c_str(), X_OK) == 0 ? argv0 : "";
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", argv0);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

int OpenOrMinusOne(const std::string& path, int flags) {
  return path.empty() ? -1 : ::open(path.c_str(), flags | O_CLOEXEC, 0644);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::vector<std::string>& argv, const ChildOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to start");
  const std::string program = ResolveProgram(argv[0]);
  if (program.empty()) {
    return absl::NotFoundError(absl::StrCat(argv[0], " is not an executable"));
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  int pipe_fds[2] = {-1, -1};
  if (options.pipe_stdout && ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  const int in_fd =
      OpenOrMinusOne(options.stdin_path.empty() ? "/dev/null" : options.stdin_path, O_RDONLY);
  const int out_fd = options.pipe_stdout
                         ? pipe_fds[1]
                         : OpenOrMinusOne(options.stdout_path, O_WRONLY | O_CREAT | O_APPEND);
  const int err_fd = OpenOrMinusOne(options.stderr_path, O_WRONLY | O_CREAT | O_APPEND);
  auto close_fds = [&] {
    for (int fd : {in_fd, pipe_fds[1], err_fd}) {
      if (fd >= 0) ::close(fd);
    }
    if (!options.pipe_stdout && out_fd >= 0) ::close(out_fd);
  };
  if (in_fd < 0 || (!options.stdout_path.empty() && out_fd < 0) ||
      (!options.stderr_path.empty() && err_fd < 0)) {
    close_fds();
    if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
    return absl::InternalError(
        absl::StrCat("cannot open the redirections of ", argv[0], ": ", std::strerror(errno)));
  }

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec: other threads may hold locks.
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent is already gone
    }
    if (options.cgroup_procs_fd >= 0 && ::write(options.cgroup_procs_fd, "0", 1) != 1) {
      ::_exit(126);
    }
    ::dup2(in_fd, STDIN_FILENO);
    if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
    ::execv(program.c_str(), args.data());
    ::_exit(127);
  }
  const int fork_errno = errno;
  close_fds();
  if (pid < 0) {
    if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(fork_errno)));
  }
  RegisterChild(pid);
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, pipe_fds[0]));
}

ChildProcess::~ChildProcess() {
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    Wait();
  }
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
}

absl::StatusOr<std::string> ChildProcess::ReadLine(absl::Duration timeout) {
  if (stdout_fd_ < 0) {
    return absl::FailedPreconditionError("the child's stdout is not a pipe");
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError("no line from the child");
    pollfd p{stdout_fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(ms) + 1);
    if (r < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::OutOfRangeError("the child closed its stdout");
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

void ChildProcess::Signal(int sig) {
  if (!reaped_) ::kill(pid_, sig);
}

void ChildProcess::Reaped(int status) {
  reaped_ = true;
  wait_status_ = status;
  UnregisterChild(pid_);
}

bool ChildProcess::Running() {
  if (reaped_) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == 0) return true;
  Reaped(status);
  return false;
}

int ChildProcess::Wait() {
  if (!reaped_) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    Reaped(status);
  }
  return wait_status_;
}

int ChildProcess::Stop(absl::Duration grace) {
  Signal(SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (Running()) {
    if (absl::Now() > deadline) {
      Signal(SIGKILL);
      return Wait();
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return wait_status_;
}

void InstallChildCleanup() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV, SIGABRT}) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = KillChildrenAndDie;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
  ::signal(SIGPIPE, SIG_IGN);
}

absl::StatusOr<int> RunCommand(const std::vector<std::string>& argv, const std::string& stdin_path,
                               const std::string& stderr_path) {
  ChildOptions options;
  options.pipe_stdout = false;
  options.stdin_path = stdin_path;
  if (!stderr_path.empty()) {
    std::ofstream(stderr_path, std::ios::trunc);  // a fresh file per run
    options.stderr_path = stderr_path;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> child, ChildProcess::Spawn(argv, options));
  const int status = child->Wait();
  if (!WIFEXITED(status)) {
    return absl::InternalError(absl::StrCat(argv[0], " was killed"));
  }
  return WEXITSTATUS(status);
}

std::string LastLineOf(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last.empty() ? "(empty)" : last;
}

}  // namespace engram::testing
