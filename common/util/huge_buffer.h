// HugePageBuffer: a large zero-filled byte array for rows that are read at
// random (a shard's pinned hot rows, a benchmark's in-RAM table).
//
// Mapped anonymously with transparent huge pages requested
// (madvise(MADV_HUGEPAGE), which this kernel's default "madvise" THP mode
// needs): with 4 KiB pages a random row of a table of hundreds of MB costs a
// TLB miss and page walk on top of its cache misses; with 2 MiB pages the
// walk almost always hits. Where THP is off the buffer simply has normal
// pages. Move-only; unmapped when destroyed. Not synchronised.
#ifndef ENGRAM_COMMON_UTIL_HUGE_BUFFER_H_
#define ENGRAM_COMMON_UTIL_HUGE_BUFFER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace engram {

class HugePageBuffer {
 public:
  // ResourceExhausted (with the size) when the mapping fails. bytes == 0
  // gives an empty buffer (data() == nullptr).
  static absl::StatusOr<HugePageBuffer> Allocate(size_t bytes);

  HugePageBuffer() = default;
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;
  ~HugePageBuffer();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // size_ rounded up to whole huge pages
};

// Hands the whole pages of [data, data + consumed) back to the kernel,
// except the block's first and last page (where an allocator keeps its own
// bookkeeping), so that a large input read front to back and what it is
// turned into (a shard's pinned keys and its arena) are not both resident.
// `bytes` is the block's size. The released bytes read as zero afterwards:
// REQUIRES they are never read again; the block is freed as usual.
void ReleaseConsumedPages(void* data, size_t bytes, size_t consumed);

}  // namespace engram

#endif  // ENGRAM_COMMON_UTIL_HUGE_BUFFER_H_
