#include "shard/read_queue.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace engram {

bool ReadQueue::Later(const std::shared_ptr<Job>& a, const std::shared_ptr<Job>& b) {
  return std::tie(a->need_by, a->seq_) > std::tie(b->need_by, b->seq_);
}

ReadQueue::ReadQueue(const ReadQueueOptions& options)
    : later_depth_(static_cast<size_t>(std::max(1, options.later_depth))) {}

void ReadQueue::Add(std::shared_ptr<Job> job) {
  if (job->chunks == 0) return;
  absl::MutexLock lock(&mu_);
  job->seq_ = next_seq_++;
  job->next_chunk_ = 0;
  n_queued_ += job->chunks;
  const size_t chunks = job->chunks;
  heap_.push_back(std::move(job));
  std::push_heap(heap_.begin(), heap_.end(), Later);
  WakeLocked(chunks);
}

void ReadQueue::WakeLocked(size_t chunks) {
  // One waiting reader per chunk that may start, not every reader.
  for (size_t i = 0; i < std::min(chunks, waiting_) && MayStartLocked(); ++i) ready_.Signal();
}

bool ReadQueue::MayStartLocked() const {
  if (heap_.empty()) return false;
  if (stopping_ || in_flight_.empty()) return true;
  const auto& [earliest, at_earliest] = *in_flight_.begin();
  if (heap_.front()->need_by <= earliest) return true;
  // Only reads of the earliest need-by are outstanding, and they are all
  // being read: a chunk of a later need-by may join them up to the depth.
  return n_in_flight_ - at_earliest < later_depth_;
}

void ReadQueue::PopFrontLocked() {
  // A job whose chunks are all claimed leaves the heap when it reaches the
  // top (ClaimOwn may exhaust one deeper down).
  while (!heap_.empty() && heap_.front()->next_chunk_ >= heap_.front()->chunks) {
    std::pop_heap(heap_.begin(), heap_.end(), Later);
    heap_.pop_back();
  }
}

std::optional<ReadQueue::Claim> ReadQueue::ClaimLocked() {
  if (!MayStartLocked()) return std::nullopt;
  Claim claim{heap_.front(), heap_.front()->next_chunk_++};
  --n_queued_;
  ++in_flight_[claim.job->need_by];
  ++n_in_flight_;
  PopFrontLocked();
  return claim;
}

std::optional<ReadQueue::Claim> ReadQueue::TryNext() {
  absl::MutexLock lock(&mu_);
  return ClaimLocked();
}

std::optional<ReadQueue::Claim> ReadQueue::Next() {
  absl::MutexLock lock(&mu_);
  while (!ReadyLocked()) {
    ++waiting_;
    ready_.Wait(&mu_);
    --waiting_;
  }
  std::optional<Claim> claim = ClaimLocked();  // nullopt: stopping, nothing left
  // Another chunk may start too: pass the wake-up on.
  if (claim.has_value() && waiting_ > 0 && MayStartLocked()) ready_.Signal();
  return claim;
}

std::optional<size_t> ReadQueue::ClaimOwn(Job& job) {
  absl::MutexLock lock(&mu_);
  if (job.next_chunk_ >= job.chunks) return std::nullopt;
  const size_t chunk = job.next_chunk_++;
  --n_queued_;
  PopFrontLocked();
  return chunk;
}

void ReadQueue::Done(const Claim& claim) {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(claim.job->need_by);
  if (it == in_flight_.end()) return;  // not a claim of this queue
  if (--it->second == 0) in_flight_.erase(it);
  --n_in_flight_;
  // A read of later need-bys may start now (the depth freed, or the
  // earliest need-by read).
  if (waiting_ > 0 && MayStartLocked()) ready_.Signal();
}

void ReadQueue::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  ready_.SignalAll();
}

size_t ReadQueue::queued_chunks() const {
  absl::MutexLock lock(&mu_);
  return n_queued_;
}

size_t ReadQueue::in_flight() const {
  absl::MutexLock lock(&mu_);
  return n_in_flight_;
}

}  // namespace engram
