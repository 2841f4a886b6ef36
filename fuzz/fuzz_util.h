// What the fuzz targets share: FUZZ_CHECK, which turns a broken invariant
// into a crash libFuzzer reports (with the input that caused it), and
// MemFile, the input as an open file descriptor for parsers that read
// files (memfd: no file system involved).
#ifndef ENGRAM_FUZZ_FUZZ_UTIL_H_
#define ENGRAM_FUZZ_FUZZ_UTIL_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

// Aborts, printing the condition and `message`, unless `cond` holds.
#define FUZZ_CHECK(cond, message)                                                           \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(message).c_str());                                           \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

namespace engram::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// An anonymous in-memory file holding a copy of the input, open for
// reading and writing; path() names it for APIs that open a path.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("engram-fuzz", MFD_CLOEXEC);
    FUZZ_CHECK(fd_ >= 0, "memfd_create failed");
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      FUZZ_CHECK(n > 0, "write to the memfd failed");
      done += static_cast<size_t>(n);
    }
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  int fd() const { return fd_; }
  std::string path() const { return absl::StrCat("/proc/self/fd/", fd_); }

 private:
  int fd_ = -1;
};

}  // namespace engram::fuzz

#endif  // ENGRAM_FUZZ_FUZZ_UTIL_H_
