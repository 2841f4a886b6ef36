// ReadQueue: which chunk of which queued read a store's reader threads
// start next. RowStore (shard/row_store.h) splits each request's tail rows
// into chunks, one MultiGet each; the queue hands the chunks out
//
// - earliest need-by first, across every request of every caller (in
//   arrival order among equal need-bys), one chunk at a time, so a reader
//   that finishes a chunk of a later request takes an earlier one next;
// - with the disk's queue kept short for the earliest: while any chunk of
//   the earliest need-by (queued or being read) is outstanding, chunks of
//   later need-bys start only while fewer than `later_depth` of them are
//   being read. Reads of a layer needed within one transformer block then
//   meet at most `later_depth` reads of later layers in the device's
//   queue, instead of one per reader thread (docs/architecture.md,
//   "Deadline-first reads").
//
// Thread-safe.
#ifndef ENGRAM_SHARD_READ_QUEUE_H_
#define ENGRAM_SHARD_READ_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace engram {

struct ReadQueueOptions {
  // Chunks of later need-bys that may be read at once while a chunk of the
  // earliest need-by is outstanding. 0 is taken as 1: the disk never idles
  // while work waits.
  int later_depth = 4;
};

class ReadQueue {
 public:
  // One request's place in the queue. REQUIRES: need_by and chunks are set
  // before Add and not changed after; the queue owns the claim state.
  struct Job {
    absl::Time need_by = absl::InfiniteFuture();
    size_t chunks = 0;

   private:
    friend class ReadQueue;
    size_t next_chunk_ = 0;  // guarded by the queue's mutex
    uint64_t seq_ = 0;
  };
  // A chunk a reader may read now; give it back with Done.
  struct Claim {
    std::shared_ptr<Job> job;
    size_t chunk = 0;
  };

  explicit ReadQueue(const ReadQueueOptions& options = {});
  ReadQueue(const ReadQueue&) = delete;
  ReadQueue& operator=(const ReadQueue&) = delete;

  // Queues every chunk of `job`. A job of 0 chunks is ignored.
  void Add(std::shared_ptr<Job> job);
  // Claims the next chunk that may start now, if any (never blocks).
  std::optional<Claim> TryNext();
  // Blocks until a chunk may start and claims it; nullopt once Stop was
  // called and no chunk is left (after Stop the depth limit is lifted, so
  // the readers drain the queue).
  std::optional<Claim> Next();
  // Claims the next chunk of `job` for the caller that owns it, outside
  // the order and the depth limit (a blocking read's own thread works on
  // its request); nullopt when every chunk of it is claimed. The chunk is
  // not counted in flight: do not call Done for it.
  std::optional<size_t> ClaimOwn(Job& job);
  // The claimed chunk was read.
  void Done(const Claim& claim);
  void Stop();

  // Chunks queued (not yet claimed) and being read, for tests and stats.
  size_t queued_chunks() const;
  size_t in_flight() const;

 private:
  // std::push_heap's "less": a later need-by (then a later arrival) is
  // less, so the earliest is on top.
  static bool Later(const std::shared_ptr<Job>& a, const std::shared_ptr<Job>& b);
  bool MayStartLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return MayStartLocked() || (stopping_ && heap_.empty());
  }
  std::optional<Claim> ClaimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes as many waiting readers as chunks may start, up to `chunks`.
  void WakeLocked(size_t chunks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PopFrontLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t later_depth_;
  mutable absl::Mutex mu_;
  // Jobs with unclaimed chunks: a heap by (need_by, seq), earliest on top.
  std::vector<std::shared_ptr<Job>> heap_ ABSL_GUARDED_BY(mu_);
  // Chunks being read, counted by need-by.
  std::map<absl::Time, size_t> in_flight_ ABSL_GUARDED_BY(mu_);
  size_t n_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  size_t n_queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar ready_;                      // a chunk may start, or stopping
  size_t waiting_ ABSL_GUARDED_BY(mu_) = 0;  // readers in Next
};

}  // namespace engram

#endif  // ENGRAM_SHARD_READ_QUEUE_H_
