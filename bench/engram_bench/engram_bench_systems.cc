// The in-process systems of engram-bench and engram-store itself; the
// peers over a wire (Redis, bare TCP) are in engram_bench_peers.cc.
#include "bench/engram_bench/engram_bench_systems.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/common/bench_client_shards.h"
#include "bench/engram_bench/engram_bench_proc.h"
#include "client/engram_client.h"
#include "common/net/prometheus_scrape.h"
#include "common/testing/test_certs.h"
#include "common/util/status_macros.h"
#include "shard/row_store.h"

namespace engram::bench {

SystemCounters SystemCounters::operator-(const SystemCounters& o) const {
  SystemCounters d = *this;
  d.server_cpu_seconds -= o.server_cpu_seconds;
  d.wire_bytes -= o.wire_bytes;
  d.wire_rows -= o.wire_rows;
  d.disk_rows -= o.disk_rows;
  d.disk_reads -= o.disk_reads;
  d.rpcs -= o.rpcs;
  d.rpc_seconds -= o.rpc_seconds;
  d.lookups -= o.lookups;
  d.handler_seconds -= o.handler_seconds;
  return d;
}

SystemCounters& SystemCounters::operator+=(const SystemCounters& o) {
  server_cpu_seconds += o.server_cpu_seconds;
  wire_bytes += o.wire_bytes;
  wire_rows += o.wire_rows;
  disk_rows += o.disk_rows;
  disk_reads += o.disk_reads;
  rpcs += o.rpcs;
  rpc_seconds += o.rpc_seconds;
  lookups += o.lookups;
  handler_seconds += o.handler_seconds;
  return *this;
}

namespace {

// One worker of the client library: its own sequences (prefilled for a
// decode stream), steps prefetched and waited for back to back, rows
// written raw into one reused buffer.
class EngramFetcher {
 public:
  EngramFetcher(std::shared_ptr<EngramClient> client, const StepStream& stream)
      : client_(std::move(client)),
        stream_(stream),
        starts_(static_cast<size_t>(stream.spec().batch)),
        out_(stream.ids_per_step() * static_cast<size_t>(client_->row_bytes(0))),
        layer_bytes_(stream.ids_per_layer() * static_cast<size_t>(client_->row_bytes(0))) {
    for (int b = 0; b < stream.spec().batch; ++b) {
      sequences_.push_back(client_->NewSequence());
      pointers_.push_back(sequences_.back().get());
    }
  }

  // A decode stream's prefill: every sequence's first tokens, fetched and
  // dropped, so step 0 can follow.
  absl::Status Prefill() {
    if (!stream_.decode()) return absl::OkStatus();
    std::fill(starts_.begin(), starts_.end(), 0);
    StepInput in;
    in.sequences = pointers_;
    in.start_positions = starts_;
    in.tokens_per_sequence = stream_.spec().prefill;
    in.token_ids = stream_.prefill_tokens();
    ASSIGN_OR_RETURN(Step step, client_->Prefetch(in));
    for (int l = 0; l < client_->n_layers(); ++l) {
      RETURN_IF_ERROR(step.WaitArrived(l));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<RowPieces> Fetch(size_t step_index) {
    std::fill(starts_.begin(), starts_.end(), stream_.start_position(step_index));
    StepInput in;
    in.sequences = pointers_;
    in.start_positions = starts_;
    in.tokens_per_sequence = stream_.spec().tokens;
    in.token_ids = stream_.tokens(step_index);
    ASSIGN_OR_RETURN(Step step, client_->Prefetch(in));
    for (int l = 0; l < client_->n_layers(); ++l) {
      std::span<uint8_t> dst(out_.data() + static_cast<size_t>(l) * layer_bytes_, layer_bytes_);
      RETURN_IF_ERROR(step.Wait(l, RowFormat::kRaw, dst));
    }
    piece_ = std::span<const uint8_t>(out_);
    return RowPieces(&piece_, 1);
  }

 private:
  std::shared_ptr<EngramClient> client_;
  std::span<const uint8_t> piece_;
  const StepStream& stream_;
  std::vector<std::unique_ptr<Sequence>> sequences_;
  std::vector<Sequence*> pointers_;
  std::vector<int64_t> starts_;
  std::vector<uint8_t> out_;
  size_t layer_bytes_;
};

class EngramSystem : public BenchSystem {
 public:
  EngramSystem(const EngramSystemOptions& o, std::unique_ptr<Deployment> deployment)
      : BenchSystem(o.name), options_(o), deployment_(std::move(deployment)) {
    for (const std::string& a : deployment_->addresses()) ports_.push_back(PortOf(a));
    for (int port : deployment_->stream_ports()) ports_.push_back(port);
  }

  bool networked() const override { return true; }

  absl::StatusOr<FetchStep> NewFetcher(const StepStream& stream, int connections) override {
    ASSIGN_OR_RETURN(std::shared_ptr<EngramClient> client, ClientFor(connections));
    auto fetcher = std::make_shared<EngramFetcher>(std::move(client), stream);
    RETURN_IF_ERROR(fetcher->Prefill());
    return FetchStep([fetcher](size_t step) { return fetcher->Fetch(step); });
  }

  absl::StatusOr<SystemCounters> Counters() const override {
    SystemCounters c;
    c.server_cpu_seconds = deployment_->cpu_seconds();
    c.wire_bytes = LoopbackSocketBytes(ports_);
    for (const auto& [connections, client] : clients_) {
      const ClientStats stats = client->stats();
      c.wire_rows += static_cast<double>(stats.rows_fetched);
      c.rpcs += static_cast<double>(stats.rpcs);
      for (double seconds : stats.shard_latency_sum_seconds) c.rpc_seconds += seconds;
    }
    const std::map<std::string, std::string> lookup = {{"method", "Lookup"}};
    for (int port : deployment_->metrics_ports()) {
      ASSIGN_OR_RETURN(scrape::HttpResponse page, scrape::HttpGet(port, "/metrics"));
      const std::vector<scrape::Sample> samples = scrape::ParseSamples(page.body);
      c.disk_rows += scrape::SumSamples(samples, "engram_shard_rows_total", {{"tier", "disk"}});
      c.disk_reads += scrape::SumSamples(samples, "engram_shard_rocksdb_file_reads");
      c.lookups +=
          scrape::SumSamples(samples, "engram_shard_request_duration_seconds_count", lookup);
      c.handler_seconds +=
          scrape::SumSamples(samples, "engram_shard_request_duration_seconds_sum", lookup);
    }
    return c;
  }

 private:
  absl::StatusOr<std::shared_ptr<EngramClient>> ClientFor(int connections) {
    auto it = clients_.find(connections);
    if (it != clients_.end()) return it->second;
    ClientOptions co;
    co.table_dir = options_.table_dir;
    co.shard_map_path = deployment_->shard_map_path();
    for (const std::string& a : deployment_->addresses()) co.shard_addresses.push_back({a});
    co.channels_per_replica = connections;
    co.rpc_deadline = absl::Seconds(60);  // a step off disk may take a while
    co.step_deadline = absl::Seconds(120);
    // A closed loop wants every layer at once, as the peers fetch them: no
    // waiting for layer l's rows before layer l + 1 is asked for.
    co.pipeline_layers = options_.pipeline_layers;
    if (!options_.tls_dir.empty()) {
      co.tls_ca_file = options_.tls_dir + "/ca.crt";  // MakeTestCerts' CA
      co.tls_server_name = "localhost";
    }
    ASSIGN_OR_RETURN(std::unique_ptr<EngramClient> client, EngramClient::Create(co));
    std::shared_ptr<EngramClient> shared = std::move(client);
    clients_[connections] = shared;
    return shared;
  }

  const EngramSystemOptions options_;
  std::unique_ptr<Deployment> deployment_;
  std::vector<int> ports_;  // the shards' gRPC and row stream ports
  std::map<int, std::shared_ptr<EngramClient>> clients_;
};

class RocksDbSystem : public BenchSystem {
 public:
  RocksDbSystem(const std::string& name, std::unique_ptr<RowStore> store)
      : BenchSystem(name), store_(std::move(store)) {}

  bool networked() const override { return false; }

  absl::StatusOr<FetchStep> NewFetcher(const StepStream& stream, int connections) override {
    if (connections != 1) return absl::InvalidArgumentError("rocksdb runs in process");
    const uint32_t rb = store_->shard_map().row_bytes.at(0);
    struct State {
      std::vector<RowRef> refs;
      std::vector<const uint8_t*> layer_rows;
      std::vector<uint8_t> unique_rows;
      std::vector<uint8_t> out;
      std::span<const uint8_t> piece;
    };
    auto state = std::make_shared<State>();
    state->unique_rows.resize(stream.ids_per_step() * rb);
    state->out.resize(stream.ids_per_step() * rb);
    RowStore* store = store_.get();
    return FetchStep([state, store, &stream, rb](size_t step) -> absl::StatusOr<RowPieces> {
      state->refs.clear();
      state->layer_rows.clear();
      uint8_t* dst = state->unique_rows.data();
      for (int l = 0; l < stream.n_layers(); ++l) {
        state->layer_rows.push_back(dst);
        for (uint64_t row : stream.unique(step, l)) {
          state->refs.push_back({static_cast<uint32_t>(l), row, dst});
          dst += rb;
        }
      }
      RETURN_IF_ERROR(store->ReadRows(state->refs));
      ScatterRows(stream, step, state->layer_rows, rb, state->out.data());
      state->piece = std::span<const uint8_t>(state->out);
      return RowPieces(&state->piece, 1);
    });
  }

  absl::StatusOr<SystemCounters> Counters() const override { return SystemCounters{}; }

 private:
  std::unique_ptr<RowStore> store_;
};

class MemorySystem : public BenchSystem {
 public:
  explicit MemorySystem(const RowArray& rows) : BenchSystem("memory gather"), rows_(rows) {}

  bool networked() const override { return false; }

  absl::StatusOr<FetchStep> NewFetcher(const StepStream& stream, int connections) override {
    if (connections != 1) return absl::InvalidArgumentError("memory gather runs in process");
    const size_t rb = rows_.row_bytes();
    auto out = std::make_shared<std::vector<uint8_t>>(stream.ids_per_step() * rb);
    auto piece = std::make_shared<std::span<const uint8_t>>(*out);
    const RowArray* rows = &rows_;
    return FetchStep([out, piece, rows, &stream, rb](size_t step) -> absl::StatusOr<RowPieces> {
      const size_t L = static_cast<size_t>(stream.n_layers());
      const size_t C = static_cast<size_t>(stream.n_cols());
      const size_t positions = stream.ids_per_layer() / C;
      std::span<const RowId> ids = stream.ids(step);
      uint8_t* dst = out->data();
      for (size_t l = 0; l < L; ++l) {
        for (size_t p = 0; p < positions; ++p) {
          for (size_t c = 0; c < C; ++c, dst += rb) {
            std::memcpy(dst, rows->row(static_cast<uint32_t>(l), ids[(p * L + l) * C + c]), rb);
          }
        }
      }
      return RowPieces(piece.get(), 1);
    });
  }

  absl::StatusOr<SystemCounters> Counters() const override { return SystemCounters{}; }

 private:
  const RowArray& rows_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Deployment>> StartShards(const EngramSystemOptions& o) {
  Deployment::Options d;
  d.binary = o.shard_binary;
  d.shard_dirs = o.shard_dirs;
  d.hot_share = o.hot_share;
  d.direct_io = o.direct_io;
  d.log_dir = o.log_dir;
  if (!o.tls_dir.empty()) {
    std::error_code ignored;
    std::filesystem::create_directories(o.tls_dir, ignored);
    ASSIGN_OR_RETURN(testing::TestCerts certs, testing::MakeTestCerts(o.tls_dir));
    d.extra_flags = {"--tls-cert", certs.server_cert, "--tls-key", certs.server_key};
  }
  return Deployment::Start(d);
}

absl::StatusOr<std::unique_ptr<BenchSystem>> StartEngram(const EngramSystemOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<Deployment> deployment, StartShards(o));
  return std::unique_ptr<BenchSystem>(new EngramSystem(o, std::move(deployment)));
}

absl::StatusOr<std::unique_ptr<BenchSystem>> OpenRocksDb(const std::string& name,
                                                         const std::string& shard_dir,
                                                         bool direct_io) {
  RowStoreOptions options;
  options.direct_io = direct_io;
  ASSIGN_OR_RETURN(std::unique_ptr<RowStore> store, RowStore::Open(shard_dir, options));
  return std::unique_ptr<BenchSystem>(new RocksDbSystem(name, std::move(store)));
}

std::unique_ptr<BenchSystem> NewMemoryGather(const RowArray& rows) {
  return std::make_unique<MemorySystem>(rows);
}

}  // namespace engram::bench
