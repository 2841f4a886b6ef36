#include "bench/shard/bench_shard_grpc.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/common/proc_stat.h"
#include "common/util/status_macros.h"

namespace engram::bench {
namespace {

constexpr char kLookupMethod[] = "/engram.v1.EngramStore/Lookup";
constexpr absl::Duration kStartTimeout = absl::Minutes(3);
constexpr absl::Duration kCallTimeout = absl::Seconds(60);

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("Lookup: ", status.error_message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardDaemon>> ShardDaemon::Start(const ShardDaemonOptions& options,
                                                                int n_layers) {
  testing::ShardProcess::Options o;
  o.binary = options.binary;
  o.db_dir = options.db_dir;
  o.flags = {"--ram-budget",     absl::StrCat(options.ram_budget_bytes),
             "--reader-threads", absl::StrCat(options.reader_threads),
             "--drain-timeout",  "2s"};
  // Spelled out both ways: engram-shard's own default is direct I/O.
  o.flags.push_back(options.direct_io ? "--direct-io=true" : "--direct-io=false");
  o.start_timeout = kStartTimeout;
  absl::StatusOr<std::unique_ptr<testing::ShardProcess>> process = testing::ShardProcess::Start(o);
  if (absl::IsNotFound(process.status())) {
    return absl::NotFoundError(
        absl::StrCat(process.status().message(), " (pass --shard-binary PATH)"));
  }
  if (!process.ok()) return process.status();
  return std::unique_ptr<ShardDaemon>(new ShardDaemon(*std::move(process), n_layers));
}

absl::StatusOr<ServerCounters> ShardDaemon::Counters() const {
  absl::StatusOr<std::string> page = testing::HttpGet(process_->metrics_port(), "/metrics");
  if (!page.ok()) return page.status();
  auto value = [&page](const std::string& metric) {
    return testing::MetricValue(*page, metric).value_or(0);
  };
  ServerCounters c;
  for (int l = 0; l < n_layers_; ++l) {
    for (auto [tier, sum] : {std::pair{"pinned", &c.pinned}, std::pair{"cached", &c.cached},
                             std::pair{"disk", &c.disk}}) {
      *sum += value(absl::StrCat("engram_shard_rows_total{layer=\"", l, "\",tier=\"", tier, "\"}"));
    }
  }
  c.file_reads = value("engram_shard_rocksdb_file_reads");
  c.requests = value("engram_shard_request_duration_seconds_count{method=\"Lookup\"}");
  c.handler_seconds = value("engram_shard_request_duration_seconds_sum{method=\"Lookup\"}");
  c.cpu_seconds = ProcessCpuSeconds(process_->pid());
  return c;
}

std::shared_ptr<grpc::Channel> BenchChannel(int port) {
  static std::atomic<int> next_channel{0};
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("engram.bench_channel", next_channel.fetch_add(1));
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

absl::Status ServedTable::Learn(grpc::Channel& channel) {
  if (version != 0) return absl::OkStatus();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
  v1::InfoResponse info;
  const grpc::Status status =
      v1::EngramStore::NewStub(std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {
      }))->Info(&context, v1::InfoRequest(), &info);
  if (!status.ok()) return FromGrpc(status);
  table = info.table();
  version = info.version();
  return absl::OkStatus();
}

RawLookupClient::RawLookupClient(std::shared_ptr<grpc::Channel> channel)
    : channel_(channel), stub_(std::move(channel)) {}

RawLookupClient::~RawLookupClient() {
  cq_.Shutdown();
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) {
  }
}

absl::StatusOr<RowPieces> RawLookupClient::Lookup(std::span<const wire::LayerRowIds> layers,
                                                  size_t rows_bytes) {
  RETURN_IF_ERROR(served_.Learn(*channel_));
  grpc::Slice slice = wire::EncodeLookupRequest(served_.table, served_.version, layers);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub_.PrepareUnaryCall(&context, kLookupMethod, request, &cq_);
  call->StartCall();
  call->Finish(&response, &status, this);
  void* tag = nullptr;
  bool ok = false;
  if (!cq_.Next(&tag, &ok) || tag != this || !ok) {
    return absl::InternalError("Lookup: the completion queue failed");
  }
  if (!status.ok()) return FromGrpc(status);
  RETURN_IF_ERROR(wire::LocateLookupResponseRows(response, rows_bytes, &rows_).status());
  return RowPieces(rows_.spans);
}

absl::StatusOr<RowPieces> ProtoLookupClient::Lookup(std::span<const wire::LayerRowIds> layers,
                                                    size_t rows_bytes) {
  RETURN_IF_ERROR(served_.Learn(*channel_));
  v1::LookupRequest request;
  request.set_table(served_.table);
  request.set_version(served_.version);
  for (const wire::LayerRowIds& layer : layers) {
    v1::LayerRows* rows = request.add_layers();
    rows->set_layer(layer.layer);
    rows->mutable_row_ids()->Add(layer.row_ids.begin(), layer.row_ids.end());
  }
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
  grpc::Status status = stub_->Lookup(&context, request, &response_);
  if (!status.ok()) return FromGrpc(status);
  if (response_.rows().size() != rows_bytes) {
    return absl::InternalError(absl::StrCat("Lookup returned ", response_.rows().size(),
                                            " row bytes, expected ", rows_bytes));
  }
  piece_ = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(response_.rows().data()),
                                    rows_bytes);
  return RowPieces(&piece_, 1);
}

}  // namespace engram::bench
