#include "bench/common/tcp_exchange.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/net/socket_io.h"
#include "common/util/prefetch_gather.h"

namespace engram::bench {
namespace {

constexpr uint32_t kMaxLayers = 64;

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpRowServer>> TcpRowServer::Start(TcpRowServerOptions options) {
  if (options.rows == nullptr || options.row_bytes == 0 ||
      options.layer_base.size() != options.layer_rows.size() || options.layer_base.empty() ||
      options.layer_base.size() > kMaxLayers) {
    return absl::InvalidArgumentError("TcpRowServerOptions: no rows or layers");
  }
  std::unique_ptr<TcpRowServer> server(new TcpRowServer(std::move(options)));
  server->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (server->listen_fd_ < 0) return ErrnoStatus("socket");
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  if (::bind(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(server->listen_fd_, 4) != 0 ||
      ::getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return ErrnoStatus("listen on 127.0.0.1");
  }
  server->port_ = ntohs(addr.sin_port);
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  if (pthread_getcpuclockid(server->thread_.native_handle(), &server->cpu_clock_) != 0) {
    server->cpu_clock_ = CLOCK_PROCESS_CPUTIME_ID;
  }
  return server;
}

TcpRowServer::~TcpRowServer() {
  stopping_.store(true);
  ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  {
    absl::MutexLock lock(&mu_);
    if (conn_fd_ >= 0) ::shutdown(conn_fd_, SHUT_RDWR);  // wakes read()
  }
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
}

TcpRowServerStats TcpRowServer::stats() const {
  TcpRowServerStats stats;
  stats.requests = requests_.load();
  stats.handler_seconds = 1e-9 * static_cast<double>(handler_nanos_.load());
  timespec ts{};
  clock_gettime(cpu_clock_, &ts);
  stats.cpu_seconds = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  return stats;
}

void TcpRowServer::Serve() {
  while (!stopping_.load()) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;  // shut down
    }
    {
      absl::MutexLock lock(&mu_);
      conn_fd_ = fd;
    }
    if (!stopping_.load()) ServeConnection(fd);
    {
      absl::MutexLock lock(&mu_);
      conn_fd_ = -1;
    }
    ::close(fd);
  }
}

void TcpRowServer::ServeConnection(int fd) {
  SetNoDelay(fd);
  const size_t n_layers = options_.layer_base.size();
  const size_t row_bytes = options_.row_bytes;
  std::vector<uint32_t> counts;
  std::vector<uint64_t> ids;
  std::vector<uint8_t> out;
  for (;;) {
    uint32_t header_layers = 0;
    if (!ReadFull(fd, &header_layers, sizeof(header_layers)) || header_layers == 0 ||
        header_layers > n_layers) {
      return;
    }
    counts.resize(header_layers);
    if (!ReadFull(fd, counts.data(), counts.size() * sizeof(uint32_t))) return;
    size_t total = 0;
    for (uint32_t c : counts) total += c;
    ids.resize(total);
    if (!ReadFull(fd, ids.data(), total * sizeof(uint64_t))) return;
    const absl::Time start = absl::Now();  // the whole request has arrived
    out.resize(total * row_bytes);

    // The same prefetching gather as the shard's hot tier: the ceiling
    // must not be slower than our own server at the part they share.
    uint8_t* dst = out.data();
    const uint64_t* id = ids.data();
    bool bad_id = false;
    for (uint32_t l = 0; l < header_layers; ++l) {
      const uint8_t* layer = options_.rows + options_.layer_base[l] * row_bytes;
      const uint64_t rows = options_.layer_rows[l];
      PrefetchGather(
          counts[l], row_bytes, dst, [](size_t) {},
          [&](size_t k) { return id[k] < rows ? layer + id[k] * row_bytes : nullptr; },
          [&](size_t, uint8_t*) { bad_id = true; });
      if (bad_id) return;
      id += counts[l];
      dst += size_t{counts[l]} * row_bytes;
    }
    handler_nanos_.fetch_add(static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::Now() - start)));
    requests_.fetch_add(1);
    struct iovec iov = {out.data(), out.size()};
    if (!WriteFull(fd, &iov, 1)) return;
  }
}

absl::StatusOr<std::unique_ptr<TcpRowClient>> TcpRowClient::Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket");
  sockaddr_in addr = Loopback(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    absl::Status s = ErrnoStatus(absl::StrCat("connect to 127.0.0.1:", port));
    ::close(fd);
    return s;
  }
  SetNoDelay(fd);
  return std::unique_ptr<TcpRowClient>(new TcpRowClient(fd));
}

TcpRowClient::~TcpRowClient() { ::close(fd_); }

absl::Status TcpRowClient::Exchange(std::span<const std::span<const uint64_t>> layers,
                                    std::span<uint8_t> rows_out) {
  if (layers.empty() || layers.size() > kMaxLayers) {
    return absl::InvalidArgumentError("1..64 layers per exchange");
  }
  uint32_t header[1 + kMaxLayers];
  header[0] = static_cast<uint32_t>(layers.size());
  struct iovec iov[1 + kMaxLayers];
  iov[0] = {header, (1 + layers.size()) * sizeof(uint32_t)};
  for (size_t l = 0; l < layers.size(); ++l) {
    header[1 + l] = static_cast<uint32_t>(layers[l].size());
    iov[1 + l] = {const_cast<uint64_t*>(layers[l].data()), layers[l].size() * sizeof(uint64_t)};
  }
  if (!WriteFull(fd_, iov, static_cast<int>(1 + layers.size()))) {
    return ErrnoStatus("send ids");
  }
  if (!ReadFull(fd_, rows_out.data(), rows_out.size())) {
    return absl::UnavailableError("the TCP row server closed the connection");
  }
  return absl::OkStatus();
}

}  // namespace engram::bench
