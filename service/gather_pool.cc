#include "service/gather_pool.h"

namespace engram {

struct GatherPool::Batch {
  explicit Batch(absl::FunctionRef<void(int)> f) : fn(f) {}
  absl::FunctionRef<void(int)> fn;
  absl::Mutex mu;
  int outstanding ABSL_GUARDED_BY(mu) = 0;  // parts handed to helpers, not done
};

GatherPool::GatherPool(int helpers) {
  for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { HelperLoop(); });
}

GatherPool::~GatherPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void GatherPool::Run(int parts, absl::FunctionRef<void(int)> fn) {
  Batch batch(fn);
  std::vector<int> mine;  // parts no helper was free for
  {
    absl::MutexLock lock(&mu_);
    for (int part = 1; part < parts; ++part) {
      if (idle_ > static_cast<int>(queue_.size())) {
        queue_.push_back({&batch, part});
        absl::MutexLock b(&batch.mu);
        ++batch.outstanding;
      } else {
        mine.push_back(part);
      }
    }
  }
  if (parts > 0) fn(0);
  for (int part : mine) fn(part);
  absl::MutexLock b(&batch.mu);
  batch.mu.Await(absl::Condition(
      +[](int* outstanding) { return *outstanding == 0; }, &batch.outstanding));
}

void GatherPool::HelperLoop() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      ++idle_;
      mu_.Await(absl::Condition(
          +[](GatherPool* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stopping_ || !p->queue_.empty(); },
          this));
      --idle_;
      if (queue_.empty()) return;  // stopping
      task = queue_.back();
      queue_.pop_back();
    }
    task.batch->fn(task.part);
    absl::MutexLock b(&task.batch->mu);
    --task.batch->outstanding;
  }
}

}  // namespace engram
