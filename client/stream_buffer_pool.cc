#include "client/stream_buffer_pool.h"

#include <algorithm>
#include <memory>

#include "absl/synchronization/mutex.h"

namespace engram {

struct StreamBufferPool::Buffer {
  std::unique_ptr<uint8_t[]> data;
  size_t capacity = 0;
  StreamBufferPool* pool = nullptr;
};

StreamBufferPool::~StreamBufferPool() {
  for (Buffer* b : free_) delete b;
}

StreamBufferPool::Buffer* StreamBufferPool::Get(size_t bytes) {
  {
    absl::MutexLock l(&mu_);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i]->capacity >= bytes) {
        Buffer* b = free_[i];
        free_[i] = free_.back();
        free_.pop_back();
        return b;
      }
    }
  }
  auto* b = new Buffer;
  b->capacity = std::max<size_t>(bytes, 4096);
  b->data.reset(new uint8_t[b->capacity]);
  b->pool = this;
  return b;
}

uint8_t* StreamBufferPool::Data(Buffer* b) { return b->data.get(); }

grpc::Slice StreamBufferPool::ToSlice(Buffer* b, size_t bytes) {
  return grpc::Slice(
      b->data.get(), bytes,
      [](void* user) {
        auto* buf = static_cast<Buffer*>(user);
        buf->pool->Put(buf);
      },
      b);
}

void StreamBufferPool::Put(Buffer* b) {
  {
    absl::MutexLock l(&mu_);
    if (free_.size() < kMaxFree) {
      free_.push_back(b);
      return;
    }
  }
  delete b;
}

}  // namespace engram
