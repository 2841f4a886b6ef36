// Reading a whole shard back and checking it: ShardScan, the walk the
// scrubber paces (shard/scrubber.h), and VerifyShard, what `engramctl
// verify` runs.
//
// What is checked: every row is read through RowStore::ScanRows (so
// RocksDB's block checksums or a cuckoo row's RowChecksum are verified, as
// on a Lookup, with sequential reads; a batch that fails is read again row
// by row through ReadRows); each layer's rows, in row order, are hashed as the importer
// hashed them for shard.json (XXH3-64, ShardInfo::Layer::checksum) and
// compared with it; and, for VerifyShard with a table, every row is
// compared byte for byte with the table file's row, and the table's own
// layer checksums with its manifest.
#ifndef ENGRAM_SHARD_VERIFY_H_
#define ENGRAM_SHARD_VERIFY_H_

#include <xxhash.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shard/row_store.h"

namespace engram {

// One layer of a ShardScan pass against shard.json.
struct LayerCheck {
  uint32_t layer = 0;
  uint64_t rows = 0;     // rows of the layer on the shard (all visited)
  uint64_t damaged = 0;  // of which the store could not return
  // XXH3-64 of the layer's rows in row order, "xxh3_64:<hex>" (meaningless
  // when damaged > 0), and what shard.json says.
  std::string checksum;
  std::string expected;
  bool matches() const { return damaged == 0 && checksum == expected; }
};

// A walk over every row of a shard in key order: layer by layer, rows
// ascending, read through `store` in batches (RowStore::ScanRows). Not
// thread-safe; the store must outlive it.
class ShardScan {
 public:
  class Visitor {
   public:
    virtual ~Visitor() = default;
    // A row read intact: row_bytes of its layer at `bytes`.
    virtual void Row(uint32_t layer, uint64_t row, const uint8_t* bytes) {}
    // A row the store could not return (DATA_LOSS naming it, usually).
    virtual void Damaged(uint32_t layer, uint64_t row, const absl::Status& why) {}
    // The end of a layer.
    virtual void LayerDone(const LayerCheck& check) {}
  };

  explicit ShardScan(RowStore& store, uint32_t batch_rows = 256);
  ~ShardScan();
  ShardScan(const ShardScan&) = delete;
  ShardScan& operator=(const ShardScan&) = delete;

  // Visits up to max_rows more rows (a batch that fails is read again row
  // by row, to tell the damaged rows from the intact ones). Returns the
  // number visited; 0 once the pass is done.
  uint64_t Step(uint64_t max_rows, Visitor& visitor);
  bool done() const { return layer_ >= n_layers_; }
  // Starts a new pass from the first row.
  void Restart();
  // Rows of the shard, all layers.
  uint64_t total_rows() const { return total_rows_; }

 private:
  // Finishes layer_ if all its rows were visited (and any empty layers
  // after it).
  void FinishLayers(Visitor& visitor);

  RowStore& store_;
  const uint32_t batch_rows_;
  const uint32_t n_layers_;
  uint64_t total_rows_ = 0;
  uint32_t layer_ = 0;  // current layer; n_layers_ when done
  uint64_t next_ = 0;   // index of the next row among the layer's owned rows
  uint64_t damaged_ = 0;
  XXH3_state_t* hash_;
  std::vector<uint8_t> buf_;
  std::vector<RowRef> refs_;
};

struct VerifyOptions {
  std::string shard_dir;  // required
  // Optional: the table the shard was imported from; every row is then
  // compared with it.
  std::string table_dir;
  // RowStoreOptions::reader_threads of the store opened for the check (a
  // cuckoo tail is read through MultiGet: one read a row, no open scan).
  int reader_threads = 4;
  uint32_t batch_rows = 1024;
};

struct VerifyReport {
  struct Layer {
    LayerCheck check;
    int64_t layer_id = 0;
    bool table_checked = false;
    uint64_t differ_from_table = 0;       // intact rows unequal to the table's
    bool table_checksum_matches = false;  // the table's own, vs its manifest
  };
  std::vector<Layer> layers;
  uint64_t rows = 0;
  uint64_t bad_rows = 0;  // damaged, or differing from the table
  // The first bad row, in key order, and why.
  uint32_t first_bad_layer = 0;
  uint64_t first_bad_row = 0;
  std::string first_bad_why;

  // Every row intact (and equal to the table's) and every layer's checksum
  // equal to shard.json's.
  bool ok() const;
  // What `engramctl verify` prints: one line per layer, then
  // "verify: N rows, all match", or "verify: M of N rows differ (first:
  // layer L row R)", or "verify: N rows, but the checksum of layer L
  // differs from shard.json".
  std::vector<std::string> Lines() const;
};

// Reads every row of the shard at options.shard_dir and checks it (see the
// top of this file). Errors: RowStore::Open's for a missing or unusable
// shard (DataLoss for a damaged one); for a table, TableReader::Open's, or
// FailedPrecondition when it is not the shard's table (name, version,
// layers, rows). Damaged or differing rows are not errors: they are in the
// report. progress(done, total) counts rows, may be empty.
absl::StatusOr<VerifyReport> VerifyShard(
    const VerifyOptions& options,
    const std::function<void(uint64_t done, uint64_t total)>& progress = nullptr);

}  // namespace engram

#endif  // ENGRAM_SHARD_VERIFY_H_
