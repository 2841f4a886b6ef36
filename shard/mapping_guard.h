// MappingGuard: a read-only file mapping whose lost pages read as zeros
// instead of killing the process.
//
// Reading a mapped file page that the file no longer has (the file was
// truncated) or that the device cannot return (a media error) raises
// SIGBUS, which by default kills the process: a shard server would crash,
// or crash-loop while loading its hot tier. While a range is registered
// here, a SIGBUS on an address inside it is handled instead: the faulting
// page is replaced by a read-only page of zeros (mmap MAP_FIXED, anonymous)
// and the access is retried. The shard's checksums then catch the damage:
// RocksDB's block checksums, a cuckoo row's RowChecksum, so the row reads
// as DATA_LOSS, never as wrong bytes (a page of zeros passes a 32-bit row
// checksum with probability 2^-32, as any other damage does). The page
// stays zeros for the life of the mapping: a shard whose files lost data is
// repaired by re-importing it, not by reading again.
//
// This costs nothing on the read path (no per-access guard; the handler
// runs only on a fault). A SIGBUS outside every registered range (or an
// alignment fault) goes to the handler that was installed before, or to
// the default action (a core dump at the faulting access).
//
// Thread-safe; the handler is async-signal-safe. REQUIRES: the range is
// unregistered (the guard destroyed) before it is unmapped.
#ifndef ENGRAM_SHARD_MAPPING_GUARD_H_
#define ENGRAM_SHARD_MAPPING_GUARD_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace engram {

class MappingGuard {
 public:
  // Ranges registered at once, process-wide (a shard's SST files are each
  // mapped by RocksDB).
  static constexpr size_t kMaxRanges = 8192;

  // Registers [base, base + size), a read-only mapping of `path` from byte
  // `file_offset` on (both named in Describe). Installs the SIGBUS handler
  // on first use. ResourceExhausted when kMaxRanges ranges are registered
  // already.
  static absl::StatusOr<std::unique_ptr<MappingGuard>> Register(const void* base, size_t size,
                                                                std::string path,
                                                                uint64_t file_offset = 0);
  ~MappingGuard();
  MappingGuard(const MappingGuard&) = delete;
  MappingGuard& operator=(const MappingGuard&) = delete;

  // Pages of the range that faulted and now read as zeros.
  uint64_t zeroed_pages() const;
  // "" when no page faulted; else e.g. "2 pages of /d/000012.sst from byte
  // 8192 on could not be read (the file was truncated or the device
  // failed) and read as zeros".
  std::string Describe() const;

 private:
  MappingGuard(size_t slot, std::string path, uint64_t file_offset)
      : slot_(slot), path_(std::move(path)), file_offset_(file_offset) {}
  size_t slot_;
  std::string path_;
  uint64_t file_offset_;
};

// The file mappings of this process whose path lies under directory `dir`
// (made canonical first), as /proc/self/maps lists them, by start.
struct FileMapping {
  uintptr_t start = 0, end = 0;
  uint64_t offset = 0;  // of `start` in the file
  std::string path;
};
std::vector<FileMapping> FileMappingsIn(const std::string& dir);

// Registers every mapping FileMappingsIn(dir) lists that `before` (an
// earlier FileMappingsIn(dir)) does not: the mappings RocksDB made of a
// DB's table files while opening it with allow_mmap_reads. (A store of the
// same directory opened meanwhile by another thread may have its mappings
// guarded twice; a stale range only ever turns a SIGBUS into zeros.)
absl::StatusOr<std::vector<std::unique_ptr<MappingGuard>>> GuardNewMappingsIn(
    const std::string& dir, const std::vector<FileMapping>& before);

// The Describe() of every guard that saw a fault, joined with "; ".
std::string DescribeFaults(const std::vector<std::unique_ptr<MappingGuard>>& guards);

}  // namespace engram

#endif  // ENGRAM_SHARD_MAPPING_GUARD_H_
