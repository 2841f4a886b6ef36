// Blocking and non-blocking socket I/O helpers shared by the row stream
// (client and server) and the benchmarks' bare TCP exchange.
//
// Every function is a thin loop over one system call; none allocates.
// Thread-safe as the underlying calls are (one reader and one writer per
// socket at a time).
#ifndef ENGRAM_COMMON_NET_SOCKET_IO_H_
#define ENGRAM_COMMON_NET_SOCKET_IO_H_

#include <sys/uio.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace engram {

// Reads exactly n bytes. False on EOF before n bytes or on an error (errno
// tells which; 0 for a clean EOF). `quick_ack`: TCP_QUICKACK before every
// receive, so the peer's segments are acknowledged at once rather than
// after Linux's delayed-ACK timer (>= 40 ms), which a sender held by the
// receive window would otherwise wait out (docs/benchmarks.md, "Settings
// chosen by measurement").
bool ReadFull(int fd, void* buf, size_t n, bool quick_ack = false);

// Writes every byte of iov[0, n); the array is modified in place as bytes
// go out. False on an error (errno set). MSG_NOSIGNAL: a closed peer is an
// EPIPE error, never a signal.
bool WriteFull(int fd, struct iovec* iov, int n);

// Writes what the socket takes now without blocking: returns the number of
// bytes written (possibly 0), or -1 on an error other than EAGAIN (errno
// set). `iov` is left untouched.
ssize_t WriteSome(int fd, const struct iovec* iov, int n);

// Advances iov[0, *n) by `bytes` written: drops whole entries and trims
// the first partial one.
void AdvanceIov(struct iovec** iov, int* n, size_t bytes);

// TCP_NODELAY on.
void SetNoDelay(int fd);

// Connects a TCP socket to host:port (a numeric address or a name) within
// `timeout`. Returns the connected socket (CLOEXEC, TCP_NODELAY, blocking)
// or Unavailable naming the address and the reason.
absl::StatusOr<int> ConnectTcp(const std::string& host, int port, absl::Duration timeout);

// Splits "host:port" or "[v6]:port" into host (without brackets) and port.
// InvalidArgument when there is no numeric port.
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port);

// Internal(what + ": " + strerror(errno)).
absl::Status ErrnoStatus(const std::string& what);

}  // namespace engram

#endif  // ENGRAM_COMMON_NET_SOCKET_IO_H_
