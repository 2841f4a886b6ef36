// StepState: the buffers and the completion state of one prefetched step.
// Internal to the client library. Reused across steps through the client's
// pool, so a steady stream of steps allocates nothing after warm-up.
#ifndef ENGRAM_CLIENT_STEP_STATE_H_
#define ENGRAM_CLIENT_STEP_STATE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/shard_channels.h"
#include "common/hash/engram_hash.h"
#include "common/util/key_index.h"
#include "proto/wire.h"

namespace engram {

struct StepState {
  // The client's step count when this step was prefetched: every layer of
  // the step starts on the same replica of a shard (replica = number %
  // replicas), so a hung replica delays a step once, not in each layer.
  uint64_t number = 0;
  // One RPC of the step: the rows it asked for, as pieces of its layers'
  // grouped order (one piece per layer, in request order), and its
  // response, held so the rows can be read in place until the step is
  // released. A row that straddles two response slices is copied whole into
  // `straddle` (at most one row per slice boundary).
  struct Chunk {
    struct Piece {
      int layer = 0;
      size_t count = 0;
      size_t row_bytes = 0;
      const uint8_t** dst = nullptr;  // into the layer's fetched_src
    };
    std::vector<Piece> pieces;
    int shard = 0;      // the shard asked
    bool done = false;  // its RPC finished (StepState::mu)
    wire::ResponseRows rows;
    std::vector<uint8_t> straddle;

    // Bytes of all the pieces' rows.
    size_t rows_bytes() const {
      size_t n = 0;
      for (const Piece& p : pieces) n += p.count * p.row_bytes;
      return n;
    }
    // Points each piece's dst[j] at row j's bytes in rows.spans (the rows
    // field, in request order), or at a whole copy in `straddle` for a row
    // split across two spans. REQUIRES: the spans total rows_bytes().
    void MapRows() {
      size_t max_rb = 0;
      for (const Piece& p : pieces) max_rb = std::max(max_rb, p.row_bytes);
      const std::vector<std::span<const uint8_t>>& spans = rows.spans;
      straddle.resize(spans.size() * max_rb);  // never grows while in use below
      uint8_t* next_straddle = straddle.data();
      size_t span = 0, at = 0;  // position in spans
      for (const Piece& piece : pieces) {
        const size_t rb = piece.row_bytes;
        for (size_t j = 0; j < piece.count; ++j) {
          while (at == spans[span].size()) {
            ++span;
            at = 0;
          }
          if (spans[span].size() - at >= rb) {
            piece.dst[j] = spans[span].data() + at;
            at += rb;
            continue;
          }
          piece.dst[j] = next_straddle;
          for (size_t need = rb; need > 0;) {
            if (at == spans[span].size()) {
              ++span;
              at = 0;
            }
            const size_t take = std::min(need, spans[span].size() - at);
            std::memcpy(next_straddle + (rb - need), spans[span].data() + at, take);
            at += take;
            need -= take;
          }
          next_straddle += rb;
        }
      }
    }
    void Clear() {
      pieces.clear();
      rows.slices.clear();  // gives gRPC its buffers back
      rows.spans.clear();
    }
  };

  // Per layer: de-duplicated rows, grouped by shard, and where each of the
  // layer's ids finds its bytes.
  struct Layer {
    std::vector<uint64_t> layer_ids;    // scratch: the layer's ids (b,t,c)
    KeySlotIndex seen;                  // row -> unique index
    std::vector<uint64_t> unique_rows;  // in first-seen order
    std::vector<uint32_t> unique_pos;   // unique index -> grouped slot or local
    std::vector<uint64_t> grouped;      // fetched rows, grouped by shard
    std::vector<uint32_t> id_unique;    // id (b,t,c) -> unique index
    std::vector<const uint8_t*> src;    // id (b,t,c) -> row bytes
    // Grouped slot -> the row's bytes, in place in its RPC's response.
    std::vector<const uint8_t*> fetched_src;
    std::vector<uint32_t> shard_start;  // grouped rows of shard s start here
    bool sent = false;                  // every RPC of the layer is counted
    int pending = 0;                    // RPCs not finished
    absl::Status status;                // first failure
    bool resolved = false;              // src filled
    absl::Time arrived;                 // when pending reached 0
  };

  int64_t batch = 0;
  int64_t tokens = 0;
  uint64_t unique_rows = 0;
  absl::Time prefetched;   // when Prefetch sent the first RPC
  std::vector<RowId> ids;  // [B][T][L][C]
  std::vector<Layer> layers;
  std::vector<std::unique_ptr<ShardRpc>> rpcs;
  // chunks[0, chunks_used) are this step's RPCs'; the rest are kept for
  // reuse. Chunks never move: each RPC's decoder holds a pointer to its own.
  std::vector<std::unique_ptr<Chunk>> chunks;
  size_t chunks_used = 0;
  std::vector<absl::Duration> rpc_latency_by_shard;  // scratch for stats

  // Guards the progress below and each Layer's sent, pending, status and
  // arrived (a nested struct's fields cannot name it in an annotation).
  absl::Mutex mu;
  absl::CondVar cv;                            // signalled whenever pending or not_quiet drops
  int not_quiet ABSL_GUARDED_BY(mu) = 0;       // RPCs that may still call back
  int next_to_send ABSL_GUARDED_BY(mu) = 0;    // layers [0, next_to_send) have been sent
  int deduped ABSL_GUARDED_BY(mu) = 0;         // layers [0, deduped) are ready to send
  bool releasing ABSL_GUARDED_BY(mu) = false;  // the Step is being destroyed: send nothing more
  // Sends the layers that are due (EngramClient::Impl::Advance); set once.
  std::function<void(StepState&, int)> advance;

  // A fresh step's progress: no RPC live, not releasing.
  void ResetProgress(int next, int ready) {
    absl::MutexLock l(&mu);
    not_quiet = 0;
    releasing = false;
    next_to_send = next;
    deduped = ready;
  }
  // Called by an RPC before it goes quiet, so the step is still alive.
  void OnRpcDone(Chunk& chunk, const absl::Status& s) {
    bool layer_done = false;
    {
      absl::MutexLock l(&mu);
      chunk.done = true;
      const absl::Time now = absl::Now();
      for (const Chunk::Piece& piece : chunk.pieces) {
        Layer& ly = layers[piece.layer];
        if (!s.ok() && ly.status.ok()) ly.status = s;
        if (--ly.pending == 0) {
          ly.arrived = now;
          layer_done = true;
        }
      }
      cv.SignalAll();
    }
    if (layer_done) advance(*this, -1);
  }
  // The shards whose RPCs for `layer` (< 0: for any layer) have not
  // finished, as "1, 3", or "none". REQUIRES: mu held.
  std::string PendingShardsLocked(int layer) const {
    std::vector<int> shards;
    for (size_t c = 0; c < chunks_used; ++c) {
      const Chunk& chunk = *chunks[c];
      if (chunk.done) continue;
      for (const Chunk::Piece& piece : chunk.pieces) {
        if (piece.layer == layer || layer < 0) {
          shards.push_back(chunk.shard);
          break;
        }
      }
    }
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    return shards.empty() ? std::string("none") : absl::StrJoin(shards, ", ");
  }
  void OnRpcQuiet() {
    absl::MutexLock l(&mu);
    --not_quiet;
    cv.SignalAll();
  }
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_STEP_STATE_H_
