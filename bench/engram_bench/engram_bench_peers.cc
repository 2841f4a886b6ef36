// The peers of engram-bench that fetch over a wire: Redis (hiredis MGET)
// and the bare TCP exchange. Both ask for each layer's distinct rows and
// scatter them into output order, with the step's layers spread over the
// connections (see engram_bench_systems.h).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/common/bench_client_shards.h"
#include "bench/common/tcp_exchange.h"
#include "bench/engram_bench/engram_bench_proc.h"
#include "bench/engram_bench/engram_bench_systems.h"
#include "bench/shard/bench_shard_grpc.h"
#include "common/util/status_macros.h"

namespace engram::bench {
namespace {

// engram-shard's default --max-rows-per-request.
constexpr size_t kMaxRowsPerRequest = 65536;

// Runs call(i) for every i in [0, n) at once: call 0 on the calling
// thread, the others on threads kept for the object's life. One caller at
// a time.
class Fanout {
 public:
  using Call = std::function<absl::Status(int)>;

  explicit Fanout(int n) : status_(static_cast<size_t>(n)) {
    for (int i = 1; i < n; ++i) threads_.emplace_back([this, i] { Helper(i); });
  }
  ~Fanout() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      work_.SignalAll();
    }
    for (std::thread& t : threads_) t.join();
  }
  Fanout(const Fanout&) = delete;
  Fanout& operator=(const Fanout&) = delete;

  absl::Status Run(const Call& call) {
    if (threads_.empty()) return call(0);
    {
      absl::MutexLock lock(&mu_);
      call_ = &call;
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
      work_.SignalAll();
    }
    absl::Status status = call(0);
    absl::MutexLock lock(&mu_);
    while (pending_ > 0) done_.Wait(&mu_);
    for (size_t i = 1; i < status_.size(); ++i) status.Update(status_[i]);
    return status;
  }

 private:
  void Helper(int i) {
    uint64_t seen = 0;
    for (;;) {
      const Call* call = nullptr;
      {
        absl::MutexLock lock(&mu_);
        while (!stop_ && generation_ == seen) work_.Wait(&mu_);
        if (stop_) return;
        seen = generation_;
        call = call_;
      }
      absl::Status s = (*call)(i);
      absl::MutexLock lock(&mu_);
      status_[static_cast<size_t>(i)] = std::move(s);
      if (--pending_ == 0) done_.Signal();
    }
  }

  absl::Mutex mu_;
  absl::CondVar work_;  // a new generation, or stop
  absl::CondVar done_;  // pending_ reached 0
  const Call* call_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::Status> status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

// What a peer's fetcher does whatever the peer: lays the step's distinct
// rows out connection by connection (connection k carries the layers
// l % n == k, their rows one after the other), runs the connections at
// once, and scatters the rows into output order.
class PeerFetch {
 public:
  // Writes the distinct rows of `layers` of `step`, layer after layer, to
  // `dst`, over connection `connection`.
  using FetchConnection = std::function<absl::Status(int connection, std::span<const int> layers,
                                                     size_t step, uint8_t* dst)>;

  PeerFetch(const StepStream& stream, uint32_t row_bytes, int connections)
      : stream_(stream),
        row_bytes_(row_bytes),
        layers_(static_cast<size_t>(connections)),
        fanout_(connections),
        unique_rows_(stream.ids_per_step() * row_bytes),
        out_(stream.ids_per_step() * row_bytes),
        layer_rows_(static_cast<size_t>(stream.n_layers())),
        connection_rows_(static_cast<size_t>(connections)) {
    for (int l = 0; l < stream.n_layers(); ++l) {
      layers_[static_cast<size_t>(l % connections)].push_back(l);
    }
  }

  absl::StatusOr<RowPieces> Fetch(size_t step, const FetchConnection& fetch) {
    uint8_t* dst = unique_rows_.data();
    for (size_t k = 0; k < layers_.size(); ++k) {
      connection_rows_[k] = dst;
      for (int l : layers_[k]) {
        layer_rows_[static_cast<size_t>(l)] = dst;
        dst += stream_.unique(step, l).size() * row_bytes_;
      }
    }
    RETURN_IF_ERROR(fanout_.Run([&](int k) {
      return fetch(k, layers_[static_cast<size_t>(k)], step,
                   connection_rows_[static_cast<size_t>(k)]);
    }));
    ScatterRows(stream_, step, layer_rows_, row_bytes_, out_.data());
    piece_ = std::span<const uint8_t>(out_);
    return RowPieces(&piece_, 1);
  }

 private:
  const StepStream& stream_;
  const uint32_t row_bytes_;
  std::vector<std::vector<int>> layers_;  // [connection]
  Fanout fanout_;
  std::vector<uint8_t> unique_rows_;
  std::vector<uint8_t> out_;
  std::span<const uint8_t> piece_;
  std::vector<const uint8_t*> layer_rows_;  // [layer], into unique_rows_
  std::vector<uint8_t*> connection_rows_;   // [connection], into unique_rows_
};

class RedisSystem : public BenchSystem {
 public:
  RedisSystem(std::unique_ptr<RedisServer> server, uint32_t row_bytes, size_t mget_keys)
      : BenchSystem("redis"),
        server_(std::move(server)),
        row_bytes_(row_bytes),
        mget_keys_(std::max<size_t>(1, mget_keys)) {}

  bool networked() const override { return true; }

  absl::StatusOr<FetchStep> NewFetcher(const StepStream& stream, int connections) override {
    struct State {
      std::vector<std::unique_ptr<RedisRowClient>> clients;
      std::vector<std::vector<MgetBatch>> batches;  // [connection]
      std::unique_ptr<PeerFetch> fetch;
    };
    auto state = std::make_shared<State>();
    for (int k = 0; k < connections; ++k) {
      ASSIGN_OR_RETURN(std::unique_ptr<RedisRowClient> c, RedisRowClient::Connect(server_->port()));
      state->clients.push_back(std::move(c));
    }
    state->batches.resize(static_cast<size_t>(connections));
    state->fetch = std::make_unique<PeerFetch>(stream, row_bytes_, connections);
    const uint32_t rb = row_bytes_;
    const size_t max_keys = mget_keys_;
    std::atomic<uint64_t>* rows = &rows_;
    PeerFetch::FetchConnection one = [state, &stream, rb, max_keys](int k,
                                                                    std::span<const int> layers,
                                                                    size_t step, uint8_t* dst) {
      std::vector<MgetBatch>& batches = state->batches[static_cast<size_t>(k)];
      batches.clear();
      for (int l : layers) {
        std::span<const uint64_t> ids = stream.unique(step, l);
        for (size_t b = 0; b < ids.size(); b += max_keys) {
          const size_t n = std::min(max_keys, ids.size() - b);
          batches.push_back({static_cast<uint32_t>(l), ids.subspan(b, n), dst});
          dst += n * rb;
        }
      }
      return state->clients[static_cast<size_t>(k)]->Mget(batches, rb);
    };
    return FetchStep([state, one, rows, &stream](size_t step) {
      rows->fetch_add(stream.unique_rows(step), std::memory_order_relaxed);
      return state->fetch->Fetch(step, one);
    });
  }

  absl::StatusOr<SystemCounters> Counters() const override {
    SystemCounters c;
    c.server_cpu_seconds = ProcessCpuSeconds(server_->pid());
    const int port = server_->port();
    c.wire_bytes = LoopbackSocketBytes(std::span<const int>(&port, 1));
    c.wire_rows = static_cast<double>(rows_.load());
    return c;
  }

 private:
  std::unique_ptr<RedisServer> server_;
  const uint32_t row_bytes_;
  const size_t mget_keys_;
  std::atomic<uint64_t> rows_{0};
};

class TcpSystem : public BenchSystem {
 public:
  explicit TcpSystem(TcpRowServerOptions options)
      : BenchSystem("bare TCP"), options_(std::move(options)) {}

  bool networked() const override { return true; }
  bool server_in_process() const override { return true; }

  absl::StatusOr<FetchStep> NewFetcher(const StepStream& stream, int connections) override {
    // One server per connection: a TcpRowServer serves one at a time.
    while (servers_.size() < static_cast<size_t>(connections)) {
      ASSIGN_OR_RETURN(std::unique_ptr<TcpRowServer> s, TcpRowServer::Start(options_));
      servers_.push_back(std::move(s));
    }
    struct State {
      std::vector<std::unique_ptr<TcpRowClient>> clients;
      std::vector<std::vector<std::span<const uint64_t>>> layers;  // [connection][layer]
      std::unique_ptr<PeerFetch> fetch;
    };
    auto state = std::make_shared<State>();
    for (int k = 0; k < connections; ++k) {
      ASSIGN_OR_RETURN(std::unique_ptr<TcpRowClient> c,
                       TcpRowClient::Connect(servers_[static_cast<size_t>(k)]->port()));
      state->clients.push_back(std::move(c));
    }
    state->layers.resize(static_cast<size_t>(connections));
    state->fetch = std::make_unique<PeerFetch>(stream, options_.row_bytes, connections);
    const uint32_t rb = options_.row_bytes;
    std::atomic<uint64_t>* rows = &rows_;
    PeerFetch::FetchConnection one = [state, &stream, rb, rows](int k, std::span<const int> layers,
                                                                size_t step, uint8_t* dst) {
      // Layers this connection does not carry go as empty ones.
      std::vector<std::span<const uint64_t>>& spans = state->layers[static_cast<size_t>(k)];
      spans.assign(static_cast<size_t>(layers.back() + 1), {});
      size_t n = 0;
      for (int l : layers) {
        spans[static_cast<size_t>(l)] = stream.unique(step, l);
        n += spans[static_cast<size_t>(l)].size();
      }
      rows->fetch_add(n, std::memory_order_relaxed);
      return state->clients[static_cast<size_t>(k)]->Exchange(spans,
                                                              std::span<uint8_t>(dst, n * rb));
    };
    return FetchStep([state, one](size_t step) { return state->fetch->Fetch(step, one); });
  }

  absl::StatusOr<SystemCounters> Counters() const override {
    SystemCounters c;
    std::vector<int> ports;
    for (const auto& s : servers_) {
      c.server_cpu_seconds += s->stats().cpu_seconds;
      ports.push_back(s->port());
    }
    c.wire_bytes = LoopbackSocketBytes(ports);
    c.wire_rows = static_cast<double>(rows_.load());
    return c;
  }

 private:
  const TcpRowServerOptions options_;
  std::vector<std::unique_ptr<TcpRowServer>> servers_;
  std::atomic<uint64_t> rows_{0};
};

// A diagnostic: engram-shard through one bare unary gRPC call per step
// and connection (RawLookupClient: the hand codec over a GenericStub, all
// of the connection's layers in one request), without the client library.
class RawGrpcSystem : public BenchSystem {
 public:
  RawGrpcSystem(std::string name, std::unique_ptr<Deployment> deployment, uint32_t row_bytes)
      : BenchSystem(std::move(name)),
        deployment_(std::move(deployment)),
        row_bytes_(row_bytes),
        port_(PortOf(deployment_->addresses().at(0))) {}

  bool networked() const override { return true; }

  absl::StatusOr<FetchStep> NewFetcher(const StepStream& stream, int connections) override {
    struct State {
      std::vector<std::unique_ptr<RawLookupClient>> clients;
      std::vector<std::vector<wire::LayerRowIds>> requests;  // [connection]
      std::unique_ptr<PeerFetch> fetch;
    };
    auto state = std::make_shared<State>();
    for (int k = 0; k < connections; ++k) {
      state->clients.push_back(std::make_unique<RawLookupClient>(BenchChannel(port_)));
    }
    state->requests.resize(static_cast<size_t>(connections));
    state->fetch = std::make_unique<PeerFetch>(stream, row_bytes_, connections);
    const uint32_t rb = row_bytes_;
    std::atomic<uint64_t>* rows = &rows_;
    PeerFetch::FetchConnection one = [state, &stream, rb, rows](int k, std::span<const int> layers,
                                                                size_t step,
                                                                uint8_t* dst) -> absl::Status {
      // One request for all the connection's layers, split only where the
      // server's limit (engram-shard --max-rows-per-request) demands it.
      std::vector<wire::LayerRowIds>& request = state->requests[static_cast<size_t>(k)];
      RawLookupClient& client = *state->clients[static_cast<size_t>(k)];
      auto send = [&]() -> absl::Status {
        size_t n = 0;
        for (const wire::LayerRowIds& r : request) n += r.row_ids.size();
        if (n == 0) return absl::OkStatus();
        rows->fetch_add(n, std::memory_order_relaxed);
        ASSIGN_OR_RETURN(RowPieces got, client.Lookup(request, n * rb));
        for (std::span<const uint8_t> piece : got) {  // out of the reply's slices
          std::memcpy(dst, piece.data(), piece.size());
          dst += piece.size();
        }
        request.clear();
        return absl::OkStatus();
      };
      request.clear();
      size_t in_request = 0;
      for (int l : layers) {
        std::span<const uint64_t> ids = stream.unique(step, l);
        while (!ids.empty()) {
          const size_t take = std::min(ids.size(), kMaxRowsPerRequest - in_request);
          request.push_back({static_cast<uint32_t>(l), ids.first(take)});
          ids = ids.subspan(take);
          in_request += take;
          if (in_request == kMaxRowsPerRequest) {
            RETURN_IF_ERROR(send());
            in_request = 0;
          }
        }
      }
      return send();
    };
    return FetchStep([state, one](size_t step) { return state->fetch->Fetch(step, one); });
  }

  absl::StatusOr<SystemCounters> Counters() const override {
    SystemCounters c;
    c.server_cpu_seconds = deployment_->cpu_seconds();
    c.wire_bytes = LoopbackSocketBytes(std::span<const int>(&port_, 1));
    c.wire_rows = static_cast<double>(rows_.load());
    return c;
  }

 private:
  std::unique_ptr<Deployment> deployment_;
  const uint32_t row_bytes_;
  const int port_;
  std::atomic<uint64_t> rows_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<BenchSystem>> StartRawGrpc(const EngramSystemOptions& o,
                                                          uint32_t row_bytes) {
  if (o.shard_dirs.size() != 1) return absl::InvalidArgumentError("raw gRPC: one shard only");
  ASSIGN_OR_RETURN(std::unique_ptr<Deployment> deployment, StartShards(o));
  return std::unique_ptr<BenchSystem>(new RawGrpcSystem(o.name, std::move(deployment), row_bytes));
}

absl::StatusOr<std::unique_ptr<BenchSystem>> StartRedis(const RedisServerOptions& server_options,
                                                        const RowArray& rows,
                                                        const std::vector<uint64_t>& layer_rows,
                                                        size_t mget_keys) {
  ASSIGN_OR_RETURN(std::unique_ptr<RedisServer> server, RedisServer::Start(server_options));
  ASSIGN_OR_RETURN(std::unique_ptr<RedisRowClient> loader, RedisRowClient::Connect(server->port()));
  for (size_t l = 0; l < layer_rows.size(); ++l) {
    if (absl::Status s =
            loader->LoadLayer(static_cast<uint32_t>(l), rows.row(static_cast<uint32_t>(l), 0),
                              layer_rows[l], rows.row_bytes());
        !s.ok()) {
      return s;
    }
  }
  return std::unique_ptr<BenchSystem>(
      new RedisSystem(std::move(server), rows.row_bytes(), mget_keys));
}

absl::StatusOr<std::unique_ptr<BenchSystem>> StartTcp(const RowArray& rows,
                                                      const std::vector<uint64_t>& layer_rows) {
  TcpRowServerOptions o;
  o.rows = rows.data();
  o.row_bytes = rows.row_bytes();
  o.layer_base.assign(rows.layer_base().begin(), rows.layer_base().end());
  o.layer_rows = layer_rows;
  return std::unique_ptr<BenchSystem>(new TcpSystem(std::move(o)));
}

}  // namespace engram::bench
