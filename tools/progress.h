// A one-line progress bar on stderr, drawn only when stderr is a terminal
// (pipes, CI logs and tests see nothing). Not thread-safe: update it from one
// thread.
#ifndef ENGRAM_TOOLS_PROGRESS_H_
#define ENGRAM_TOOLS_PROGRESS_H_

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace engram {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label)
      : label_(std::move(label)),
        enabled_(isatty(STDERR_FILENO) == 1),
        start_(std::chrono::steady_clock::now()) {}
  ~ProgressBar() { Finish(); }

  // Redraws at most ten times a second, and always at done == total.
  void Update(uint64_t done, uint64_t total) {
    if (!enabled_ || total == 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double frac = static_cast<double>(done) / static_cast<double>(total);
    const int width = 30, fill = static_cast<int>(frac * width);
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::string bar(static_cast<size_t>(fill), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r%s [%s] %5.1f%% %llu/%llu %.1fs", label_.c_str(), bar.c_str(),
                 100.0 * frac, static_cast<unsigned long long>(done),
                 static_cast<unsigned long long>(total), secs);
    std::fflush(stderr);
    drawn_ = true;
  }
  void Finish() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_{};
};

}  // namespace engram

#endif  // ENGRAM_TOOLS_PROGRESS_H_
