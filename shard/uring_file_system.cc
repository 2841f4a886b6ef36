#include "shard/uring_file_system.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace engram {
namespace {

// Requests in one submission; a MultiGet batch is at most 32 blocks.
constexpr unsigned kRingEntries = 64;

// One thread's ring. `ok` is false when the kernel refused it: the thread
// then reads through the base file system for good.
struct Ring {
  io_uring ring{};
  bool ok = false;

  Ring() { ok = io_uring_queue_init(kRingEntries, &ring, 0) == 0; }
  ~Ring() {
    if (ok) io_uring_queue_exit(&ring);
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
};

Ring* ThreadRing() {
  thread_local Ring ring;
  return ring.ok ? &ring : nullptr;
}

struct Counts {
  std::atomic<uint64_t> reads{0}, calls{0};
};

class UringRandomAccessFile final : public rocksdb::FSRandomAccessFileOwnerWrapper {
 public:
  UringRandomAccessFile(std::unique_ptr<rocksdb::FSRandomAccessFile> base, int fd, Counts* counts)
      : FSRandomAccessFileOwnerWrapper(std::move(base)), fd_(fd), counts_(counts) {}
  ~UringRandomAccessFile() override { ::close(fd_); }

  rocksdb::IOStatus MultiRead(rocksdb::FSReadRequest* reqs, size_t n,
                              const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override {
    Ring* ring = n > 1 ? ThreadRing() : nullptr;
    if (ring == nullptr) return target()->MultiRead(reqs, n, options, dbg);
    for (size_t done = 0; done < n;) {
      const size_t wave = std::min<size_t>(n - done, kRingEntries);
      if (!ring->ok || !Submit(*ring, reqs + done, wave, options, dbg)) {
        return target()->MultiRead(reqs + done, n - done, options, dbg);
      }
      done += wave;
    }
    counts_->reads.fetch_add(n, std::memory_order_relaxed);
    counts_->calls.fetch_add(1, std::memory_order_relaxed);
    return rocksdb::IOStatus::OK();
  }

 private:
  // Reads reqs[0, n) through the ring and waits for all of them. False when
  // the ring had no room (the caller reads them another way).
  bool Submit(Ring& r, rocksdb::FSReadRequest* reqs, size_t n, const rocksdb::IOOptions& options,
              rocksdb::IODebugContext* dbg) {
    for (size_t i = 0; i < n; ++i) {
      io_uring_sqe* sqe = io_uring_get_sqe(&r.ring);
      if (sqe == nullptr) return false;  // not reached: n <= kRingEntries, the ring empty
      io_uring_prep_read(sqe, fd_, reqs[i].scratch, static_cast<unsigned>(reqs[i].len),
                         reqs[i].offset);
      io_uring_sqe_set_data64(sqe, i);
    }
    // The ring holds nothing between calls, so the n entries are ours; the
    // kernel takes them in order.
    size_t submitted = 0;
    bool failed = false;
    while (submitted < n) {
      const int s = io_uring_submit(&r.ring);
      if (s == -EINTR || s == -EAGAIN || s == -EBUSY) continue;
      if (s <= 0) {
        failed = true;
        break;
      }
      submitted += static_cast<size_t>(s);
    }
    for (size_t reaped = 0; reaped < submitted;) {
      io_uring_cqe* cqe = nullptr;
      // Every submitted read is reaped before its buffer is given back.
      if (io_uring_wait_cqe(&r.ring, &cqe) < 0) continue;
      rocksdb::FSReadRequest& req = reqs[io_uring_cqe_get_data64(cqe)];
      const int res = cqe->res;
      io_uring_cqe_seen(&r.ring, cqe);
      ++reaped;
      if (res < 0) {
        req.status = rocksdb::IOStatus::IOError(std::string("io_uring read: ") + strerror(-res));
        req.result = rocksdb::Slice(req.scratch, 0);
      } else if (static_cast<size_t>(res) < req.len) {
        // Short: at the end of the file, or a partial read; the base file
        // decides which.
        req.status = target()->Read(req.offset, req.len, options, &req.result, req.scratch, dbg);
      } else {
        req.status = rocksdb::IOStatus::OK();
        req.result = rocksdb::Slice(req.scratch, req.len);
      }
    }
    if (failed) {
      // The kernel refused the rest: drop them from a fresh ring, read them
      // with the base file.
      io_uring_queue_exit(&r.ring);
      r.ok = io_uring_queue_init(kRingEntries, &r.ring, 0) == 0;
      for (size_t i = submitted; i < n; ++i) {
        reqs[i].status = target()->Read(reqs[i].offset, reqs[i].len, options, &reqs[i].result,
                                        reqs[i].scratch, dbg);
      }
    }
    return true;
  }

  const int fd_;
  Counts* const counts_;
};

class UringFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit UringFileSystem(std::shared_ptr<rocksdb::FileSystem> base)
      : FileSystemWrapper(std::move(base)) {}

  static const char* kClassName() { return "EngramUringFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewRandomAccessFile(const std::string& fname,
                                        const rocksdb::FileOptions& file_opts,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
                                        rocksdb::IODebugContext* dbg) override {
    std::unique_ptr<rocksdb::FSRandomAccessFile> base;
    rocksdb::IOStatus s = target()->NewRandomAccessFile(fname, file_opts, &base, dbg);
    if (!s.ok()) return s;
    // Mapped files are read in place: nothing to submit.
    if (file_opts.use_mmap_reads) {
      *result = std::move(base);
      return s;
    }
    const int fd =
        ::open(fname.c_str(), O_RDONLY | O_CLOEXEC | (file_opts.use_direct_reads ? O_DIRECT : 0));
    if (fd < 0) {
      *result = std::move(base);  // the base file reads it
      return s;
    }
    *result = std::make_unique<UringRandomAccessFile>(std::move(base), fd, &counts_);
    return s;
  }

  UringReadCounts counts() const {
    return {counts_.reads.load(std::memory_order_relaxed),
            counts_.calls.load(std::memory_order_relaxed)};
  }

 private:
  Counts counts_;
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> NewUringFileSystem(std::shared_ptr<rocksdb::FileSystem> base) {
  return std::make_shared<UringFileSystem>(std::move(base));
}

UringReadCounts UringCounts(const rocksdb::FileSystem& fs) {
  const auto* uring = dynamic_cast<const UringFileSystem*>(&fs);
  return uring == nullptr ? UringReadCounts{} : uring->counts();
}

bool UringAvailable() {
  static const bool available = [] {
    io_uring ring;
    if (io_uring_queue_init(2, &ring, 0) != 0) return false;
    io_uring_queue_exit(&ring);
    return true;
  }();
  return available;
}

}  // namespace engram
