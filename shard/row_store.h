// RowStore: one shard's rows on disk, in RocksDB, for a read-only
// point-lookup load.
//
// A shard directory (written by `engramctl import`) holds shard_map.json,
// shard.json (which shard this is, per-layer checksums, the tail format)
// and rocksdb/. Keys are 8-byte big-endian (layer << 48 | row_id), values
// the row's stored bytes, in block-based tables or, for a cuckoo tail, in
// CuckooTables with a checksum after each row (TailFormat,
// shard/shard_format.h). See docs/table-format.md for the RocksDB choices.
#ifndef ENGRAM_SHARD_ROW_STORE_H_
#define ENGRAM_SHARD_ROW_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/format/shard_map.h"
#include "shard/shard_format.h"

namespace engram {

struct RowStoreOptions {
  // Read SST files with O_DIRECT so the page cache does not hide the disk.
  // Block tails only: Open refuses it for a cuckoo tail.
  bool direct_io = false;
  // Without direct_io: read SST files through mmap instead of pread (no
  // syscall and no copy per block). Block checksums are verified either
  // way. A cuckoo tail is always read through mmap.
  bool mmap_reads = true;
  // With direct_io: read each MultiGet's data blocks through io_uring, all
  // at once (shard/uring_file_system.h), when the process may set up a
  // ring; otherwise, or when false, one read after another per thread.
  bool uring_reads = true;
  // Threads that issue MultiGets; a request's misses are split over them so
  // the disk sees a deep queue.
  int reader_threads = 32;
  // Keys per MultiGet call, at most, when a request's misses are split.
  // Through io_uring a request is cut into chunks of this many keys; else
  // it is split over the readers first (a small one is read a key per
  // reader).
  int multiget_batch = 16;
  // Reads of later need-bys in flight, at most, while a read of the
  // earliest need-by is queued or in flight (shard/read_queue.h), so the
  // earliest layer's reads meet a short queue in the device.
  int later_read_depth = 4;
  // RocksDB block cache; 0 = none (the hot tier is our cache).
  size_t block_cache_bytes = 0;
};

// One row to read: where to put its bytes (row_bytes of its layer).
struct RowRef {
  uint32_t layer;
  uint64_t row;
  uint8_t* dst;
};

// Thread-safe. ReadRows/ReadRowsAsync may be called concurrently.
class RowStore {
 public:
  // Opens a shard directory read-only. NotFound without shard_map.json or
  // shard.json; FailedPrecondition when a file is malformed or (naming both
  // sides) when they disagree with each other or with the DB's identity
  // record, entry count, or first and last row of a layer, or for direct_io
  // on a cuckoo tail; DataLoss when RocksDB finds a table file damaged or
  // truncated (it checks every file's size and footer at open) or the first
  // or last row of a layer is damaged.
  //
  // With mmap reads (the default; always for a cuckoo tail) every mapping
  // of a table file RocksDB makes is guarded
  // (shard/mapping_guard.h): a page a file loses while the store is open
  // (truncated, a media error) reads as zeros, which fail the block or row
  // checksums, so those rows are DATA_LOSS instead of a SIGBUS.
  static absl::StatusOr<std::unique_ptr<RowStore>> Open(const std::string& shard_dir,
                                                        const RowStoreOptions& options);
  virtual ~RowStore() = default;

  virtual const ShardMap& shard_map() const = 0;
  // shard.json: per-layer row counts and checksums, the tail format.
  virtual const ShardInfo& shard_info() const = 0;
  virtual uint32_t shard_index() const = 0;
  // The directory Open was given.
  virtual const std::string& shard_dir() const = 0;

  // How tail rows are read, for the start-up log: "MultiGet on N reader
  // threads, O_DIRECT" (or ", mmap", ", buffered pread").
  virtual std::string tail_access() const = 0;

  // Reads every ref (callers validate that each row belongs to this shard
  // and its layer exists; a ref that does not is INVALID_ARGUMENT, checked
  // before any read). A missing key, a wrong-size value, a block (or row)
  // checksum mismatch or an I/O error is DATA_LOSS naming the store ("shard
  // I (DIR)") and the first such row, and any pages of table files that
  // read as zeros; each such row counts in Stats' damaged_rows. On error
  // the destinations' contents are unspecified. Refs may repeat and come in
  // any order. Blocks until done; the calling thread reads too.
  virtual absl::Status ReadRows(std::span<const RowRef> refs) = 0;
  // The same for a scan: refs in ascending key order (layer, then row; no
  // repeats), read on the calling thread in one pass with sequential
  // readahead and through no cache, so a walk over the store (the
  // scrubber's, `engramctl verify`) costs a few large reads instead of one
  // read per row. INVALID_ARGUMENT for refs out of order. A damaged or
  // missing row is DATA_LOSS naming it (the rest of the refs are then
  // unspecified; ReadRows tells which rows are intact) and is not counted
  // in Stats' damaged_rows. A cuckoo tail, which has no order to scan, is
  // read as ReadRows reads it.
  virtual absl::Status ScanRows(std::span<const RowRef> refs) = 0;
  // The same as ReadRows, without blocking: `done` runs once, on a reader thread, after
  // every ref is written (inline, before returning, for an empty or invalid
  // request). REQUIRES: destinations outlive the call of `done`; `refs`
  // itself is copied before returning.
  //
  // `deadline`: the request's (its RPC's). Reader threads read nothing for
  // it once the deadline has passed: a request that waited in the queue
  // past it, or whose deadline expires between two MultiGets, finishes with
  // DEADLINE_EXCEEDED, and the rows it did not read count in Stats'
  // expired_rows.
  //
  // `need_by`: when the caller needs the rows. A request is split into
  // chunks (one MultiGet each, as many as there are readers); the reader
  // threads take chunks of the queued requests, of every caller, earliest
  // need-by first (in arrival order among equal need-bys), one chunk at a
  // time, so a large request delays an urgent one by at most one chunk per
  // reader; and while a chunk of the earliest need-by is queued or being
  // read, at most `later_read_depth` chunks of later need-bys are read
  // (shard/read_queue.h). InfiniteFuture = after every request that has a
  // need-by (the blocking ReadRows' helpers queue so too). Rows read after
  // their need-by count in Stats' late_rows.
  virtual void ReadRowsAsync(std::span<const RowRef> refs, std::function<void(absl::Status)> done,
                             absl::Time deadline = absl::InfiniteFuture(),
                             absl::Time need_by = absl::InfiniteFuture()) = 0;

  // RocksDB's own counters and properties, for metrics (name -> value):
  // rocksdb_index_memory_bytes (table readers, i.e. the resident index),
  // rocksdb_sst_bytes, rocksdb_keys, and cumulative counters
  // rocksdb_multiget_calls, _keys, _bytes, rocksdb_file_reads,
  // rocksdb_file_read_bytes (SST reads), rocksdb_block_checksums (blocks
  // verified) and rocksdb_block_cache_hits; and the cumulative damaged_rows (rows reads found
  // missing, damaged or unreadable: DATA_LOSS), expired_rows (rows not read because their request's
  // deadline had passed), late_rows (rows read after their request's need-by) and
  // unreadable_pages (pages of mapped table files that faulted and now read as zeros); with
  // reads through io_uring, uring_reads (block reads submitted through rings) and
  // uring_submissions (the submissions that carried them).
  virtual std::vector<std::pair<std::string, double>> Stats() const = 0;
};

}  // namespace engram

#endif  // ENGRAM_SHARD_ROW_STORE_H_
