#include "common/util/huge_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace engram {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

absl::StatusOr<HugePageBuffer> HugePageBuffer::Allocate(size_t bytes) {
  HugePageBuffer b;
  if (bytes == 0) return b;
  const size_t mapped = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // Over-map by one huge page so the buffer can start on a 2 MiB boundary
  // (THP backs only aligned 2 MiB ranges); the slack is unmapped again.
  void* p = mmap(nullptr, mapped + kHugePage, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", bytes, " bytes for rows: ", std::strerror(errno)));
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t end = start + mapped + kHugePage;
  if (end > aligned + mapped) {
    munmap(reinterpret_cast<void*>(aligned + mapped), end - (aligned + mapped));
  }
  // Advice only: without THP the pages are simply 4 KiB.
  madvise(reinterpret_cast<void*>(aligned), mapped, MADV_HUGEPAGE);
  b.data_ = reinterpret_cast<uint8_t*>(aligned);
  b.size_ = bytes;
  b.mapped_ = mapped;
  return b;
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, mapped_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

HugePageBuffer::~HugePageBuffer() {
  if (data_ != nullptr) munmap(data_, mapped_);
}

void ReleaseConsumedPages(void* data, size_t bytes, size_t consumed) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin / page + 1) * page;  // past the block's first page
  const uintptr_t last = (begin + bytes) / page * page;
  const uintptr_t end = std::min(last > page ? last - page : 0,  // before its last page
                                 (begin + std::min(consumed, bytes)) / page * page);
  if (end > first) madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

}  // namespace engram
