// MappedTail: the rows of a cuckoo tail, read straight from its SST files.
//
// A cuckoo tail is static: once a shard is imported no row moves. RocksDB's
// point-lookup path still costs 1.5-2 us a row when a decode step's misses
// come to it with cold CPU caches, against ~0.1 us for copying the row out
// of the page cache (docs/table-format.md, "Mapped cuckoo tail"). So at open
// one scan of the rows column family learns where in which SST file each
// row's value sits (a RocksDB iterator serves CuckooTable values as slices
// of the table file it maps; each slice is matched to its file through
// /proc/self/maps and checked byte for byte against our own mapping of that
// file). From then on a row is an address lookup, a copy and a check of its
// RowChecksum, on the calling thread.
//
// The files stay RocksDB's: MappedTail maps them read-only (MAP_SHARED, so
// the page cache is shared with RocksDB's own mapping) and never writes.
// Every read verifies the row's RowChecksum, which is seeded with its key,
// so a damaged file or a wrong address shows as DATA_LOSS, never as a wrong
// row. A page the page cache has dropped is read from disk by the fault of
// the reading thread. A file is mapped only when its size is the one
// RocksDB's manifest records, and every mapping is guarded
// (shard/mapping_guard.h): a page the file loses later (truncated, or a
// media error) reads as zeros, which fail their row checksums: DATA_LOSS
// for the rows on it, no SIGBUS, and no cost on the read path.
//
// Immutable after Build; Read may be called from any number of threads.
#ifndef ENGRAM_SHARD_MAPPED_TAIL_H_
#define ENGRAM_SHARD_MAPPED_TAIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/fast_mod.h"
#include "common/shard_map.h"
#include "shard/mapping_guard.h"
#include "shard/row_store.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace engram {

class MappedTail {
 public:
  // Scans column family `rows` of `db` (opened with mmap reads from
  // `db_dir`), which holds shard `shard_index` of `map` as a cuckoo tail;
  // `name` ("shard 1 (/data/shard-1)") starts every error of Read.
  // FailedPrecondition naming the reason when the rows cannot be addressed
  // this way (a value that is not a slice of a mapped .sst file under
  // db_dir, a file whose size is not the manifest's, a wrong-size value, a
  // row missing, repeated or foreign); the caller then reads through
  // RocksDB.
  static absl::StatusOr<std::unique_ptr<MappedTail>> Build(rocksdb::DB& db,
                                                           rocksdb::ColumnFamilyHandle* rows,
                                                           const std::string& db_dir,
                                                           const ShardMap& map,
                                                           uint32_t shard_index, std::string name);
  ~MappedTail();
  MappedTail(const MappedTail&) = delete;
  MappedTail& operator=(const MappedTail&) = delete;

  // Copies each ref's row to its destination. REQUIRES: every ref names a
  // row of this shard in an existing layer (RowStore validates). DATA_LOSS
  // naming the first row whose checksum fails (and any pages that read as
  // zeros); every such row adds 1 to *damaged. The destinations' contents
  // are then unspecified.
  absl::Status Read(std::span<const RowRef> refs, uint64_t* damaged) const;

  uint64_t rows() const { return rows_; }
  // Memory of the address index (8 bytes a row).
  size_t index_bytes() const { return rows_ * sizeof(const char*); }
  // Bytes of SST files mapped.
  uint64_t mapped_bytes() const { return mapped_bytes_; }
  // Pages of the mapped files that could not be read and read as zeros.
  uint64_t zeroed_pages() const;

 private:
  struct Mapping {
    void* base = nullptr;
    size_t size = 0;
    std::unique_ptr<MappingGuard> guard;
  };
  MappedTail(const ShardMap& map, uint32_t shard_index, std::string name);
  static absl::StatusOr<Mapping> MapFile(const std::string& path, uint64_t want_size);
  // MappingGuard::Describe of each mapping that saw a fault, joined.
  std::string DescribeFaults() const;

  FastModulo shards_;
  std::string name_;
  std::vector<uint32_t> row_bytes_;
  // [layer][row / n_shards]: the value (row, then RowChecksum) in a mapping.
  std::vector<std::vector<const char*>> addr_;
  std::vector<Mapping> mappings_;
  uint64_t rows_ = 0;
  uint64_t mapped_bytes_ = 0;
};

}  // namespace engram

#endif  // ENGRAM_SHARD_MAPPED_TAIL_H_
