#include "client/stream_connection.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/net/socket_io.h"
#include "engram/v1/engram_store.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "proto/stream_wire.h"

namespace engram {

namespace {

// A response larger than this is a broken stream, not a response (the
// size of an answer to a call still waiting is checked exactly).
constexpr uint64_t kMaxResponseBytes = uint64_t{256} << 20;

// A peer that goes quiet is found out without waiting for calls: TCP
// keepalive probes an idle connection, and data left unacknowledged for
// kUserTimeout fails the socket (a partitioned or frozen host).
constexpr int kKeepIdleSeconds = 5, kKeepIntervalSeconds = 1, kKeepCount = 3;
constexpr absl::Duration kUserTimeout = absl::Seconds(3);

// Bounds how long a frame may stall mid-way on a live connection, and arms
// keepalive: the reader never blocks for good on a peer frozen mid-reply.
void SetLiveness(int fd, absl::Duration stall) {
  timeval tv = absl::ToTimeval(stall);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepIdleSeconds, sizeof(int));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepIntervalSeconds, sizeof(int));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepCount, sizeof(int));
  const unsigned int user_timeout_ms =
      static_cast<unsigned int>(absl::ToInt64Milliseconds(kUserTimeout));
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

// `d` times a factor in [0.8, 1.2): reconnects of many clients to one
// restarted shard spread out.
absl::Duration Jittered(absl::Duration d) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return d * std::uniform_real_distribution<double>(0.8, 1.2)(rng);
}

// The reader's longest poll: a call sent meanwhile with a later deadline
// needs no wake-up, it is looked at when the poll returns.
constexpr absl::Duration kMaxPoll = absl::Milliseconds(100);

// The replica's address is not in the message: ShardRpc names it.
absl::Status StreamError(absl::string_view why) {
  return absl::UnavailableError(absl::StrCat("row stream: ", why));
}

bool IsCredentialError(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnauthenticated ||
         s.code() == absl::StatusCode::kPermissionDenied;
}

}  // namespace

StreamConnection::StreamConnection(StreamConnectionOptions options) : options_(std::move(options)) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int port = 0;
  if (!SplitHostPort(options_.address, &host_, &port).ok() || wake_fd_ < 0) {
    // Not host:port (a gRPC target such as unix:...): gRPC only.
    absl::MutexLock lock(&mu_);
    state_ = State::kNoStream;
    return;
  }
  reader_ = std::thread([this] { Run(); });
  writer_ = std::thread([this] { WriteLoop(); });
}

StreamConnection::~StreamConnection() {
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kStopping;
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    if (connecting_ != nullptr) connecting_->TryCancel();
  }
  Wake();
  if (reader_.joinable()) reader_.join();
  if (writer_.joinable()) writer_.join();
  std::vector<StreamCall*> left;
  {
    absl::MutexLock lock(&mu_);
    left = TakeAllLocked();
  }
  for (StreamCall* call : left) call->StreamDone(absl::CancelledError("client closed"), nullptr);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void StreamConnection::Wake() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
}

void StreamConnection::Send(StreamCall* call, const grpc::Slice& request, size_t response_bytes,
                            absl::Time deadline) {
  absl::Status fail;
  bool use_grpc = false, wake = false;
  {
    absl::MutexLock lock(&mu_);
    switch (state_) {
      case State::kNoStream:
      case State::kFallback:
        use_grpc = true;
        break;
      case State::kBackoff:
        fail = last_error_;
        break;
      case State::kStopping:
        fail = absl::CancelledError("client closing");
        break;
      case State::kConnecting:
      case State::kReady:
        wake = deadline < poll_until_;
        outstanding_.push_back(Outstanding{next_id_, call, response_bytes, deadline, request});
        if (++next_id_ == stream::kConnectionError) next_id_ = 1;
        if (state_ == State::kReady) {
          WriteOrQueueLocked(outstanding_.back());
          outstanding_.back().request = grpc::Slice();
        }
        break;
    }
  }
  if (wake) Wake();
  if (use_grpc) {
    call->UseGrpc();
  } else if (!fail.ok()) {
    call->StreamDone(fail, nullptr);
  }
}

void StreamConnection::Cancel(StreamCall* call) {
  bool found = false;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < outstanding_.size(); ++i) {
      if (outstanding_[i].call == call) {
        outstanding_[i] = std::move(outstanding_.back());
        outstanding_.pop_back();
        found = true;
        break;
      }
    }
  }
  if (found) call->StreamDone(absl::CancelledError("cancelled"), nullptr);
}

StreamCall* StreamConnection::TakeLocked(uint32_t id) {
  for (size_t i = 0; i < outstanding_.size(); ++i) {
    if (outstanding_[i].id == id) {
      StreamCall* call = outstanding_[i].call;
      outstanding_[i] = std::move(outstanding_.back());
      outstanding_.pop_back();
      return call;
    }
  }
  return nullptr;
}

size_t StreamConnection::ExpectedBytesLocked(uint32_t id) const {
  for (const Outstanding& o : outstanding_) {
    if (o.id == id) return o.response_bytes;
  }
  return 0;
}

std::vector<StreamCall*> StreamConnection::TakeAllLocked() {
  std::vector<StreamCall*> calls;
  for (const Outstanding& o : outstanding_) calls.push_back(o.call);
  outstanding_.clear();
  return calls;
}

std::vector<StreamCall*> StreamConnection::TakeExpiredLocked(absl::Time now) {
  std::vector<StreamCall*> expired;
  for (size_t i = 0; i < outstanding_.size();) {
    if (outstanding_[i].deadline <= now) {
      expired.push_back(outstanding_[i].call);
      outstanding_[i] = std::move(outstanding_.back());
      outstanding_.pop_back();
    } else {
      ++i;
    }
  }
  return expired;
}

void StreamConnection::FailExpired(const std::vector<StreamCall*>& calls) {
  for (StreamCall* call : calls) {
    call->StreamDone(absl::DeadlineExceededError("row stream: no answer by the deadline"), nullptr);
  }
}

void StreamConnection::WriteOrQueueLocked(const Outstanding& o) {
  Write w;
  if (version_.load(std::memory_order_relaxed) >= 3) {
    // The shard stops reading rows for it once the caller has given up.
    const absl::Duration left = std::max(o.deadline - absl::Now(), absl::ZeroDuration());
    stream::EncodeHeader({o.id, stream::kLookupTimed, stream::kTimeoutBytes + o.request.size()},
                         w.header);
    stream::EncodeTimeoutMicros(
        static_cast<uint64_t>(std::min(absl::ToInt64Microseconds(left), int64_t{1} << 40)),
        w.header + stream::kHeaderBytes);
    w.header_bytes = stream::kHeaderBytes + stream::kTimeoutBytes;
  } else {
    stream::EncodeHeader({o.id, stream::kLookup, o.request.size()}, w.header);
  }
  w.payload = o.request;
  if (tls_ != nullptr) {
    // Sealed now, under mu_: records go out in the order they are sealed.
    const iovec plain[2] = {{w.header, w.header_bytes},
                            {const_cast<uint8_t*>(w.payload.begin()), w.payload.size()}};
    if (!tls_->Seal(plain, 2, &w.sealed)) {
      ::shutdown(fd_, SHUT_RDWR);
      return;
    }
    w.payload = grpc::Slice();
  }
  if (writes_.empty() && !writer_busy_) {
    iovec iov[2] = {{w.header, w.header_bytes},
                    {const_cast<uint8_t*>(w.payload.begin()), w.payload.size()}};
    if (!w.sealed.empty()) iov[0] = {w.sealed.data(), w.sealed.size()}, iov[1] = {nullptr, 0};
    const ssize_t n = WriteSome(fd_, iov, 2);
    if (n < 0) {
      ::shutdown(fd_, SHUT_RDWR);  // the reader fails the call
      return;
    }
    if (static_cast<size_t>(n) == iov[0].iov_len + iov[1].iov_len) return;
    w.done = static_cast<size_t>(n);
  }
  writes_.push_back(std::move(w));
}

void StreamConnection::WriteLoop() {
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state_ == State::kStopping || state_ == State::kNoStream ||
           (state_ == State::kReady && !writes_.empty());
  };
  for (;;) {
    Write w;
    int fd;
    uint64_t generation;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&ready));
      if (state_ == State::kStopping || state_ == State::kNoStream) return;
      w = std::move(writes_.front());
      writes_.pop_front();
      writer_busy_ = true;
      fd = fd_;
      generation = generation_;
    }
    iovec iov[2] = {{w.header, w.header_bytes},
                    {const_cast<uint8_t*>(w.payload.begin()), w.payload.size()}};
    if (!w.sealed.empty()) iov[0] = {w.sealed.data(), w.sealed.size()}, iov[1] = {nullptr, 0};
    iovec* p = iov;
    int n = 2;
    AdvanceIov(&p, &n, w.done);
    const bool ok = WriteFull(fd, p, n);
    absl::MutexLock lock(&mu_);
    writer_busy_ = false;
    if (!ok && generation == generation_) ::shutdown(fd, SHUT_RDWR);
  }
}

absl::StatusOr<int> StreamConnection::Connect(bool* grpc_answered, absl::Duration wait_for_ready) {
  *grpc_answered = false;
  v1::InfoResponse info;
  {
    grpc::ClientContext context;
    if (wait_for_ready > absl::ZeroDuration()) {
      context.set_wait_for_ready(true);
      context.set_deadline(
          absl::ToChronoTime(absl::Now() + std::min(wait_for_ready, options_.connect_timeout)));
    } else {
      context.set_deadline(absl::ToChronoTime(absl::Now() + options_.connect_timeout));
    }
    if (!options_.auth_token.empty()) {
      context.AddMetadata("authorization", "Bearer " + options_.auth_token);
    }
    {
      absl::MutexLock lock(&mu_);
      if (state_ == State::kStopping) return absl::CancelledError("client closing");
      connecting_ = &context;
    }
    std::unique_ptr<v1::EngramStore::Stub> stub = v1::EngramStore::NewStub(options_.channel);
    const grpc::Status status = stub->Info(&context, v1::InfoRequest(), &info);
    {
      absl::MutexLock lock(&mu_);
      connecting_ = nullptr;
    }
    if (!status.ok()) {
      // A refused credential is the caller's to see as such, not as a
      // transport failure.
      if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
          status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
        return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                            absl::StrCat("Info: ", status.error_message()));
      }
      return StreamError(absl::StrCat("Info: ", status.error_message()));
    }
  }
  *grpc_answered = true;
  if (info.stream_port() == 0) return -1;
  absl::StatusOr<int> fd =
      ConnectTcp(host_, static_cast<int>(info.stream_port()), options_.connect_timeout);
  if (!fd.ok()) return StreamError(fd.status().message());
  if (absl::Status greeted = Greet(*fd); !greeted.ok()) {
    ::close(*fd);
    tls_.reset();
    return greeted;
  }
  return fd;
}

absl::Status StreamConnection::Greet(int fd) {
  if (options_.tls != nullptr) {
    absl::StatusOr<std::unique_ptr<TlsSession>> tls = TlsSession::Handshake(
        *options_.tls, fd, options_.tls_server_name.empty() ? host_ : options_.tls_server_name,
        options_.connect_timeout);
    if (!tls.ok()) {
      return tls.status().code() == absl::StatusCode::kUnauthenticated
                 ? tls.status()
                 : StreamError(tls.status().message());
    }
    tls_ = std::move(*tls);
  }
  const std::string& token = options_.auth_token;
  uint8_t hello[stream::kHelloBytes];
  stream::EncodeHello(stream::kVersion, hello, static_cast<uint32_t>(token.size()));
  iovec iov[2] = {{hello, sizeof(hello)}, {const_cast<char*>(token.data()), token.size()}};
  timeval tv = absl::ToTimeval(options_.connect_timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  bool sent;
  if (tls_ != nullptr) {
    std::vector<uint8_t> records;
    sent = tls_->Seal(iov, 2, &records);
    iovec sealed = {records.data(), records.size()};
    sent = sent && WriteFull(fd, &sealed, 1);
  } else {
    sent = WriteFull(fd, iov, 2);
  }
  absl::Status failed;
  if (!sent || !Read(fd, hello, sizeof(hello))) {
    failed = StreamError(absl::StrCat("hello: ", errno == 0 ? "closed" : std::strerror(errno)));
  } else if (absl::StatusOr<uint32_t> v = stream::DecodeHello(hello); !v.ok()) {
    failed = StreamError(v.status().message());
  } else if (*v > stream::kVersion || (*v == 1 && !token.empty())) {
    // Version 1 servers take a hello without a token; version 2 ones
    // requests without a timeout.
    failed = StreamError(absl::StrCat("the shard answers with version ", *v,
                                      "; this client speaks versions ", token.empty() ? 1 : 2,
                                      " to ", stream::kVersion));
  } else {
    version_.store(*v, std::memory_order_relaxed);
  }
  // From here a receive that stalls mid-frame for connect_timeout fails.
  SetLiveness(fd, options_.connect_timeout);
  return failed;
}

bool StreamConnection::Read(int fd, void* buf, size_t n, bool quick_ack) {
  return tls_ != nullptr ? tls_->ReadFull(buf, n) : ReadFull(fd, buf, n, quick_ack);
}

void StreamConnection::Run() {
  absl::Duration backoff = options_.min_backoff;
  auto stopping = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return state_ == State::kStopping; };
  bool first = true;
  for (;;) {
    bool grpc_answered = false;
    absl::StatusOr<int> fd = Connect(&grpc_answered, absl::ZeroDuration());
    if (first && !fd.ok() && !grpc_answered && !IsCredentialError(fd.status())) {
      // The first connection's transport failure is tried once more, with
      // gRPC waiting for its channel to reconnect (after its 50 ms
      // backoff) for a few backoffs: a passing failure does not fail the
      // first calls; a replica that is down fails them that much later.
      fd = Connect(&grpc_answered, 4 * options_.min_backoff);
    }
    first = false;
    std::vector<StreamCall*> failed, rerouted, expired;
    absl::Status error;
    {
      absl::MutexLock lock(&mu_);
      if (state_ == State::kStopping) {
        if (fd.ok() && *fd >= 0) ::close(*fd);
        return;
      }
      expired = TakeExpiredLocked(absl::Now());
      if (!fd.ok() && IsCredentialError(fd.status())) {
        // Refused credentials: fail the calls with that, and retry later
        // (a rotated token or certificate may be fixed meanwhile).
        state_ = State::kBackoff;
        last_error_ = error = fd.status();
        failed = TakeAllLocked();
      } else if (!fd.ok() && grpc_answered) {
        // The replica answers gRPC but its stream cannot be reached (a
        // port not exposed, say): gRPC meanwhile, the stream again later.
        state_ = State::kFallback;
        rerouted = TakeAllLocked();
      } else if (!fd.ok()) {
        state_ = State::kBackoff;
        last_error_ = error = fd.status();
        failed = TakeAllLocked();
      } else if (*fd < 0) {
        state_ = State::kNoStream;
        rerouted = TakeAllLocked();
      } else {
        fd_ = *fd;
        ++generation_;
        state_ = State::kReady;
        for (Outstanding& o : outstanding_) {  // queued while connecting
          WriteOrQueueLocked(o);
          o.request = grpc::Slice();
        }
      }
    }
    FailExpired(expired);
    for (StreamCall* call : failed) call->StreamDone(error, nullptr);
    for (StreamCall* call : rerouted) call->UseGrpc();
    if (!fd.ok()) {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), Jittered(backoff))) return;
      if (state_ == State::kBackoff) state_ = State::kConnecting;  // kFallback stays
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    if (*fd < 0) return;  // gRPC only, for good
    backoff = options_.min_backoff;
    const absl::Status why = ReadLoop(*fd);
    {
      absl::MutexLock lock(&mu_);
      ::shutdown(fd_, SHUT_RDWR);
      mu_.Await(absl::Condition(
          +[](bool* busy) { return !*busy; }, &writer_busy_));
      ::close(fd_);
      fd_ = -1;
      tls_.reset();
      writes_.clear();
      ++generation_;
      failed = TakeAllLocked();
      if (state_ == State::kStopping) {
        error = absl::CancelledError("client closed");
      } else {
        state_ = State::kConnecting;
        error = IsCredentialError(why) ? why : StreamError(why.message());
      }
    }
    for (StreamCall* call : failed) call->StreamDone(error, nullptr);
    absl::MutexLock lock(&mu_);
    if (state_ == State::kStopping) return;
  }
}

absl::Status StreamConnection::ReadLoop(int fd) {
  uint8_t head[stream::kHeaderBytes];
  for (;;) {
    int timeout_ms;
    {
      absl::MutexLock lock(&mu_);
      if (state_ == State::kStopping) return absl::CancelledError("client closed");
      const absl::Time now = absl::Now();
      poll_until_ = now + kMaxPoll;
      for (const Outstanding& o : outstanding_) poll_until_ = std::min(poll_until_, o.deadline);
      timeout_ms =
          static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(poll_until_ - now) + 1, 0,
                                               absl::ToInt64Milliseconds(kMaxPoll) + 1));
    }
    // Plaintext TLS already holds is not on the socket for poll to see.
    if (tls_ != nullptr && tls_->HasPending()) timeout_ms = 0;
    pollfd p[2] = {{fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(p, 2, timeout_ms) < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (p[1].revents != 0) {
      uint64_t drained;
      (void)!::read(wake_fd_, &drained, sizeof(drained));
    }
    std::vector<StreamCall*> expired;
    {
      absl::MutexLock lock(&mu_);
      poll_until_ = absl::InfiniteFuture();
      expired = TakeExpiredLocked(absl::Now());
    }
    FailExpired(expired);
    if (p[0].revents == 0 && (tls_ == nullptr || !tls_->HasPending())) continue;
    if (!Read(fd, head, sizeof(head), /*quick_ack=*/true)) {
      return absl::UnavailableError(errno == 0 ? "the shard closed the connection"
                                               : std::strerror(errno));
    }
    const stream::FrameHeader header = stream::DecodeHeader(head);
    if (header.word == 0) {
      size_t expected;
      {
        absl::MutexLock lock(&mu_);
        expected = ExpectedBytesLocked(header.id);
      }
      // A call cancelled or expired meanwhile expects nothing: its answer,
      // if sane, is read and dropped.
      if (header.payload_bytes > kMaxResponseBytes ||
          (expected != 0 && header.payload_bytes != expected)) {
        return absl::InternalError(absl::StrCat("a response of ", header.payload_bytes,
                                                " bytes where ", expected, " were due"));
      }
      StreamBufferPool::Buffer* b = options_.buffers->Get(header.payload_bytes);
      if (!Read(fd, StreamBufferPool::Data(b), header.payload_bytes, /*quick_ack=*/true)) {
        options_.buffers->Put(b);
        return absl::UnavailableError("the shard closed the connection mid-response");
      }
      StreamCall* call;
      {
        absl::MutexLock lock(&mu_);
        call = TakeLocked(header.id);
      }
      if (call == nullptr) {  // cancelled or expired meanwhile
        options_.buffers->Put(b);
        continue;
      }
      grpc::Slice slice = StreamBufferPool::ToSlice(b, header.payload_bytes);
      grpc::ByteBuffer response(&slice, 1);
      call->StreamDone(absl::OkStatus(), &response);
      continue;
    }
    if (header.payload_bytes > stream::kMaxErrorBytes) {
      return absl::InternalError(
          absl::StrCat("an error response of ", header.payload_bytes, " bytes"));
    }
    std::string message(header.payload_bytes, '\0');
    if (!Read(fd, message.data(), message.size())) {
      return absl::UnavailableError("the shard closed the connection mid-response");
    }
    const absl::StatusCode code =
        header.word <= 16 ? static_cast<absl::StatusCode>(header.word) : absl::StatusCode::kUnknown;
    if (header.id == stream::kConnectionError) {  // the shard ends the connection
      return absl::Status(code, absl::StrCat("the shard closed the row stream: ", message));
    }
    StreamCall* call;
    {
      absl::MutexLock lock(&mu_);
      call = TakeLocked(header.id);
    }
    if (call != nullptr) call->StreamDone(absl::Status(code, message), nullptr);
  }
}

}  // namespace engram
