#include "service/store_service.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/fast_mod.h"
#include "service/log.h"

namespace engram {
namespace {

// Idle calls kept for reuse, and the largest id array a kept call may hold
// (a call that served a huge request gives its memory back).
constexpr size_t kMaxPooledCalls = 64;
constexpr size_t kMaxPooledIds = size_t{1} << 17;

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

}  // namespace

struct StoreService::Call {
  wire::LookupQuery query;
  std::vector<RowRef> misses;     // rows to read, pointing into `response`
  std::vector<uint32_t> miss_index;  // scratch of Gather: a layer's misses
  std::vector<TierCounts> tiers;  // per query.layers entry
  grpc::Slice response;           // the whole serialized LookupResponse
  grpc::ServerUnaryReactor* reactor = nullptr;
  grpc::ByteBuffer* out = nullptr;
  absl::Time start;
  absl::Time read_start;
};

StoreService::StoreService(RowStore& store, HotTier& hot_tier,
                           ShardMetrics& metrics, uint32_t max_rows_per_request)
    : store_(store),
      hot_tier_(hot_tier),
      metrics_(metrics),
      map_(store.shard_map()),
      shard_index_(store.shard_index()),
      max_rows_per_request_(max_rows_per_request) {}

StoreService::~StoreService() = default;

std::unique_ptr<StoreService::Call> StoreService::NewCall() {
  {
    absl::MutexLock lock(&pool_mutex_);
    if (!pool_.empty()) {
      std::unique_ptr<Call> call = std::move(pool_.back());
      pool_.pop_back();
      return call;
    }
  }
  return std::make_unique<Call>();
}

void StoreService::RecycleCall(std::unique_ptr<Call> call) {
  call->response = grpc::Slice();  // the sent ByteBuffer keeps its own ref
  call->reactor = nullptr;
  call->out = nullptr;
  if (call->query.ids.capacity() > kMaxPooledIds) return;
  absl::MutexLock lock(&pool_mutex_);
  if (pool_.size() < kMaxPooledCalls) pool_.push_back(std::move(call));
}

absl::Status StoreService::Validate(const wire::LookupQuery& query) const {
  if (!query.table.empty() && query.table != map_.table) {
    return absl::FailedPreconditionError(
        absl::StrCat("this shard serves table \"", map_.table, "\", not \"",
                     query.table, "\""));
  }
  if (query.version != 0 && query.version != map_.version) {
    return absl::FailedPreconditionError(
        absl::StrCat("this shard serves version ", map_.version, " of table \"",
                     map_.table, "\", not version ", query.version,
                     " (send version 0 to accept any version)"));
  }
  const size_t n_layers = map_.layer_rows.size();
  const FastModulo shards(map_.n_shards);  // a per-id divide costs ~0.1 ms a batch
  for (const wire::LayerRange& range : query.layers) {
    if (range.layer >= n_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", range.layer, " does not exist: table \"", map_.table,
          "\" has ", n_layers, " Engram layers (0..", n_layers - 1, ")"));
    }
    const uint64_t rows = map_.layer_rows[range.layer];
    for (size_t i = range.begin; i < range.begin + range.count; ++i) {
      const uint64_t row = query.ids[i];
      if (row >= rows) {
        return absl::InvalidArgumentError(
            absl::StrCat("row id ", row, " is out of range for layer ",
                         range.layer, ", which has ", rows, " rows"));
      }
      if (shards.Mod(row) != shard_index_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "row id ", row, " of layer ", range.layer, " belongs to shard ",
            map_.ShardOf(row), ", not to this shard (", shard_index_, " of ",
            map_.n_shards, ")"));
      }
    }
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* StoreService::Lookup(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  std::unique_ptr<Call> call = NewCall();
  call->start = absl::Now();
  call->reactor = context->DefaultReactor();
  call->out = response;
  grpc::ServerUnaryReactor* reactor = call->reactor;
  metrics_.inflight().Increment();

  absl::Status status =
      wire::ParseLookupRequest(*request, max_rows_per_request_, &call->query);
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    status = absl::ResourceExhaustedError(absl::StrCat(
        status.message(), "; this server's limit is ", max_rows_per_request_,
        " rows per request (max_rows_per_request): split the "
        "batch"));
  }
  if (status.ok()) status = Validate(call->query);
  if (!status.ok()) {
    Finish(std::move(call), status);
    return reactor;
  }

  Gather(*call);
  if (call->misses.empty()) {
    Finish(std::move(call), absl::OkStatus());
    return reactor;
  }
  // The reader thread owns the call from here; `reactor` stays valid until
  // Finish, which the completion calls.
  call->read_start = absl::Now();
  Call* pending = call.release();
  store_.ReadRowsAsync(pending->misses, [this, pending](absl::Status read) {
    std::unique_ptr<Call> done(pending);
    metrics_.RecordDiskRead(absl::Now() - done->read_start);
    if (read.ok()) {
      for (const RowRef& ref : done->misses) {
        hot_tier_.Admit(ref.layer, ref.row, ref.dst);
      }
    } else if (read.code() == absl::StatusCode::kDataLoss) {
      metrics_.RecordDataLoss();
      LogLine('E', absl::StrCat("Lookup failed: ", read.ToString()));
    }
    Finish(std::move(done), read);
  });
  return reactor;
}

void StoreService::Gather(Call& call) {
  const wire::LookupQuery& query = call.query;
  size_t rows_bytes = 0;
  for (const wire::LayerRange& range : query.layers) {
    rows_bytes += range.count * map_.row_bytes[range.layer];
  }
  uint8_t* dst = nullptr;
  const size_t size = wire::LookupResponseSize(map_.version, rows_bytes);
  if (size >= ResponseBufferPool::kMinBytes) {
    uint8_t* out;
    call.response = responses_.Allocate(size, &out);
    dst = wire::WriteLookupResponseFraming(map_.version, rows_bytes, out);
  } else {
    call.response = wire::NewLookupResponse(map_.version, rows_bytes, &dst);
  }
  call.misses.clear();
  call.tiers.assign(query.layers.size(), TierCounts{});
  for (size_t i = 0; i < query.layers.size(); ++i) {
    const wire::LayerRange& range = query.layers[i];
    const uint32_t row_bytes = map_.row_bytes[range.layer];
    const std::span<const uint64_t> rows(query.ids.data() + range.begin, range.count);
    call.miss_index.clear();
    const HotBatchResult hot =
        hot_tier_.LookupBatch(range.layer, rows, dst, &call.miss_index);
    TierCounts& tiers = call.tiers[i];
    tiers.pinned = hot.pinned;
    tiers.cached = hot.cached;
    tiers.disk = call.miss_index.size();
    for (uint32_t k : call.miss_index) {
      call.misses.push_back(RowRef{range.layer, rows[k], dst + size_t{k} * row_bytes});
    }
    dst += range.count * row_bytes;
  }
}

void StoreService::Finish(std::unique_ptr<Call> call,
                          const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = call->reactor;
  if (status.ok()) {
    const wire::LookupQuery& query = call->query;
    for (size_t i = 0; i < query.layers.size(); ++i) {
      const wire::LayerRange& range = query.layers[i];
      metrics_.RecordRows(range.layer, call->tiers[i],
                          range.count * map_.row_bytes[range.layer]);
    }
    grpc::ByteBuffer buffer(&call->response, 1);
    call->out->Swap(&buffer);
  }
  metrics_.RecordRequest(ShardMetrics::Method::kLookup, status.code(),
                         absl::Now() - call->start);
  metrics_.inflight().Decrement();
  RecycleCall(std::move(call));
  // Last: once finished, gRPC may free the context and the response.
  reactor->Finish(ToGrpc(status));
}

grpc::ServerUnaryReactor* StoreService::Info(
    grpc::CallbackServerContext* context, const v1::InfoRequest* /*request*/,
    v1::InfoResponse* response) {
  const absl::Time start = absl::Now();
  response->set_table(map_.table);
  response->set_version(map_.version);
  response->set_shard_index(shard_index_);
  response->set_n_shards(map_.n_shards);
  for (uint64_t rows : map_.layer_rows) response->add_layer_rows(rows);
  for (uint32_t bytes : map_.row_bytes) response->add_row_bytes(bytes);
  response->set_hot_bytes(hot_tier_.pinned_bytes() + hot_tier_.cached_bytes());
  metrics_.RecordRequest(ShardMetrics::Method::kInfo, absl::StatusCode::kOk,
                         absl::Now() - start);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace engram
