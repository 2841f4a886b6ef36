#include "common/util/file_util.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  const int e = errno;
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  return e == ENOENT ? absl::NotFoundError(msg) : absl::InternalError(msg);
}

// Closes fd on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

absl::Status ReadFileInChunks(const std::string& path,
                              absl::FunctionRef<absl::Status(std::string_view)> fn) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  FdCloser closer(fd);
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot read", path);
    }
    if (n == 0) return absl::OkStatus();
    RETURN_IF_ERROR(fn(std::string_view(buf.data(), static_cast<size_t>(n))));
  }
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::string out;
  RETURN_IF_ERROR(ReadFileInChunks(path, [&](std::string_view chunk) {
    out.append(chunk);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = Errno("cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    absl::Status s = Errno("cannot sync", tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = Errno("cannot rename into", path);
    ::unlink(tmp.c_str());
    return s;
  }
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  FdCloser closer(fd);
  if (::fsync(fd) != 0) return Errno("cannot sync directory", dir);
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> HashFile(const std::string& path) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  absl::Status s = ReadFileInChunks(path, [&](std::string_view chunk) {
    XXH3_64bits_update(st, chunk.data(), chunk.size());
    return absl::OkStatus();
  });
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (!s.ok()) return s;
  return h;
}

}  // namespace engram
