#include "bench/engram_bench/engram_bench_proc.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace engram::bench {

double SelfCpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double LoopbackSocketBytes(std::span<const int> peer_ports) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double bytes = 0;
  while (const dirent* e = ::readdir(dir)) {
    int fd = -1;
    if (!absl::SimpleAtoi(e->d_name, &fd) || fd == ::dirfd(dir)) continue;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    // gRPC's sockets are AF_INET6 with IPv4-mapped addresses.
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;
    int port = -1;
    if (peer.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&peer);
      if (v4->sin_addr.s_addr == htonl(INADDR_LOOPBACK)) port = ntohs(v4->sin_port);
    } else if (peer.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&peer);
      const uint8_t* a = v6->sin6_addr.s6_addr;
      static constexpr uint8_t kMappedLoopback[16] = {0, 0, 0,    0,    0,   0, 0, 0,
                                                      0, 0, 0xff, 0xff, 127, 0, 0, 1};
      if (std::equal(a, a + 16, kMappedLoopback)) port = ntohs(v6->sin6_port);
    }
    if (port < 0 || std::find(peer_ports.begin(), peer_ports.end(), port) == peer_ports.end()) {
      continue;
    }
    tcp_info info{};
    socklen_t info_len = sizeof(info);
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_len) == 0) {
      bytes += static_cast<double>(info.tcpi_bytes_acked + info.tcpi_bytes_received);
    }
  }
  ::closedir(dir);
  return bytes;
}

int PortOf(const std::string& host_port) {
  int port = -1;
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &port)) {
    return -1;
  }
  return port;
}

absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  if (port <= 0) return absl::InternalError("no free port on 127.0.0.1");
  return port;
}

}  // namespace engram::bench
