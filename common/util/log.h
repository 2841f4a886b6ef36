// Minimal logging for the daemons and the store: one line per message on stderr,
// glog-style ("E0102 15:04:05.123456 message"). The abseil release we build
// against has no absl/log. Thread-safe (one fprintf per line).
#ifndef ENGRAM_COMMON_UTIL_LOG_H_
#define ENGRAM_COMMON_UTIL_LOG_H_

#include <cstdio>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace engram {

// severity: 'I' info, 'W' warning, 'E' error.
inline void LogLine(char severity, const std::string& message) {
  const std::string when = absl::FormatTime("%m%d %H:%M:%E6S", absl::Now(), absl::LocalTimeZone());
  std::fprintf(stderr, "%c%s %s\n", severity, when.c_str(), message.c_str());
}

}  // namespace engram

#endif  // ENGRAM_COMMON_UTIL_LOG_H_
