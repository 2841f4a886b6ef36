#include "common/net/socket_io.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace engram {

bool ReadFull(int fd, void* buf, size_t n, bool quick_ack) {
  auto* p = static_cast<uint8_t*>(buf);
  const int one = 1;
  while (n > 0) {
    if (quick_ack) ::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) errno = 0;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

void AdvanceIov(struct iovec** iov, int* n, size_t bytes) {
  while (*n > 0 && bytes >= (*iov)->iov_len) {
    bytes -= (*iov)->iov_len;
    ++*iov;
    --*n;
  }
  if (*n > 0 && bytes > 0) {
    (*iov)->iov_base = static_cast<uint8_t*>((*iov)->iov_base) + bytes;
    (*iov)->iov_len -= bytes;
  }
}

bool WriteFull(int fd, struct iovec* iov, int n) {
  while (n > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    const ssize_t put = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    AdvanceIov(&iov, &n, static_cast<size_t>(put));
  }
  return true;
}

ssize_t WriteSome(int fd, const struct iovec* iov, int n) {
  msghdr msg{};
  msg.msg_iov = const_cast<struct iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(n);
  for (;;) {
    const ssize_t put = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (put >= 0) return put;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;
  }
}

void SetNoDelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::Status ErrnoStatus(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  std::string h, p;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("address \"", address, "\" is not [host]:port"));
    }
    h = address.substr(1, close - 1);
    p = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" has no :port"));
    }
    h = address.substr(0, colon);
    p = address.substr(colon + 1);
  }
  int value = 0;
  if (h.empty() || !absl::SimpleAtoi(p, &value) || value <= 0 || value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" is not host:port with a port in 1..65535"));
  }
  *host = h;
  *port = value;
  return absl::OkStatus();
}

absl::StatusOr<int> ConnectTcp(const std::string& host, int port, absl::Duration timeout) {
  const std::string where = absl::StrCat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", where, ": ", ::gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for ", where));
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last = absl::UnavailableError(absl::StrCat("socket for ", where, ": ", std::strerror(errno)));
      continue;
    }
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ms = static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
      rc = ::poll(&p, 1, ms);
      if (rc == 0) {
        errno = ETIMEDOUT;
        rc = -1;
      } else if (rc > 0) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err == 0 ? 0 : -1;
      }
    }
    if (rc != 0) {
      last = absl::UnavailableError(absl::StrCat("connect to ", where, ": ", std::strerror(errno)));
      ::close(fd);
      continue;
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    SetNoDelay(fd);
    ::freeaddrinfo(found);
    return fd;
  }
  ::freeaddrinfo(found);
  return last;
}

}  // namespace engram
