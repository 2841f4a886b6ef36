#include "shard/verify.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/format/table.h"
#include "common/util/status_macros.h"

namespace engram {

ShardScan::ShardScan(RowStore& store, uint32_t batch_rows)
    : store_(store),
      batch_rows_(std::max<uint32_t>(1, batch_rows)),
      n_layers_(static_cast<uint32_t>(store.shard_map().layer_rows.size())),
      hash_(XXH3_createState()) {
  const ShardMap& map = store.shard_map();
  for (uint32_t l = 0; l < n_layers_; ++l) total_rows_ += map.RowsOnShard(l, store.shard_index());
  Restart();
}

ShardScan::~ShardScan() { XXH3_freeState(hash_); }

void ShardScan::Restart() {
  layer_ = 0;
  next_ = 0;
  damaged_ = 0;
  XXH3_64bits_reset(hash_);
}

void ShardScan::FinishLayers(Visitor& visitor) {
  const ShardMap& map = store_.shard_map();
  while (layer_ < n_layers_ && next_ >= map.RowsOnShard(layer_, store_.shard_index())) {
    LayerCheck check;
    check.layer = layer_;
    check.rows = next_;
    check.damaged = damaged_;
    check.checksum = FormatChecksum(XXH3_64bits_digest(hash_));
    check.expected = store_.shard_info().layers[layer_].checksum;
    visitor.LayerDone(check);
    ++layer_;
    next_ = 0;
    damaged_ = 0;
    XXH3_64bits_reset(hash_);
  }
}

uint64_t ShardScan::Step(uint64_t max_rows, Visitor& visitor) {
  FinishLayers(visitor);  // empty layers at the start
  if (done() || max_rows == 0) return 0;
  const ShardMap& map = store_.shard_map();
  const uint32_t shard = store_.shard_index();
  const uint32_t rb = map.row_bytes[layer_];
  const uint64_t n =
      std::min({max_rows, uint64_t{batch_rows_}, map.RowsOnShard(layer_, shard) - next_});
  buf_.resize(n * rb);
  refs_.clear();
  for (uint64_t i = 0; i < n; ++i) {
    refs_.push_back({layer_, shard + (next_ + i) * map.n_shards, buf_.data() + i * rb});
  }
  const bool all_read = store_.ScanRows(refs_).ok();
  for (const RowRef& r : refs_) {
    // A failed batch is read again row by row: its other rows are intact.
    const absl::Status s = all_read ? absl::OkStatus() : store_.ReadRows({&r, 1});
    if (s.ok()) {
      XXH3_64bits_update(hash_, r.dst, rb);
      visitor.Row(r.layer, r.row, r.dst);
    } else {
      ++damaged_;
      visitor.Damaged(r.layer, r.row, s);
    }
  }
  next_ += n;
  FinishLayers(visitor);
  return n;
}

namespace {

// The table's rows of one layer, read in order in chunks: each shard row is
// compared with them, and the table's own layer checksum is recomputed on
// the way (every chunk is read, also those without a row of the shard).
class TableWindow {
 public:
  TableWindow(const TableReader& table, int layer)
      : table_(table),
        layer_(layer),
        rows_(table.manifest().layers[layer].rows),
        rb_(static_cast<uint32_t>(table.manifest().layers[layer].row_bytes)),
        hash_(XXH3_createState()) {
    XXH3_64bits_reset(hash_);
  }
  ~TableWindow() { XXH3_freeState(hash_); }

  // The table's bytes of `row`. REQUIRES: rows asked in ascending order.
  absl::StatusOr<const uint8_t*> Row(uint64_t row) {
    while (row >= first_ + loaded_) RETURN_IF_ERROR(Next());
    return buf_.data() + (row - first_) * rb_;
  }
  // Reads the rest of the layer; whether the table's rows match its
  // manifest's checksum.
  absl::StatusOr<bool> Finish() {
    while (first_ + loaded_ < rows_) RETURN_IF_ERROR(Next());
    return FormatChecksum(XXH3_64bits_digest(hash_)) == table_.manifest().layers[layer_].checksum;
  }

 private:
  static constexpr uint64_t kChunkRows = 4096;

  absl::Status Next() {
    first_ += loaded_;
    loaded_ = std::min(kChunkRows, rows_ - first_);
    buf_.resize(loaded_ * rb_);
    RETURN_IF_ERROR(table_.ReadRows(layer_, first_, loaded_, buf_.data()));
    XXH3_64bits_update(hash_, buf_.data(), buf_.size());
    return absl::OkStatus();
  }

  const TableReader& table_;
  const int layer_;
  const uint64_t rows_;
  const uint32_t rb_;
  XXH3_state_t* hash_;
  uint64_t first_ = 0, loaded_ = 0;
  std::vector<uint8_t> buf_;
};

// Collects a VerifyReport from a whole pass.
class ReportVisitor final : public ShardScan::Visitor {
 public:
  ReportVisitor(const RowStore& store, const TableReader* table, VerifyReport* report)
      : store_(store), table_(table), report_(report) {}

  void Row(uint32_t layer, uint64_t row, const uint8_t* bytes) override {
    if (table_ == nullptr || !status_.ok()) return;
    Open(layer);
    absl::StatusOr<const uint8_t*> want = window_->Row(row);
    if (!want.ok()) {
      status_ = want.status();
      return;
    }
    if (std::memcmp(*want, bytes, store_.shard_map().row_bytes[layer]) != 0) {
      ++differ_;
      Bad(layer, row, "differs from the table's row");
    }
  }
  void Damaged(uint32_t layer, uint64_t row, const absl::Status& why) override {
    Bad(layer, row, std::string(why.message()));
  }
  void LayerDone(const LayerCheck& check) override {
    VerifyReport::Layer l;
    l.check = check;
    l.layer_id = store_.shard_info().layers[check.layer].layer_id;
    if (table_ != nullptr && status_.ok()) {
      Open(check.layer);
      absl::StatusOr<bool> table_ok = window_->Finish();
      if (table_ok.ok()) {
        l.table_checked = true;
        l.table_checksum_matches = *table_ok;
        l.differ_from_table = differ_;
      } else {
        status_ = table_ok.status();
      }
    }
    window_.reset();
    differ_ = 0;
    report_->rows += check.rows;
    report_->layers.push_back(std::move(l));
  }

  // A table read error, which ends the check.
  const absl::Status& status() const { return status_; }

 private:
  void Open(uint32_t layer) {
    if (window_ == nullptr) window_ = std::make_unique<TableWindow>(*table_, layer);
  }
  void Bad(uint32_t layer, uint64_t row, std::string why) {
    if (report_->bad_rows++ == 0) {
      report_->first_bad_layer = layer;
      report_->first_bad_row = row;
      report_->first_bad_why = std::move(why);
    }
  }

  const RowStore& store_;
  const TableReader* table_;
  VerifyReport* report_;
  std::unique_ptr<TableWindow> window_;
  uint64_t differ_ = 0;
  absl::Status status_;
};

// FailedPrecondition unless `table` holds the rows the shard was cut from.
absl::Status CheckTableMatches(const TableReader& table, const std::string& table_dir,
                               const ShardMap& map) {
  const TableManifest& m = table.manifest();
  std::string differs;
  if (m.table != map.table || m.version != map.version) {
    differs = absl::StrCat("is ", m.table, " v", m.version, ", the shard holds ", map.table, " v",
                           map.version);
  } else if (m.layers.size() != map.layer_rows.size()) {
    differs = absl::StrCat("has ", m.layers.size(), " layers, the shard ", map.layer_rows.size());
  } else {
    for (size_t l = 0; l < m.layers.size() && differs.empty(); ++l) {
      if (m.layers[l].rows != map.layer_rows[l] ||
          static_cast<uint32_t>(m.layers[l].row_bytes) != map.row_bytes[l]) {
        differs =
            absl::StrCat("layer ", l, " has ", m.layers[l].rows, " rows of ", m.layers[l].row_bytes,
                         " bytes, the shard's ", map.layer_rows[l], " of ", map.row_bytes[l]);
      }
    }
  }
  if (differs.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("table ", table_dir, " is not this shard's table: it ", differs));
}

}  // namespace

bool VerifyReport::ok() const {
  if (bad_rows != 0) return false;
  for (const Layer& l : layers) {
    if (!l.check.matches() || (l.table_checked && !l.table_checksum_matches)) return false;
  }
  return true;
}

std::vector<std::string> VerifyReport::Lines() const {
  std::vector<std::string> out;
  const Layer* mismatched = nullptr;
  for (const Layer& l : layers) {
    const LayerCheck& c = l.check;
    std::string line =
        absl::StrCat("layer ", c.layer, " (layer id ", l.layer_id, "): ", c.rows, " rows, ");
    if (c.damaged != 0) {
      absl::StrAppend(&line, c.damaged, " unreadable, checksum not comparable");
    } else if (c.matches()) {
      absl::StrAppend(&line, "checksum ", c.checksum, " matches shard.json");
    } else {
      absl::StrAppend(&line, "checksum ", c.checksum, " differs from shard.json's ", c.expected);
      if (mismatched == nullptr) mismatched = &l;
    }
    if (l.table_checked) {
      absl::StrAppend(&line, l.differ_from_table == 0 ? ", every readable row equals the table's"
                                                      : absl::StrCat(", ", l.differ_from_table,
                                                                     " differ from the table's"));
      if (!l.table_checksum_matches) {
        absl::StrAppend(&line,
                        "; the table's own rows do not match its manifest (the table is damaged)");
      }
    }
    if (bad_rows != 0 && c.layer == first_bad_layer) {
      absl::StrAppend(&line, "; first bad row ", first_bad_row, ": ", first_bad_why);
    }
    out.push_back(std::move(line));
  }
  if (bad_rows != 0) {
    out.push_back(absl::StrCat("verify: ", bad_rows, " of ", rows, " rows differ (first: layer ",
                               first_bad_layer, " row ", first_bad_row, ")"));
  } else if (mismatched != nullptr) {
    out.push_back(absl::StrCat("verify: ", rows, " rows, but the checksum of layer ",
                               mismatched->check.layer, " differs from shard.json"));
  } else if (!ok()) {
    out.push_back(
        absl::StrCat("verify: ", rows, " rows match, but the table does not match its manifest"));
  } else {
    out.push_back(absl::StrCat("verify: ", rows, " rows, all match"));
  }
  return out;
}

absl::StatusOr<VerifyReport> VerifyShard(const VerifyOptions& options,
                                         const std::function<void(uint64_t, uint64_t)>& progress) {
  RowStoreOptions ro;
  ro.reader_threads = std::max(1, options.reader_threads);
  ro.mmap_reads = false;  // pread: a media error is EIO (DATA_LOSS), not a page fault
  ASSIGN_OR_RETURN(std::unique_ptr<RowStore> store, RowStore::Open(options.shard_dir, ro));
  std::unique_ptr<TableReader> table;
  if (!options.table_dir.empty()) {
    ASSIGN_OR_RETURN(table, TableReader::Open(options.table_dir));
    RETURN_IF_ERROR(CheckTableMatches(*table, options.table_dir, store->shard_map()));
  }
  VerifyReport report;
  ReportVisitor visitor(*store, table.get(), &report);
  ShardScan scan(*store, options.batch_rows);
  uint64_t done = 0;
  while (const uint64_t n = scan.Step(options.batch_rows, visitor)) {
    RETURN_IF_ERROR(visitor.status());
    done += n;
    if (progress) progress(done, scan.total_rows());
  }
  RETURN_IF_ERROR(visitor.status());
  return report;
}

}  // namespace engram
