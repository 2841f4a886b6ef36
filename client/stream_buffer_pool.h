// StreamBufferPool: the reply buffers of the row stream connections
// (client/stream_connection.h), reused across replies. Internal to the
// client library.
#ifndef ENGRAM_CLIENT_STREAM_BUFFER_POOL_H_
#define ENGRAM_CLIENT_STREAM_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/slice.h"

namespace engram {

// Response buffers, reused: a buffer handed out as a grpc::Slice comes back
// when the last reference to the slice goes. Thread-safe.
// REQUIRES: every slice is gone before the pool is destroyed.
class StreamBufferPool {
 public:
  StreamBufferPool() = default;
  ~StreamBufferPool();
  StreamBufferPool(const StreamBufferPool&) = delete;
  StreamBufferPool& operator=(const StreamBufferPool&) = delete;

  struct Buffer;
  // A buffer of at least `bytes` bytes (contents unspecified).
  Buffer* Get(size_t bytes);
  static uint8_t* Data(Buffer* b);
  // Hands `b` over to a slice of its first `bytes` bytes.
  static grpc::Slice ToSlice(Buffer* b, size_t bytes);
  // Gives back a buffer that was never made a slice.
  void Put(Buffer* b);

 private:
  static constexpr size_t kMaxFree = 64;
  absl::Mutex mu_;
  std::vector<Buffer*> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_STREAM_BUFFER_POOL_H_
