#include "client/step_engine.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/codec/row_encoding.h"
#include "common/hash/fast_mod.h"
#include "proto/wire.h"

namespace engram {

namespace {

constexpr uint32_t kLocal = 0x80000000u;  // unique_pos flag: local cache row

// A shard's rows are split over its channels only in RPCs of at least this
// many rows (smaller ones cost more in per-call overhead than they gain).
constexpr size_t kMinRowsPerSplit = 1024;

// Engines kept for reuse; more are freed when they come back.
constexpr size_t kMaxFree = 64;

}  // namespace

uint32_t NeedWithinMicros(absl::Time step_start, int64_t block, absl::Duration block_time,
                          absl::Time now) {
  if (block_time <= absl::ZeroDuration()) return 0;
  const absl::Duration left = step_start + block * block_time - now;
  const int64_t us = absl::ToInt64Microseconds(left);  // saturates
  return static_cast<uint32_t>(std::clamp<int64_t>(us, 1, std::numeric_limits<uint32_t>::max()));
}

// ------------------------------------------------------------------ pool

StepPool::StepPool(StepConfig config, ShardChannels* channels)
    : config_(std::move(config)), channels_(channels) {
  absl::MutexLock l(&counters_.mu);
  counters_.shard_latency_sum.assign(static_cast<size_t>(config_.n_shards), 0.0);
  counters_.shard_rpcs.assign(static_cast<size_t>(config_.n_shards), 0);
}

StepPool::~StepPool() = default;

std::unique_ptr<StepEngine> StepPool::Take() {
  {
    absl::MutexLock l(&mu_);
    if (!free_.empty()) {
      std::unique_ptr<StepEngine> e = std::move(free_.back());
      free_.pop_back();
      return e;
    }
  }
  return std::make_unique<StepEngine>(this);
}

void StepPool::Return(std::unique_ptr<StepEngine> engine) {
  engine->Finish();
  absl::MutexLock l(&mu_);
  if (free_.size() < kMaxFree) free_.push_back(std::move(engine));
}

RpcPolicy StepPool::Policy() const {
  RpcPolicy p;
  p.deadline = config_.rpc_deadline;
  p.hedge = config_.hedge;
  if (p.hedge) {
    p.hedge_delay = config_.hedge_delay > absl::ZeroDuration()
                        ? config_.hedge_delay
                        : std::max(latency_.P95(), config_.min_hedge_delay);
  }
  return p;
}

// ----------------------------------------------------------------- calls

absl::Status StepEngine::Call::Decode(const grpc::ByteBuffer& response) {
  return chunk.Decode(response, engine_->config_.version);
}

void StepEngine::Call::Done(const absl::Status& status) { engine_->OnReply(*this, status); }

void StepEngine::Call::Quiet() { engine_->OnQuiet(); }

// ---------------------------------------------------------------- engine

StepEngine::StepEngine(StepPool* pool) : pool_(pool), config_(pool->config()) {
  layers_.resize(static_cast<size_t>(config_.n_layers()));
}

StepEngine::~StepEngine() = default;

void StepEngine::Reset(int next, int ready, const LocalCache* local) {
  local_ = local;
  unique_rows_ = 0;
  for (Layer& ly : layers_) {
    ly.resolved = false;
    ly.sent = false;
    ly.pending = 0;
    ly.status = absl::OkStatus();
  }
  {
    absl::MutexLock l(&mu_);
    not_quiet_ = 0;
    finishing_ = false;
    next_to_send_ = next;
    deduped_ = ready;
  }
  number_ = pool_->counters_.steps.load(std::memory_order_relaxed);
  sent_at_ = absl::Now();
  for (Layer& ly : layers_) ly.arrived = sent_at_;
}

std::span<RowId> StepEngine::BeginStep(int64_t batch, int64_t tokens, absl::Time began) {
  began_ = began;
  batch_ = batch;
  tokens_ = tokens;
  ids_.resize(static_cast<size_t>(batch * tokens) * static_cast<size_t>(config_.n_layers()) *
              static_cast<size_t>(config_.n_cols));
  return std::span<RowId>(ids_);
}

void StepEngine::SendStep() {
  Reset(/*next=*/0, /*ready=*/0, pool_->local_cache_);
  // Layers go out in order, each as soon as it is de-duplicated (the first
  // Engram layer's rows are needed first, and the shards start on them
  // while the later layers are still being de-duplicated here).
  for (int l = 0; l < config_.n_layers(); ++l) {
    Dedup(l);
    unique_rows_ += layers_[l].unique_rows.size();
    {
      absl::MutexLock lock(&mu_);
      deduped_ = l + 1;
    }
    SendDue(0);
  }
  StepCounters& c = pool_->counters_;
  c.steps.fetch_add(1, std::memory_order_relaxed);
  c.ids.fetch_add(ids_.size(), std::memory_order_relaxed);
  c.unique_rows.fetch_add(unique_rows_, std::memory_order_relaxed);
}

void StepEngine::SendLookup(int layer, std::span<const RowId> ids) {
  began_ = absl::Now();
  batch_ = 0;
  tokens_ = 0;
  ids_.clear();
  for (int l = 0; l < config_.n_layers(); ++l) {
    Layer& ly = layers_[l];
    if (l == layer) {
      ly.layer_ids.assign(ids.begin(), ids.end());
      DedupIds(ly);
    } else {  // the index left as it is, so the pooled engine keeps its size
      ly.unique_rows.clear();
      ly.id_unique.clear();
    }
  }
  const int n = config_.n_layers();
  Reset(/*next=*/n, /*ready=*/n, pool_->local_cache_);  // sent right here
  unique_rows_ = layers_[layer].unique_rows.size();
  SendLayers(0, n - 1);
  StepCounters& c = pool_->counters_;
  c.ids.fetch_add(ids.size(), std::memory_order_relaxed);
  c.unique_rows.fetch_add(unique_rows_, std::memory_order_relaxed);
}

void StepEngine::SendRows(const std::vector<std::vector<uint64_t>>& rows) {
  began_ = absl::Now();
  batch_ = 0;
  tokens_ = 0;
  ids_.clear();
  const int n = config_.n_layers();
  Reset(/*next=*/n, /*ready=*/n, /*local=*/nullptr);  // sent right here
  for (int l = 0; l < n; ++l) {
    Layer& ly = layers_[l];
    ly.id_unique.clear();
    ly.unique_rows = rows[l];
    unique_rows_ += rows[l].size();
  }
  SendLayers(0, n - 1);
}

// De-duplicates layer `layer`'s ids of the step. Ids are [B][T][L][C]; the
// layer's ids are visited in [B][T][C] order, which is also the output
// order.
void StepEngine::Dedup(int layer) {
  Layer& ly = layers_[layer];
  const size_t bt = static_cast<size_t>(batch_ * tokens_);
  const size_t C = static_cast<size_t>(config_.n_cols);
  const size_t L = static_cast<size_t>(config_.n_layers());
  // The layer's ids in a row first: the index's probes are cache misses,
  // so each is prefetched a few ids ahead.
  ly.layer_ids.resize(bt * C);
  for (size_t p = 0; p < bt; ++p) {
    std::memcpy(&ly.layer_ids[p * C], &ids_[(p * L + static_cast<size_t>(layer)) * C],
                C * sizeof(RowId));
  }
  DedupIds(ly);
}

void StepEngine::DedupIds(Layer& ly) {
  const size_t n = ly.layer_ids.size();
  ly.seen.Reset(n);
  ly.unique_rows.clear();
  ly.id_unique.resize(n);
  constexpr size_t kAhead = 16;
  for (size_t i = 0; i < std::min(n, kAhead); ++i) ly.seen.Prefetch(ly.layer_ids[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) ly.seen.Prefetch(ly.layer_ids[i + kAhead]);
    const RowId row = ly.layer_ids[i];
    const uint32_t next = static_cast<uint32_t>(ly.unique_rows.size());
    const uint32_t u = ly.seen.FindOrInsert(row, next);
    if (u == next) ly.unique_rows.push_back(row);
    ly.id_unique[i] = u;
  }
}

void StepEngine::GroupLayer(int layer) {
  Layer& ly = layers_[layer];
  const int n_shards = config_.n_shards;
  const size_t u = ly.unique_rows.size();
  // Count rows per shard (local-cache rows are not fetched).
  std::vector<uint32_t>& start = ly.shard_start;
  start.assign(static_cast<size_t>(n_shards) + 1, 0);
  ly.unique_pos.resize(u);
  const FastModulo shard_of(static_cast<uint64_t>(n_shards));
  uint64_t local = 0;
  for (size_t k = 0; k < u; ++k) {
    const uint64_t row = ly.unique_rows[k];
    if (local_ != nullptr && local_->Contains(static_cast<uint32_t>(layer), row)) {
      ly.unique_pos[k] = kLocal;
      ++local;
      continue;
    }
    ly.unique_pos[k] = 0;
    ++start[shard_of.Mod(row) + 1];
  }
  for (int s = 0; s < n_shards; ++s) start[s + 1] += start[s];
  const size_t fetched = start[n_shards];
  ly.grouped.resize(fetched);
  ly.fetched_src.resize(fetched);
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  for (size_t k = 0; k < u; ++k) {
    if (ly.unique_pos[k] == kLocal) continue;
    const uint64_t row = ly.unique_rows[k];
    const uint32_t pos = fill[shard_of.Mod(row)]++;
    ly.grouped[pos] = row;
    ly.unique_pos[k] = pos;
  }
  pool_->counters_.local_hits.fetch_add(local, std::memory_order_relaxed);
  pool_->counters_.rows_fetched.fetch_add(fetched, std::memory_order_relaxed);
}

void StepEngine::SendLayers(int first, int last) {
  for (int l = first; l <= last; ++l) GroupLayer(l);
  // Per shard, one RPC for the rows of all these layers, cut into several
  // when over max_rows_per_rpc.
  const RpcPolicy policy = pool_->Policy();
  ShardChannels* const channels = pool_->channels_;
  std::vector<ShardRpc*> to_start;
  std::vector<wire::LayerRowIds> request;
  const absl::Time now = absl::Now();
  {
    absl::MutexLock l(&mu_);
    for (int s = 0; s < config_.n_shards; ++s) {
      int layer = first;
      size_t at = layers_[first].shard_start[s];
      // With several channels per replica a shard's rows go out as that many
      // RPCs (round-robin over the channels), so every connection carries
      // a share of the step; never below kMinRowsPerSplit rows each.
      size_t shard_rows = 0;
      for (int k = first; k <= last; ++k) {
        shard_rows += layers_[k].shard_start[s + 1] - layers_[k].shard_start[s];
      }
      const size_t per_replica = static_cast<size_t>(std::max(1, config_.channels_per_replica));
      const size_t limit = std::min<size_t>(
          config_.max_rows_per_rpc,
          std::max(kMinRowsPerSplit, (shard_rows + per_replica - 1) / per_replica));
      while (true) {
        // The next call: pieces of consecutive layers, up to the limit.
        if (calls_used_ == calls_.size()) calls_.push_back(std::make_unique<Call>(this));
        Call* call = calls_[calls_used_].get();
        ReplyChunk& chunk = call->chunk;
        chunk.pieces.clear();
        call->shard = s;
        call->done = false;
        request.clear();
        size_t rows = 0;
        // The request's need-by: its earliest layer's block.
        int64_t block = std::numeric_limits<int64_t>::max();
        while (layer <= last && rows < limit) {
          Layer& ly = layers_[layer];
          const size_t end = ly.shard_start[s + 1];
          if (at < end) {
            const size_t n = std::min<size_t>(end - at, limit - rows);
            ReplyChunk::Piece piece;
            piece.layer = layer;
            piece.count = n;
            piece.row_bytes = static_cast<size_t>(config_.layers[layer].row_bytes);
            piece.dst = ly.fetched_src.data() + at;
            chunk.pieces.push_back(piece);
            request.push_back({static_cast<uint32_t>(layer),
                               std::span<const uint64_t>(ly.grouped.data() + at, n)});
            block = std::min(block, config_.layers[layer].layer_id);
            rows += n;
            at += n;
          }
          if (at == end && ++layer <= last) at = layers_[layer].shard_start[s];
        }
        if (chunk.pieces.empty()) break;
        ++calls_used_;
        for (const ReplyChunk::Piece& piece : chunk.pieces) ++layers_[piece.layer].pending;
        grpc::Slice slice = wire::EncodeLookupRequest(
            config_.table, config_.version, request, config_.source_checksum,
            NeedWithinMicros(began_, block, config_.block_time, now));
        const size_t response_bytes = wire::LookupResponseSize(config_.version, chunk.rows_bytes());
        auto rpc = std::make_unique<ShardRpc>(channels, &pool_->rpc_counters_, &pool_->latency_, s,
                                              std::move(slice), response_bytes, call);
        ++not_quiet_;
        to_start.push_back(rpc.get());
        rpcs_.push_back(std::move(rpc));
      }
    }
    // From here a waiter may trust `pending`: every RPC that will deliver
    // these layers' rows is counted.
    for (int k = first; k <= last; ++k) layers_[k].sent = true;
    cv_.SignalAll();
  }
  // Spread first attempts over replicas, so replicas share the load.
  for (ShardRpc* rpc : to_start) {
    const int replicas = channels->n_replicas(rpc->shard());
    rpc->Start(policy, static_cast<int>(number_ % static_cast<uint64_t>(replicas)));
  }
}

void StepEngine::SendDue(int wanted) {
  while (true) {
    int layer;
    {
      absl::MutexLock l(&mu_);
      if (finishing_ || next_to_send_ >= deduped_) return;
      if (config_.pipeline_layers) {
        const bool previous_in = next_to_send_ == 0 || LayerInLocked(next_to_send_ - 1);
        if (next_to_send_ > wanted && !previous_in) return;
      }
      layer = next_to_send_++;  // claimed: no other thread sends it
    }
    SendLayers(layer, layer);
  }
}

// Runs before the RPC goes quiet, so the step is still alive.
void StepEngine::OnReply(Call& call, const absl::Status& status) {
  bool layer_done = false;
  {
    absl::MutexLock l(&mu_);
    call.done = true;
    const absl::Time now = absl::Now();
    for (const ReplyChunk::Piece& piece : call.chunk.pieces) {
      Layer& ly = layers_[piece.layer];
      if (!status.ok() && ly.status.ok()) ly.status = status;
      if (--ly.pending == 0) {
        ly.arrived = now;
        layer_done = true;
      }
    }
    cv_.SignalAll();
  }
  if (layer_done) SendDue(-1);
}

void StepEngine::OnQuiet() {
  absl::MutexLock l(&mu_);
  --not_quiet_;
  cv_.SignalAll();
}

absl::Status StepEngine::WaitLayer(int layer) {
  SendDue(layer);  // a layer nobody has sent yet goes out now
  const absl::Duration budget = config_.step_deadline;
  const absl::Time due = sent_at_ + budget;  // InfiniteFuture for an infinite budget
  absl::MutexLock l(&mu_);
  // Claimed is not enough: the claiming thread may still be grouping the
  // layer's rows and counting its RPCs.
  while (!LayerInLocked(layer)) {
    if (cv_.WaitWithDeadline(&mu_, due) && !LayerInLocked(layer)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "Engram layer ", layer, ": no rows from shard(s) ",
          PendingShardsLocked(layers_[layer].sent ? layer : -1), " within the step deadline of ",
          absl::FormatDuration(budget), " since Prefetch (ClientOptions::step_deadline)"));
    }
  }
  return layers_[layer].status;
}

bool StepEngine::Arrived(int layer) {
  absl::MutexLock l(&mu_);
  if (LayerInLocked(layer)) return true;
  return absl::Now() >= sent_at_ + config_.step_deadline;
}

absl::Duration StepEngine::ArrivalTime(int layer) {
  absl::MutexLock l(&mu_);
  return layers_[layer].arrived - sent_at_;
}

std::string StepEngine::PendingShardsLocked(int layer) const {
  std::vector<int> shards;
  for (size_t c = 0; c < calls_used_; ++c) {
    const Call& call = *calls_[c];
    if (call.done) continue;
    for (const ReplyChunk::Piece& piece : call.chunk.pieces) {
      if (piece.layer == layer || layer < 0) {
        shards.push_back(call.shard);
        break;
      }
    }
  }
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  return shards.empty() ? std::string("none") : absl::StrJoin(shards, ", ");
}

void StepEngine::Resolve(int layer) {
  Layer& ly = layers_[layer];
  ly.src.resize(ly.id_unique.size());
  for (size_t i = 0; i < ly.id_unique.size(); ++i) {
    const uint32_t k = ly.id_unique[i];
    const uint32_t pos = ly.unique_pos[k];
    ly.src[i] = pos == kLocal ? local_->Find(static_cast<uint32_t>(layer), ly.unique_rows[k])
                              : ly.fetched_src[pos];
  }
  ly.resolved = true;
}

absl::Status StepEngine::CopyOut(int layer, RowFormat format, std::span<uint8_t> out) {
  Layer& ly = layers_[layer];
  const LayerInfo& info = config_.layers[layer];
  const size_t n = ly.id_unique.size();
  const size_t orb = FormatRowBytes(info, format);
  if (out.size() != n * orb) {
    return absl::InvalidArgumentError(absl::StrCat("output buffer has ", out.size(),
                                                   " bytes; layer ", layer, " needs ", n,
                                                   " rows of ", orb, " bytes"));
  }
  if (!ly.resolved) Resolve(layer);
  uint8_t* o = out.data();
  switch (format) {
    case RowFormat::kRaw:
      for (size_t i = 0; i < n; ++i, o += orb) std::memcpy(o, ly.src[i], orb);
      break;
    case RowFormat::kF32:
      for (size_t i = 0; i < n; ++i, o += orb) {
        DecodeRows(info.encoding, ly.src[i], 1, info.head_dim, info.scale_block,
                   reinterpret_cast<float*>(o));
      }
      break;
    case RowFormat::kBf16:
      for (size_t i = 0; i < n; ++i, o += orb) {
        DecodeRows(info.encoding, ly.src[i], 1, info.head_dim, info.scale_block,
                   reinterpret_cast<uint16_t*>(o));
      }
      break;
  }
  return absl::OkStatus();
}

std::vector<const uint8_t*> StepEngine::UniqueRowSources(int layer) const {
  const Layer& ly = layers_[layer];
  std::vector<const uint8_t*> out(ly.unique_rows.size());
  for (size_t k = 0; k < out.size(); ++k) {
    const uint32_t pos = ly.unique_pos[k];
    out[k] = pos == kLocal ? local_->Find(static_cast<uint32_t>(layer), ly.unique_rows[k])
                           : ly.fetched_src[pos];
  }
  return out;
}

int StepEngine::ShardOfUnique(int layer, size_t k) const {
  const Layer& ly = layers_[layer];
  const uint32_t pos = ly.unique_pos[k];
  if (pos == kLocal) return kLocalShard;
  // shard_start is ascending: the last shard starting at or before pos.
  const auto it = std::upper_bound(ly.shard_start.begin(), ly.shard_start.end(), pos);
  return static_cast<int>(it - ly.shard_start.begin()) - 1;
}

void StepEngine::Finish() {
  std::vector<ShardRpc*> live;
  {
    absl::MutexLock l(&mu_);
    finishing_ = true;  // no layer is sent from here on
    if (not_quiet_ > 0) {
      for (auto& rpc : rpcs_) live.push_back(rpc.get());
    }
  }
  if (!live.empty()) {
    for (ShardRpc* rpc : live) rpc->Cancel();
    absl::MutexLock l(&mu_);
    while (not_quiet_ > 0) cv_.Wait(&mu_);
  }
  {
    StepCounters& c = pool_->counters_;
    absl::MutexLock l(&c.mu);
    for (auto& rpc : rpcs_) {
      if (rpc->latency() > absl::ZeroDuration()) {
        c.shard_latency_sum[rpc->shard()] += absl::ToDoubleSeconds(rpc->latency());
        ++c.shard_rpcs[rpc->shard()];
      }
    }
  }
  rpcs_.clear();
  for (size_t i = 0; i < calls_used_; ++i) calls_[i]->chunk.Clear();
  calls_used_ = 0;
}

}  // namespace engram
