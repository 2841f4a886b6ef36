// ResponseBufferPool: recycled memory for large Lookup responses.
//
// A decode-step reply is a few MB. Allocated fresh per request, that much
// memory comes from mmap and the kernel faults in and zeroes every 4 KiB
// page of it again for each reply (in a profile of the hot path,
// clear_page_erms was a fifth of the gather's cost). The pool hands out
// grpc::Slices over buffers it keeps: when gRPC drops the last reference to
// a sent slice the buffer goes back to the pool, already mapped and warm.
//
// Buffers are power-of-two sized from kMinBytes; smaller responses should
// not use the pool (malloc serves them from warm memory anyway). At most
// max_idle_bytes of idle buffers are kept; the rest are freed.
//
// Thread-safe. Slices may outlive the pool (gRPC can hold a reply after the
// service is destroyed): their buffers are then freed instead of recycled.
#ifndef ENGRAM_SERVICE_RESPONSE_POOL_H_
#define ENGRAM_SERVICE_RESPONSE_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "grpcpp/support/slice.h"

namespace engram {

class ResponseBufferPool {
 public:
  static constexpr size_t kMinBytes = size_t{64} << 10;

  explicit ResponseBufferPool(size_t max_idle_bytes = size_t{64} << 20);
  ~ResponseBufferPool();
  ResponseBufferPool(const ResponseBufferPool&) = delete;
  ResponseBufferPool& operator=(const ResponseBufferPool&) = delete;

  // A slice of exactly `size` bytes (contents unspecified); *data receives
  // its writable bytes, valid while any copy of the slice lives.
  grpc::Slice Allocate(size_t size, uint8_t** data);

  // Idle bytes held, and buffers allocated since construction (reuse keeps
  // the latter flat under a steady load).
  size_t idle_bytes() const;
  uint64_t buffers_allocated() const;

 private:
  struct State;
  struct Buffer;
  static void Release(void* buffer);
  std::shared_ptr<State> state_;
};

}  // namespace engram

#endif  // ENGRAM_SERVICE_RESPONSE_POOL_H_
