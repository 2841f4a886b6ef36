#include "service/response_pool.h"

#include <bit>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace engram {

struct ResponseBufferPool::Buffer {
  std::unique_ptr<uint8_t[]> bytes;
  size_t capacity = 0;
  std::shared_ptr<State> state;  // keeps the free lists alive while in use
};

struct ResponseBufferPool::State {
  explicit State(size_t max_idle) : max_idle_bytes(max_idle) {}
  const size_t max_idle_bytes;
  mutable absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;  // the pool was destroyed
  size_t idle_bytes ABSL_GUARDED_BY(mu) = 0;
  uint64_t allocated ABSL_GUARDED_BY(mu) = 0;
  // free[k]: idle buffers of kMinBytes << k bytes.
  std::vector<std::vector<Buffer*>> free ABSL_GUARDED_BY(mu);
};

ResponseBufferPool::ResponseBufferPool(size_t max_idle_bytes)
    : state_(std::make_shared<State>(max_idle_bytes)) {}

ResponseBufferPool::~ResponseBufferPool() {
  std::vector<Buffer*> idle;
  {
    absl::MutexLock lock(&state_->mu);
    state_->closed = true;
    for (std::vector<Buffer*>& list : state_->free) {
      idle.insert(idle.end(), list.begin(), list.end());
      list.clear();
    }
    state_->idle_bytes = 0;
  }
  for (Buffer* b : idle) delete b;
}

grpc::Slice ResponseBufferPool::Allocate(size_t size, uint8_t** data) {
  const size_t capacity = std::bit_ceil(std::max(size, kMinBytes));
  const size_t k = static_cast<size_t>(std::countr_zero(capacity / kMinBytes));
  Buffer* b = nullptr;
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->free.size() <= k) state_->free.resize(k + 1);
    std::vector<Buffer*>& list = state_->free[k];
    if (!list.empty()) {
      b = list.back();
      list.pop_back();
      state_->idle_bytes -= capacity;
    } else {
      ++state_->allocated;
    }
  }
  if (b == nullptr) {
    b = new Buffer;
    b->bytes.reset(new uint8_t[capacity]);
    b->capacity = capacity;
    b->state = state_;
  }
  *data = b->bytes.get();
  return grpc::Slice(b->bytes.get(), size, &ResponseBufferPool::Release, b);
}

void ResponseBufferPool::Release(void* buffer) {
  Buffer* b = static_cast<Buffer*>(buffer);
  std::shared_ptr<State> state = b->state;
  {
    absl::MutexLock lock(&state->mu);
    if (!state->closed && state->idle_bytes + b->capacity <= state->max_idle_bytes) {
      const size_t k = static_cast<size_t>(std::countr_zero(b->capacity / kMinBytes));
      state->free[k].push_back(b);
      state->idle_bytes += b->capacity;
      return;
    }
  }
  delete b;
}

size_t ResponseBufferPool::idle_bytes() const {
  absl::MutexLock lock(&state_->mu);
  return state_->idle_bytes;
}

uint64_t ResponseBufferPool::buffers_allocated() const {
  absl::MutexLock lock(&state_->mu);
  return state_->allocated;
}

}  // namespace engram
