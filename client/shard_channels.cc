#include "client/shard_channels.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace engram {
namespace {

constexpr char kLookupMethod[] = "/engram.v1.EngramStore/Lookup";

// A failure of the transport or the replica itself, reported as
// UNAVAILABLE (or DEADLINE_EXCEEDED) once no replica answered.
bool TransportFailure(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kUnknown:
    // A server shutting down cancels calls it had not fully received; our
    // own cancellations never retry (ShardRpc::Cancel stops retries first).
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

// Worth another replica: transport failures, a replica shedding load
// (RESOURCE_EXHAUSTED), and one serving another table version during a
// rolling switch (FAILED_PRECONDITION); these two keep their code when no
// replica answers.
bool Retryable(absl::StatusCode code) {
  return TransportFailure(code) || code == absl::StatusCode::kResourceExhausted ||
         code == absl::StatusCode::kFailedPrecondition;
}

}  // namespace

void LatencyWindow::Add(absl::Duration d) {
  absl::MutexLock l(&mu_);
  ns_[next_] = absl::ToInt64Nanoseconds(d);
  next_ = (next_ + 1) % kSize;
  filled_ = std::min(filled_ + 1, kSize);
}

absl::Duration LatencyWindow::P95() const {
  std::vector<int64_t> v;
  {
    absl::MutexLock l(&mu_);
    v.assign(ns_.begin(), ns_.begin() + filled_);
  }
  if (v.empty()) return absl::ZeroDuration();
  const size_t k = (v.size() * 95) / 100;
  std::nth_element(v.begin(), v.begin() + std::min(k, v.size() - 1), v.end());
  return absl::Nanoseconds(v[std::min(k, v.size() - 1)]);
}

ShardChannels::ShardChannels(const std::vector<std::vector<std::string>>& addresses,
                             const ChannelOptions& options)
    : addresses_(addresses),
      authorization_(options.auth_token.empty() ? "" : "Bearer " + options.auth_token) {
  replicas_.resize(addresses.size());
  const int per_replica = std::max(1, options.channels_per_replica);
  for (size_t s = 0; s < addresses.size(); ++s) {
    for (const std::string& addr : addresses[s]) {
      auto r = std::make_unique<Replica>();
      for (int c = 0; c < per_replica; ++c) {
        grpc::ChannelArguments args;
        args.SetMaxReceiveMessageSize(-1);
        args.SetMaxSendMessageSize(-1);
        args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
        args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
        args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                    static_cast<int>(absl::ToInt64Milliseconds(options.max_reconnect_backoff)));
        // HTTP/2 keepalive pings find a connection whose peer went silent (a
        // cut link, a frozen host) in seconds, not at TCP's next
        // retransmission: the replica is reconnected once it is back.
        args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
        args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
        args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
        args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
        // Each channel its own TCP connection.
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
        args.SetInt("engram.channel_index", c);
        if (!options.http2_bdp_probe) {
          args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
          args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
                      static_cast<int>(std::min<uint32_t>(options.http2_window_bytes, INT32_MAX)));
        }
        if (!options.tls_server_name.empty()) {
          args.SetSslTargetNameOverride(options.tls_server_name);
        }
        std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
            addr,
            options.credentials != nullptr ? options.credentials
                                           : grpc::InsecureChannelCredentials(),
            args);
        r->stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
        if (options.row_stream) {
          StreamConnectionOptions so;
          so.address = addr;
          so.channel = channel;
          so.connect_timeout = options.stream_connect_timeout;
          so.max_backoff = options.max_reconnect_backoff;
          so.buffers = &buffers_;
          so.tls = options.stream_tls;
          so.tls_server_name = options.tls_server_name;
          so.auth_token = options.auth_token;
          r->streams.push_back(std::make_unique<StreamConnection>(std::move(so)));
        }
      }
      replicas_[s].push_back(std::move(r));
    }
  }
  completions_ = std::thread([this] {
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) static_cast<CqTag*>(tag)->Complete(ok);
  });
}

ShardChannels::~ShardChannels() {
  cq_.Shutdown();
  completions_.join();
}

std::string ShardChannels::Describe(int shard) const {
  return absl::StrCat("shard ", shard, " (", absl::StrJoin(addresses_[shard], "|"), ")");
}

int ShardChannels::NextChannel(int shard, int replica) {
  Replica& r = *replicas_[shard][replica];
  const uint32_t i = r.next.fetch_add(1, std::memory_order_relaxed);
  return static_cast<int>(i % r.stubs.size());
}

ShardRpc::ShardRpc(ShardChannels* channels, RpcCounters* counters, LatencyWindow* latency,
                   int shard, grpc::Slice request, size_t response_bytes, RpcReceiver* receiver)
    : channels_(channels),
      counters_(counters),
      latency_window_(latency),
      shard_(shard),
      request_slice_(std::move(request)),
      response_bytes_(response_bytes),
      request_(&request_slice_, 1),
      receiver_(receiver) {
  hedge_tag_.rpc = this;
  attempts_.reserve(static_cast<size_t>(channels_->n_replicas(shard)));
}

ShardRpc::~ShardRpc() = default;

ShardRpc::Attempt* ShardRpc::NextAttemptLocked() {
  const int n = channels_->n_replicas(shard_);
  if (tried_ >= n) return nullptr;
  auto a = std::make_unique<Attempt>();
  a->rpc = this;
  a->replica = (next_replica_ + tried_) % n;
  ++tried_;
  attempts_.push_back(std::move(a));
  return attempts_.back().get();
}

void ShardRpc::Start(const RpcPolicy& policy, int first_replica) {
  Attempt* a;
  bool arm = false;
  {
    absl::MutexLock l(&mu_);
    policy_ = policy;
    next_replica_ = first_replica;
    a = NextAttemptLocked();
    ++outstanding_;
    arm = policy.hedge && channels_->n_replicas(shard_) > 1;
    alarm_pending_ = arm;
  }
  counters_->rpcs.fetch_add(1, std::memory_order_relaxed);
  counters_->bytes_sent.fetch_add(request_.Length(), std::memory_order_relaxed);
  if (arm) {
    alarm_.Set(channels_->cq(), absl::ToChronoTime(absl::Now() + policy.hedge_delay), &hedge_tag_);
  }
  Launch(a);
}

void ShardRpc::Launch(Attempt* a) {
  a->start = absl::Now();
  a->channel = channels_->NextChannel(shard_, a->replica);
  if (StreamConnection* stream = channels_->Stream(shard_, a->replica, a->channel)) {
    a->stream.store(stream);
    stream->Send(a, request_slice_, response_bytes_,
                 a->start + policy_.deadline);  // may call UseGrpc
    return;
  }
  LaunchGrpc(a);
}

void ShardRpc::LaunchGrpc(Attempt* a) {
  a->stream.store(nullptr);
  a->context.set_deadline(absl::ToChronoTime(a->start + policy_.deadline));
  if (!channels_->authorization().empty()) {
    a->context.AddMetadata("authorization", channels_->authorization());
  }
  a->call = channels_->Stub(shard_, a->replica, a->channel)
                ->PrepareUnaryCall(&a->context, kLookupMethod, request_, channels_->cq());
  a->call->StartCall();
  a->call->Finish(&a->response, &a->status, a);
}

void ShardRpc::OnAttemptDone(Attempt* a, const absl::Status& status) {
  const absl::Duration took = absl::Now() - a->start;
  const std::string& addr = channels_->address(shard_, a->replica);
  bool finish = false, cancel_alarm = false, quiet = false;
  absl::Status result;
  Attempt* retry = nullptr;
  {
    absl::MutexLock l(&mu_);
    --outstanding_;
    if (!done_) {
      if (status.ok()) {
        absl::Status d = receiver_->Decode(a->response);
        if (d.ok()) {
          done_ = finish = true;
          latency_ = took;
          counters_->bytes_received.fetch_add(a->response.Length(), std::memory_order_relaxed);
        } else {
          last_error_ =
              absl::InternalError(absl::StrCat(addr, ": malformed response: ", d.message()));
        }
      } else {
        last_error_ = absl::Status(status.code(), absl::StrCat(addr, ": ", status.message()));
      }
      if (!done_) {
        if (!cancelled_ && outstanding_ == 0 && Retryable(last_error_.code())) {
          retry = NextAttemptLocked();
          if (retry != nullptr) ++outstanding_;
        }
        if (retry == nullptr && outstanding_ == 0) {
          done_ = finish = true;
          result = last_error_;
        }
      }
      cancel_alarm = done_ && alarm_pending_;
    }
    quiet = QuietLocked();
  }
  if (finish && result.ok()) latency_window_->Add(took);
  if (cancel_alarm) alarm_.Cancel();
  if (retry != nullptr) {
    counters_->retries.fetch_add(1, std::memory_order_relaxed);
    Launch(retry);
  }
  if (finish) {
    if (!result.ok()) {
      counters_->failed.fetch_add(1, std::memory_order_relaxed);
      const bool deadline = result.code() == absl::StatusCode::kDeadlineExceeded;
      const absl::StatusCode code =
          TransportFailure(result.code())
              ? (deadline ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable)
              : result.code();
      result = absl::Status(
          code, absl::StrCat(channels_->Describe(shard_),
                             Retryable(result.code()) ? ": no replica answered; last: " : ": ",
                             result.message()));
    }
    receiver_->Done(result);
  }
  if (quiet) receiver_->Quiet();  // may destroy *this: nothing may follow
}

void ShardRpc::OnHedgeAlarm(bool fired) {
  Attempt* hedge = nullptr;
  bool quiet = false;
  {
    absl::MutexLock l(&mu_);
    alarm_pending_ = false;
    if (fired && !done_ && !cancelled_) {
      hedge = NextAttemptLocked();
      if (hedge != nullptr) ++outstanding_;
    }
    quiet = QuietLocked();
  }
  if (hedge != nullptr) {
    counters_->hedges.fetch_add(1, std::memory_order_relaxed);
    Launch(hedge);
  }
  if (quiet) receiver_->Quiet();  // may destroy *this: nothing may follow
}

void ShardRpc::Cancel() {
  bool cancel_alarm;
  std::vector<Attempt*> live;
  {
    absl::MutexLock l(&mu_);
    cancelled_ = true;
    cancel_alarm = alarm_pending_;
    for (auto& a : attempts_) live.push_back(a.get());
  }
  if (cancel_alarm) alarm_.Cancel();
  for (Attempt* a : live) {
    if (StreamConnection* stream = a->stream.load()) stream->Cancel(a);
    a->context.TryCancel();
  }
}

}  // namespace engram
