// RowSink: writes an import's rows into a new shard DB in the shard's tail
// format (TailFormat, shard/shard_format.h). Used by the importer only.
//
//   kBlock   rows go into sorted SST files of bounded size in a staging
//            directory, ingested into a fresh DB at Finish (no memtable, no
//            compaction);
//   kCuckoo  rows go through memtables of bounded size into the rows column
//            family, one CuckooTable per flush and at least one per layer
//            (a table's values must all be one size); RocksDB's
//            SstFileWriter cannot write CuckooTables.
//
// Not thread-safe. Nothing is usable until Finish succeeds; on failure the
// caller removes the directories.
#ifndef ENGRAM_SHARD_IMPORT_ROW_SINK_H_
#define ENGRAM_SHARD_IMPORT_ROW_SINK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shard/shard_format.h"

namespace engram {

class RowSink {
 public:
  // REQUIRES: db_dir does not exist; staging is an empty directory that the
  // caller removes afterwards. `max_file_bytes` bounds each table (and, for
  // kCuckoo, each memtable).
  static absl::StatusOr<std::unique_ptr<RowSink>> Create(TailFormat format,
                                                         const std::string& staging,
                                                         const std::string& db_dir,
                                                         uint64_t max_file_bytes);
  virtual ~RowSink() = default;

  // One row. REQUIRES: keys strictly ascending; n = the row's layer's
  // row_bytes.
  virtual absl::Status PutRow(uint64_t key, const uint8_t* row, size_t n) = 0;
  // Stores the identity record (StoreIdentity::Encode) and closes the DB.
  virtual absl::Status Finish(const std::string& identity) = 0;

  uint64_t rows() const { return rows_; }
  // SST files of the finished DB.
  int files() const { return files_; }

 protected:
  RowSink() = default;
  uint64_t rows_ = 0;
  int files_ = 0;
};

}  // namespace engram

#endif  // ENGRAM_SHARD_IMPORT_ROW_SINK_H_
