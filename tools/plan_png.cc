#include "tools/plan_png.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

extern char** environ;

namespace engram {
namespace {

// A gnuplot string literal.
std::string GnuplotString(const std::string& path) {
  return absl::StrCat("'", absl::StrReplaceAll(path, {{"'", "''"}}), "'");
}

// Plots hit ratio and exposed wait against the budget with gnuplot, run as
// a child process.
}  // namespace

absl::Status WritePlanPng(const std::string& png, const std::vector<BudgetPlan>& plans,
                          double target) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/engram-plan.XXXXXX");
  if (::mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a temporary directory ", dir));
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  bool log_x = true;
  {
    std::ofstream data(dir + "/plan.dat");
    for (const BudgetPlan& p : plans) {
      if (p.percent_of_shard <= 0) log_x = false;
      data << p.percent_of_shard << ' ' << 100 * p.hit_ratio << ' '
           << (p.disk_saturated ? std::string("NaN") : absl::StrCat(p.exposed_wait_percent))
           << '\n';
    }
  }
  {
    std::ofstream gp(dir + "/plan.gp");
    gp << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
          "  set terminal pngcairo size 900,560\n} else {\n  set terminal png size 900,560\n}\n"
       << "set output " << GnuplotString(png) << "\n"
       << "set title 'engramctl plan: hit ratio and predicted exposed wait'\n"
       << "set xlabel 'RAM budget per shard (% of a shard)'\n"
       << (log_x ? "set logscale x\n" : "")
       << "set ylabel 'hot-tier hit ratio (%)'\nset yrange [0:100]\nset ytics nomirror\n"
          "set y2label 'predicted exposed wait (% of step time)'\nset y2tics\nset y2range [0:*]\n"
          "set grid\nset key outside below horizontal\n"
       << "plot " << GnuplotString(dir + "/plan.dat")
       << " using 1:2 with linespoints lw 2 title 'hit ratio' axes x1y1, "
          "'' using 1:3 with linespoints lw 2 title 'exposed wait' axes x1y2, "
       << target << " axes x1y2 with lines dt 2 title 'target exposed wait'\n";
  }
  const std::string log = dir + "/gnuplot.log", script = dir + "/plan.gp";
  std::error_code ec;
  std::filesystem::remove(png, ec);  // an old plot must not pass for a new one
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::string prog = "gnuplot";
  char* argv[] = {prog.data(), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  const int err = ::posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    return absl::FailedPreconditionError(absl::StrCat("--png: cannot run gnuplot (",
                                                      std::strerror(err),
                                                      "): install it (apt-get install "
                                                      "gnuplot-nox) or drop --png"));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string first;
  {
    std::ifstream in(log);
    std::string line;
    while (first.empty() && std::getline(in, line))
      first = std::string(absl::StripAsciiWhitespace(line));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || std::filesystem::file_size(png, ec) == 0 ||
      ec) {
    return absl::InternalError(
        absl::StrCat("--png ", png, ": gnuplot failed",
                     WIFEXITED(status) ? absl::StrCat(" (exit ", WEXITSTATUS(status), ")") : "",
                     first.empty() ? "" : ": ", first));
  }
  return absl::OkStatus();
}

}  // namespace engram
