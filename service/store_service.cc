#include "service/store_service.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/hash/fast_mod.h"
#include "common/util/log.h"
#include "service/grpc_status.h"

namespace engram {
namespace {

// Idle calls kept for reuse, and the largest id array a kept call may hold
// (a call that served a huge request gives its memory back).
constexpr size_t kMaxPooledCalls = 64;
constexpr size_t kMaxPooledIds = size_t{1} << 17;

// A request's gather is split over the GatherPool in shares of at least
// this many rows (smaller ones are not worth a thread hand-off).
constexpr size_t kMinGatherShareRows = 2048;

// The need-by of a request without need_within_us and without a deadline:
// behind every request that needs its rows sooner, ahead of none that
// arrived a second later.
constexpr absl::Duration kDefaultNeedWithin = absl::Seconds(1);

}  // namespace

// One share of a request's gather (GatherPool part).
struct GatherShare {
  std::vector<RowRef> misses;
  std::vector<uint32_t> miss_index;  // LookupBatch's, for one layer range
  std::vector<TierCounts> tiers;     // per layer of the table
};

struct StoreService::Call {
  wire::LookupQuery query;
  std::vector<RowRef> misses;  // rows to read, pointing into `response`
  std::vector<GatherShare> shares;
  std::vector<uint8_t*> range_dst;  // per query.layers entry, into `response`
  std::vector<TierCounts> tiers;    // per layer of the table
  grpc::Slice response;             // the whole serialized LookupResponse
  LookupDone done;                  // answers the call
  absl::Time start;
  absl::Time read_start;
  absl::Time deadline;                  // the caller's; InfiniteFuture when none
  absl::Time need_by;                   // orders its disk reads (NeedBy)
  std::shared_ptr<ServingTable> table;  // the version this call is served from
};

StoreService::StoreService(std::shared_ptr<ServingTable> table, ShardMetrics& metrics,
                           const StoreServiceLimits& limits, const TokenAuth* auth)
    : table_(std::move(table)),
      metrics_(metrics),
      max_rows_per_request_(limits.max_rows_per_request),
      max_inflight_(limits.max_inflight_requests),
      auth_(auth),
      gather_pool_(limits.gather_threads) {}

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
  call->done = nullptr;
  call->table.reset();
  if (call->query.ids.capacity() > kMaxPooledIds) return;
  absl::MutexLock lock(&pool_mutex_);
  if (pool_.size() < kMaxPooledCalls) pool_.push_back(std::move(call));
}

absl::Status StoreService::Validate(const ServingTable& table, const wire::LookupQuery& query) {
  const ShardMap& map = table.map();
  const uint32_t shard_index = table.shard_index();
  if (query.table != map.table) {
    return absl::FailedPreconditionError(
        absl::StrCat("this shard serves table \"", map.table, "\", not \"", query.table, "\"",
                     query.table.empty() ? " (a request must name its table and version)" : ""));
  }
  if (query.version != map.version) {
    return absl::FailedPreconditionError(absl::StrCat("this shard serves version ", map.version,
                                                      " of table \"", map.table, "\", not version ",
                                                      query.version));
  }
  const std::string& source = table.store().shard_info().source_checksum;
  if (!query.source_checksum.empty() && query.source_checksum != source) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this shard's version ", map.version, " of table \"", map.table, "\" has source checksum ",
        source, ", the request's ", query.source_checksum,
        ": the worker's table directory holds other rows; give it the table the shards were "
        "imported from"));
  }
  const size_t n_layers = map.layer_rows.size();
  if (query.max_empty_layer >= static_cast<int64_t>(n_layers)) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", query.max_empty_layer, " does not exist: table \"", map.table,
                     "\" has ", n_layers, " Engram layers (0..", n_layers - 1, ")"));
  }
  const FastModulo shards(map.n_shards);  // a per-id divide costs ~0.1 ms a batch
  for (const wire::LayerRange& range : query.layers) {
    if (range.layer >= n_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", range.layer, " does not exist: table \"", map.table, "\" has ",
                       n_layers, " Engram layers (0..", n_layers - 1, ")"));
    }
    const uint64_t rows = map.layer_rows[range.layer];
    for (size_t i = range.begin; i < range.begin + range.count; ++i) {
      const uint64_t row = query.ids[i];
      if (row >= rows) {
        return absl::InvalidArgumentError(absl::StrCat("row id ", row,
                                                       " is out of range for layer ", range.layer,
                                                       ", which has ", rows, " rows"));
      }
      if (shards.Mod(row) != shard_index) {
        return absl::FailedPreconditionError(absl::StrCat(
            "row id ", row, " of layer ", range.layer, " belongs to shard ", map.ShardOf(row),
            ", not to this shard (", shard_index, " of ", map.n_shards, ")"));
      }
    }
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* StoreService::Lookup(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (auth_ != nullptr && auth_->data_protected()) {
    const absl::Status allowed = auth_->CheckMetadata(context->client_metadata(), Role::kData);
    if (!allowed.ok()) {
      metrics_.RecordRequest(ShardMetrics::Method::kLookup, allowed.code(), absl::ZeroDuration());
      reactor->Finish(ToGrpc(allowed));
      return reactor;
    }
  }
  std::unique_ptr<Call> call = NewCall();
  call->start = absl::Now();
  // No deadline: gRPC's time_point::max(), which is no absl::Time.
  const std::chrono::system_clock::time_point deadline = context->deadline();
  call->deadline = deadline == std::chrono::system_clock::time_point::max()
                       ? absl::InfiniteFuture()
                       : absl::FromChrono(deadline);
  call->done = [reactor, response](const absl::Status& status, grpc::Slice rows) {
    if (status.ok()) {
      grpc::ByteBuffer buffer(&rows, 1);
      response->Swap(&buffer);
    }
    rows = grpc::Slice();  // the response holds its own reference
    // Last: once finished, gRPC may free the context and the response.
    reactor->Finish(ToGrpc(status));
  };
  const absl::Status parsed =
      wire::ParseLookupRequest(*request, max_rows_per_request_, &call->query);
  Serve(std::move(call), parsed);
  return reactor;
}

void StoreService::LookupBytes(std::span<const uint8_t> request, LookupDone done,
                               absl::Time deadline) {
  std::unique_ptr<Call> call = NewCall();
  call->start = absl::Now();
  call->deadline = deadline;
  call->done = std::move(done);
  const absl::Status parsed =
      wire::ParseLookupRequest(request, max_rows_per_request_, &call->query);
  Serve(std::move(call), parsed);
}

absl::Time StoreService::NeedBy(absl::Time arrival, uint32_t need_within_us, absl::Time deadline) {
  if (need_within_us != 0) return arrival + absl::Microseconds(need_within_us);
  if (deadline != absl::InfiniteFuture()) return deadline;
  return arrival + kDefaultNeedWithin;
}

void StoreService::Serve(std::unique_ptr<Call> call, absl::Status status) {
  metrics_.inflight().Increment();
  const int inflight = inflight_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    status = absl::ResourceExhaustedError(
        absl::StrCat(status.message(), "; this server's limit is ", max_rows_per_request_,
                     " rows per request (max_rows_per_request): split the "
                     "batch"));
  }
  if (status.ok() && max_inflight_ > 0 && inflight > max_inflight_) {
    status = absl::ResourceExhaustedError(absl::StrCat(
        "this shard has ", max_inflight_,
        " Lookups in flight, its limit (--max-inflight-requests): retry on another replica "
        "or later"));
  }
  call->table = table_.load();
  if (status.ok()) status = Validate(*call->table, call->query);
  if (status.ok() && call->start >= call->deadline) {
    status = absl::DeadlineExceededError("the request's deadline passed before it was served");
  }
  if (!status.ok()) {
    Finish(std::move(call), status);
    return;
  }

  Gather(*call);
  if (call->misses.empty()) {
    Finish(std::move(call), absl::OkStatus());
    return;
  }
  // The reader thread owns the call from here; Finish, which the
  // completion calls, answers it.
  call->read_start = absl::Now();
  call->need_by = NeedBy(call->start, call->query.need_within_us, call->deadline);
  Call* pending = call.release();
  pending->table->store().ReadRowsAsync(
      pending->misses,
      [this, pending](absl::Status read) {
        std::unique_ptr<Call> done(pending);
        metrics_.RecordDiskRead(absl::Now() - done->read_start);
        if (read.ok()) {
          HotTier& tier = done->table->tier();
          for (const RowRef& ref : done->misses) {
            tier.Admit(ref.layer, ref.row, ref.dst);
          }
        } else if (read.code() == absl::StatusCode::kDataLoss) {
          metrics_.RecordDataLoss();
          LogLine('E', absl::StrCat("Lookup failed: ", read.ToString()));
        }
        Finish(std::move(done), read);
      },
      pending->deadline, pending->need_by);
}

void StoreService::Gather(Call& call) {
  const wire::LookupQuery& query = call.query;
  const ShardMap& map = call.table->map();
  size_t rows_bytes = 0, total = 0;
  for (const wire::LayerRange& range : query.layers) {
    rows_bytes += range.count * map.row_bytes[range.layer];
    total += range.count;
  }
  uint8_t* dst = nullptr;
  const size_t size = wire::LookupResponseSize(map.version, rows_bytes);
  if (size >= ResponseBufferPool::kMinBytes) {
    uint8_t* out;
    call.response = responses_.Allocate(size, &out);
    dst = wire::WriteLookupResponseFraming(map.version, rows_bytes, out);
  } else {
    call.response = wire::NewLookupResponse(map.version, rows_bytes, &dst);
  }
  call.range_dst.clear();
  for (const wire::LayerRange& range : query.layers) {
    call.range_dst.push_back(dst);
    dst += range.count * map.row_bytes[range.layer];
  }
  const size_t parts = std::clamp<size_t>(total / kMinGatherShareRows, 1,
                                          1 + static_cast<size_t>(gather_pool_.helpers()));
  if (call.shares.size() < parts) call.shares.resize(parts);
  gather_pool_.Run(static_cast<int>(parts), [&](int part) {
    GatherRange(call, total * part / parts, total * (part + 1) / parts, call.shares[part]);
  });
  call.misses.clear();
  call.tiers.assign(map.layer_rows.size(), TierCounts{});
  for (size_t p = 0; p < parts; ++p) {
    const GatherShare& share = call.shares[p];
    call.misses.insert(call.misses.end(), share.misses.begin(), share.misses.end());
    for (size_t i = 0; i < call.tiers.size(); ++i) {
      call.tiers[i].pinned += share.tiers[i].pinned;
      call.tiers[i].cached += share.tiers[i].cached;
      call.tiers[i].disk += share.tiers[i].disk;
    }
  }
}

// Ids [lo, hi) of the request, counted over its layer ranges in order.
void StoreService::GatherRange(Call& call, size_t lo, size_t hi, GatherShare& share) {
  const wire::LookupQuery& query = call.query;
  const ShardMap& map = call.table->map();
  HotTier& tier = call.table->tier();
  share.misses.clear();
  share.tiers.assign(map.layer_rows.size(), TierCounts{});
  size_t first = 0;  // of the current range, in [0, total)
  for (size_t i = 0; i < query.layers.size(); first += query.layers[i].count, ++i) {
    const wire::LayerRange& range = query.layers[i];
    const size_t from = std::max(lo, first), to = std::min(hi, first + range.count);
    if (from >= to) continue;
    const uint32_t row_bytes = map.row_bytes[range.layer];
    const std::span<const uint64_t> rows(query.ids.data() + range.begin + (from - first),
                                         to - from);
    uint8_t* dst = call.range_dst[i] + (from - first) * row_bytes;
    share.miss_index.clear();
    const HotBatchResult hot = tier.LookupBatch(range.layer, rows, dst, &share.miss_index);
    TierCounts& counts = share.tiers[range.layer];
    counts.pinned += hot.pinned;
    counts.cached += hot.cached;
    counts.disk += share.miss_index.size();
    for (uint32_t k : share.miss_index) {
      share.misses.push_back(RowRef{range.layer, rows[k], dst + size_t{k} * row_bytes});
    }
  }
}

void StoreService::Finish(std::unique_ptr<Call> call, const absl::Status& status) {
  if (status.ok()) {
    const ShardMap& map = call->table->map();
    for (size_t layer = 0; layer < call->tiers.size(); ++layer) {
      const TierCounts& t = call->tiers[layer];
      const uint64_t rows = t.pinned + t.cached + t.disk;
      if (rows == 0) continue;
      metrics_.RecordRows(static_cast<uint32_t>(layer), t, rows * map.row_bytes[layer]);
    }
  }
  metrics_.RecordRequest(ShardMetrics::Method::kLookup, status.code(), absl::Now() - call->start);
  metrics_.inflight().Decrement();
  inflight_.fetch_sub(1, std::memory_order_relaxed);
  const LookupDone done = std::move(call->done);
  grpc::Slice response = std::move(call->response);
  RecycleCall(std::move(call));
  // Last, handing over the response: once answered, a shutting-down server
  // may destroy this service.
  done(status, std::move(response));
}

grpc::ServerUnaryReactor* StoreService::Info(grpc::CallbackServerContext* context,
                                             const v1::InfoRequest* /*request*/,
                                             v1::InfoResponse* response) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (auth_ != nullptr && auth_->data_protected()) {
    const absl::Status allowed = auth_->CheckMetadata(context->client_metadata(), Role::kData);
    if (!allowed.ok()) {
      metrics_.RecordRequest(ShardMetrics::Method::kInfo, allowed.code(), absl::Now() - start);
      reactor->Finish(ToGrpc(allowed));
      return reactor;
    }
  }
  const std::shared_ptr<ServingTable> table = table_.load();
  const ShardMap& map = table->map();
  const uint32_t shard_index = table->shard_index();
  HotTier& tier = table->tier();
  response->set_table(map.table);
  response->set_version(map.version);
  response->set_shard_index(shard_index);
  response->set_n_shards(map.n_shards);
  for (uint64_t rows : map.layer_rows) response->add_layer_rows(rows);
  for (uint32_t bytes : map.row_bytes) response->add_row_bytes(bytes);
  response->set_hot_bytes(tier.pinned_bytes() + tier.cached_bytes());
  response->set_stream_port(static_cast<uint32_t>(stream_port_.load()));
  response->set_source_checksum(table->store().shard_info().source_checksum);
  for (const ShardInfo::Layer& l : table->store().shard_info().layers) {
    response->add_encoding(RowEncodingName(l.encoding));
  }
  metrics_.RecordRequest(ShardMetrics::Method::kInfo, absl::StatusCode::kOk, absl::Now() - start);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace engram
