#include "service/stream_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net/socket_io.h"
#include "common/util/log.h"
#include "proto/stream_wire.h"

namespace engram {
namespace {

void SetTimeout(int fd, int option, absl::Duration d) {
  timeval tv = absl::ToTimeval(d);
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

}  // namespace

struct StreamServer::Connection {
  std::thread thread;
  std::atomic<bool> finished{false};
  absl::Mutex mu;
  int fd ABSL_GUARDED_BY(mu) = -1;
  int inflight ABSL_GUARDED_BY(mu) = 0;
  absl::Mutex write_mu;                                   // one response at a time on the socket
  int write_fd = -1;                                      // == fd while the connection is open
  std::thread::id reader;                                 // the connection's own thread
  uint32_t version = 0;                                   // agreed in the hellos
  std::unique_ptr<TlsSession> tls;                        // set before the hello, when TLS is on
  std::vector<uint8_t> sealed ABSL_GUARDED_BY(write_mu);  // TLS records to send
  // Bytes a RocksDB reader could not send at once, for the backlog writer
  // (started on first need) to send in order.
  std::deque<std::vector<uint8_t>> backlog ABSL_GUARDED_BY(write_mu);
  size_t backlog_bytes ABSL_GUARDED_BY(write_mu) = 0;
  bool writing ABSL_GUARDED_BY(write_mu) = false;  // the backlog writer holds bytes
  bool broken ABSL_GUARDED_BY(write_mu) = false;   // a write failed: send nothing more
  bool stop_writer ABSL_GUARDED_BY(write_mu) = false;
  std::thread writer;

  // Reads n bytes of the stream (plaintext, through TLS when on). The
  // connection's thread only.
  bool Read(void* buf, size_t n, bool quick_ack = false) {
    return tls != nullptr ? tls->ReadFull(buf, n) : ReadFull(write_fd, buf, n, quick_ack);
  }

  void FailLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu) {
    broken = true;
    backlog.clear();
    backlog_bytes = 0;
    ::shutdown(write_fd, SHUT_RDWR);  // wakes the reader
  }

  // Sends iov[0, n) (TLS-sealed when on) after whatever is queued. The
  // connection's thread writes and waits for its peer (up to the write
  // timeout); any other thread, a RocksDB reader finishing a Lookup, never
  // waits on the peer: what the socket does not take at once is queued for
  // the backlog writer. REQUIRES: write_mu held.
  void SendLocked(iovec* iov, int n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu) {
    if (broken) return;
    iovec records;
    if (tls != nullptr) {
      sealed.clear();
      if (!tls->Seal(iov, n, &sealed)) return FailLocked();
      records = {sealed.data(), sealed.size()};
      iov = &records;
      n = 1;
    }
    if (backlog.empty() && !writing) {
      if (std::this_thread::get_id() == reader) {
        if (!WriteFull(write_fd, iov, n)) FailLocked();
        return;
      }
      const ssize_t sent = WriteSome(write_fd, iov, n);
      if (sent < 0) return FailLocked();
      AdvanceIov(&iov, &n, static_cast<size_t>(sent));
      if (n == 0) return;
    }
    std::vector<uint8_t> rest;
    for (int i = 0; i < n; ++i) {
      const uint8_t* p = static_cast<const uint8_t*>(iov[i].iov_base);
      rest.insert(rest.end(), p, p + iov[i].iov_len);
    }
    backlog_bytes += rest.size();
    backlog.push_back(std::move(rest));
    if (!writer.joinable()) writer = std::thread([this] { DrainBacklog(); });
  }

  // The backlog writer: sends queued bytes in order, blocking on the peer
  // (up to the write timeout) so that no reader thread has to.
  void DrainBacklog() {
    absl::MutexLock lock(&write_mu);
    for (;;) {
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu) {
        return stop_writer || !backlog.empty();
      };
      write_mu.Await(absl::Condition(&work));
      if (backlog.empty()) return;  // stopping, nothing left
      std::vector<uint8_t> bytes = std::move(backlog.front());
      backlog.pop_front();
      backlog_bytes -= bytes.size();
      writing = true;
      write_mu.Unlock();
      iovec iov = {bytes.data(), bytes.size()};
      const bool ok = WriteFull(write_fd, &iov, 1);
      write_mu.Lock();
      writing = false;
      if (!ok) FailLocked();
    }
  }

  // Waits for the backlog to be sent (or to fail) and joins its writer.
  void StopWriter() {
    {
      absl::MutexLock lock(&write_mu);
      auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu) {
        return backlog.empty() && !writing;
      };
      write_mu.Await(absl::Condition(&idle));
      stop_writer = true;
    }
    if (writer.joinable()) writer.join();
  }

  // Sends one response; a failed write ends the connection.
  void Respond(uint32_t id, const absl::Status& status, const grpc::Slice& rows) {
    stream::FrameHeader header;
    header.id = id;
    header.word = static_cast<uint32_t>(status.code());
    const absl::string_view message = status.message().substr(0, stream::kMaxErrorBytes);
    iovec iov[2];
    uint8_t head[stream::kHeaderBytes];
    iov[0] = {head, sizeof(head)};
    if (status.ok()) {
      iov[1] = {const_cast<uint8_t*>(rows.begin()), rows.size()};
    } else {
      iov[1] = {const_cast<char*>(message.data()), message.size()};
    }
    header.payload_bytes = iov[1].iov_len;
    stream::EncodeHeader(header, head);
    absl::MutexLock lock(&write_mu);
    SendLocked(iov, 2);
  }
  // Blocks while `limit` Lookups of this connection are in flight, or its
  // backlog holds over `max_backlog` bytes: the next request stays in the
  // socket, and TCP's window holds the client.
  void AwaitRoom(int limit, size_t max_backlog) {
    {
      absl::MutexLock lock(&mu);
      auto room = [this, limit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return inflight < limit; };
      mu.Await(absl::Condition(&room));
    }
    absl::MutexLock lock(&write_mu);
    auto drained = [this, max_backlog]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu) {
      return backlog_bytes <= max_backlog || broken;
    };
    write_mu.Await(absl::Condition(&drained));
  }
  void BeginLookup() {
    absl::MutexLock lock(&mu);
    ++inflight;
  }
  void EndLookup() {
    absl::MutexLock lock(&mu);
    --inflight;
  }
};

StreamServer::StreamServer(const StreamServerOptions& options, StoreService* service,
                           ShardMetrics* metrics)
    : options_(options), service_(service), metrics_(metrics) {}

absl::StatusOr<std::unique_ptr<StreamServer>> StreamServer::Start(
    const StreamServerOptions& options, StoreService* service, ShardMetrics* metrics) {
  std::unique_ptr<StreamServer> server(new StreamServer(options, service, metrics));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(options.port);
  const std::string where = absl::StrCat(options.host, ":", options.port);
  if (const int rc = ::getaddrinfo(options.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("row stream: cannot resolve ", where, ": ", ::gai_strerror(rc)));
  }
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || ::bind(fd, found->ai_addr, found->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
    const std::string reason = std::strerror(errno);
    ::freeaddrinfo(found);
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(absl::StrCat("row stream: cannot listen on ", where, ": ", reason,
                                               " (choose another --stream_port)"));
  }
  ::freeaddrinfo(found);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  server->port_ =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  server->listen_fd_ = fd;
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

StreamServer::~StreamServer() { Shutdown(); }

void StreamServer::AcceptLoop() {
  while (!stopping_.load()) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (stopping_.load()) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        LogLine('W', absl::StrCat("row stream: accept: ", std::strerror(errno)));
        absl::SleepFor(absl::Milliseconds(100));
        continue;
      }
      return;
    }
    absl::MutexLock lock(&mu_);
    ReapLocked();
    if (stopping_.load() || connections_.size() >= static_cast<size_t>(options_.max_connections)) {
      if (!stopping_.load()) {
        LogLine('W', absl::StrCat("row stream: refused a connection: ", connections_.size(),
                                  " are open (max_connections)"));
      }
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Connection>();
    {
      absl::MutexLock conn_lock(&c->mu);
      c->fd = fd;
    }
    c->write_fd = fd;
    Connection* raw = c.get();
    connections_.push_back(std::move(c));
    metrics_->stream_connections().Increment();
    raw->thread = std::thread([this, raw] { Serve(raw); });
  }
}

void StreamServer::Serve(Connection* c) {
  const int fd = c->write_fd;
  c->reader = std::this_thread::get_id();
  SetNoDelay(fd);
  bool open = true;
  if (options_.tls != nullptr) {
    absl::StatusOr<std::unique_ptr<TlsSession>> tls =
        TlsSession::Handshake(*options_.tls, fd, "", options_.hello_timeout);
    open = tls.ok();
    if (open) c->tls = std::move(*tls);
  }
  SetTimeout(fd, SO_SNDTIMEO, options_.write_timeout);
  SetTimeout(fd, SO_RCVTIMEO, options_.hello_timeout);
  open = open && Hello(c);
  SetTimeout(fd, SO_RCVTIMEO, options_.idle_timeout);
  std::vector<uint8_t> payload;
  uint8_t head[stream::kHeaderBytes];
  while (open &&
         (c->AwaitRoom(options_.max_inflight_per_connection, options_.max_backlog_bytes), true) &&
         c->Read(head, sizeof(head), /*quick_ack=*/true)) {
    const stream::FrameHeader header = stream::DecodeHeader(head);
    const bool timed = header.word == stream::kLookupTimed && c->version >= 3;
    if (header.word != stream::kLookup && !timed) {
      c->Respond(header.id,
                 absl::InvalidArgumentError(absl::StrCat(
                     "unknown row stream frame kind ", header.word, " (this connection knows ",
                     stream::kLookup, " = Lookup",
                     c->version >= 3 ? absl::StrCat(", ", stream::kLookupTimed, " = timed Lookup")
                                     : std::string(),
                     ", row stream version ", c->version, ")")),
                 grpc::Slice());
      break;
    }
    if (timed && header.payload_bytes < stream::kTimeoutBytes) {
      c->Respond(header.id,
                 absl::InvalidArgumentError(
                     absl::StrCat("timed Lookup frame of ", header.payload_bytes,
                                  " bytes: it needs ", stream::kTimeoutBytes, " for its timeout")),
                 grpc::Slice());
      break;
    }
    if (header.payload_bytes > options_.max_request_bytes) {
      c->Respond(header.id,
                 absl::ResourceExhaustedError(absl::StrCat(
                     "request of ", header.payload_bytes, " bytes; this server's limit is ",
                     options_.max_request_bytes, " bytes: split the batch")),
                 grpc::Slice());
      break;
    }
    if (payload.size() < header.payload_bytes) payload.resize(header.payload_bytes);
    if (!c->Read(payload.data(), header.payload_bytes, /*quick_ack=*/true)) break;
    c->BeginLookup();
    const uint32_t id = header.id;
    std::span<const uint8_t> request(payload.data(), header.payload_bytes);
    absl::Time deadline = absl::InfiniteFuture();
    if (timed) {
      const uint64_t us = stream::DecodeTimeoutMicros(request.data());
      // Longer than a day: treated as none (and no overflow).
      if (us < uint64_t{86400} * 1000000) deadline = absl::Now() + absl::Microseconds(us);
      request = request.subspan(stream::kTimeoutBytes);
    }
    service_->LookupBytes(
        request,
        [c, id](const absl::Status& status, grpc::Slice rows) {
          c->Respond(id, status, rows);
          rows = grpc::Slice();  // its buffer back to the pool first
          c->EndLookup();        // then a shutdown may go on
        },
        deadline);
  }
  {
    absl::MutexLock lock(&c->mu);
    c->mu.Await(absl::Condition(
        +[](int* inflight) { return *inflight == 0; }, &c->inflight));
  }
  c->StopWriter();  // the last responses go out (or fail) before the close
  {
    absl::MutexLock lock(&c->mu);
    ::close(c->fd);
    c->fd = -1;
  }
  metrics_->stream_connections().Decrement();
  c->finished.store(true);
}

bool StreamServer::Hello(Connection* c) {
  uint8_t hello[stream::kHelloBytes];
  if (!c->Read(hello, sizeof(hello))) return false;
  absl::StatusOr<uint32_t> version = stream::DecodeHello(hello);
  absl::StatusOr<uint32_t> token_bytes = stream::DecodeHelloTokenBytes(hello);
  if (!version.ok() || !token_bytes.ok()) return false;
  std::string token(*token_bytes, '\0');
  if (!token.empty() && !c->Read(token.data(), token.size())) return false;
  c->version = std::min(*version, stream::kVersion);
  stream::EncodeHello(c->version, hello);
  {
    iovec iov = {hello, sizeof(hello)};
    absl::MutexLock lock(&c->write_mu);
    c->SendLocked(&iov, 1);
    if (c->broken) return false;
  }
  if (options_.auth != nullptr) {
    const absl::Status allowed = options_.auth->Check(token, Role::kData);
    if (!allowed.ok()) {
      metrics_->RecordRequest(ShardMetrics::Method::kLookup, allowed.code(), absl::ZeroDuration());
      c->Respond(stream::kConnectionError, allowed, grpc::Slice());
      return false;
    }
  }
  return true;
}

void StreamServer::ReapLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->finished.load()) {
      (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void StreamServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  stopping_.store(true);
  ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  if (accept_thread_.joinable()) accept_thread_.join();
  ::close(listen_fd_);
  absl::MutexLock lock(&mu_);
  for (auto& c : connections_) {
    absl::MutexLock conn_lock(&c->mu);
    if (c->fd >= 0) ::shutdown(c->fd, SHUT_RD);  // the reader sees EOF
  }
  for (auto& c : connections_) c->thread.join();
  connections_.clear();
}

}  // namespace engram
