// GatherPool: helper threads that take shares of one large request's
// hot-tier gather.
//
// A decode step's reply is thousands of rows scattered over a table of
// hundreds of MB; one thread copying them waits on memory, and the copy is
// most of a hot Lookup's handler time. Run() splits such a gather into parts
// and hands parts to helpers that are idle at that moment; a part no helper
// is free for runs on the calling thread, so a busy server never queues a
// request behind another's gather and never runs more gather threads than
// 1 + helpers per request.
//
// Thread-safe. The destructor joins the helpers (no Run may be in progress).
#ifndef ENGRAM_SERVICE_GATHER_POOL_H_
#define ENGRAM_SERVICE_GATHER_POOL_H_

#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace engram {

class GatherPool {
 public:
  // `helpers` threads (0 = every part runs on the caller).
  explicit GatherPool(int helpers);
  ~GatherPool();
  GatherPool(const GatherPool&) = delete;
  GatherPool& operator=(const GatherPool&) = delete;

  int helpers() const { return static_cast<int>(threads_.size()); }

  // Runs fn(part) once for every part in [0, parts), part 0 on the calling
  // thread; returns when all have run.
  void Run(int parts, absl::FunctionRef<void(int)> fn);

 private:
  struct Batch;  // one Run's shared state
  struct Task {
    Batch* batch = nullptr;
    int part = 0;
  };
  void HelperLoop();

  absl::Mutex mu_;
  std::vector<Task> queue_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace engram

#endif  // ENGRAM_SERVICE_GATHER_POOL_H_
