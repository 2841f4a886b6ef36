#include "shard/import/row_sink.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/sst_file_writer.h"

namespace engram {
namespace {

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", s.ToString()));
}

rocksdb::Slice KeySlice(uint64_t key, char (&buf)[kShardKeyBytes]) {
  EncodeShardKey(key, buf);
  return rocksdb::Slice(buf, kShardKeyBytes);
}

// kBlock: SST files in `staging`, ingested at Finish.
class BlockSink final : public RowSink {
 public:
  BlockSink(std::string staging, std::string db_dir, uint64_t max_bytes)
      : staging_(std::move(staging)),
        db_dir_(std::move(db_dir)),
        options_(ShardDbOptions({})),
        max_bytes_(max_bytes) {}

  absl::Status PutRow(uint64_t key, const uint8_t* row, size_t n) override {
    RETURN_IF_ERROR(Put(key, row, n));
    ++rows_;
    return writer_->FileSize() >= max_bytes_ ? FinishFile() : absl::OkStatus();
  }

  absl::Status Finish(const std::string& identity) override {
    // The identity record sorts after every row key, so it ends the last file.
    RETURN_IF_ERROR(
        Put(kStoreIdentityKey, reinterpret_cast<const uint8_t*>(identity.data()), identity.size()));
    RETURN_IF_ERROR(FinishFile());
    rocksdb::Options create = options_;
    create.create_if_missing = true;
    create.error_if_exists = true;
    rocksdb::DB* raw = nullptr;
    RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(create, db_dir_, &raw), db_dir_));
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;
    ingest.verify_checksums_before_ingest = false;  // written just now
    RETURN_IF_ERROR(FromRocks(db->IngestExternalFile(files_written_, ingest),
                              "ingesting SST files into " + db_dir_));
    files_ = static_cast<int>(files_written_.size());
    return FromRocks(db->Close(), "closing " + db_dir_);
  }

 private:
  absl::Status Put(uint64_t key, const uint8_t* value, size_t n) {
    if (writer_ == nullptr) {
      writer_ = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(), options_);
      files_written_.push_back(absl::StrCat(staging_, "/", files_written_.size(), ".sst"));
      RETURN_IF_ERROR(Check(writer_->Open(files_written_.back())));
    }
    char k[kShardKeyBytes];
    return Check(
        writer_->Put(KeySlice(key, k), rocksdb::Slice(reinterpret_cast<const char*>(value), n)));
  }

  absl::Status FinishFile() {
    if (writer_ == nullptr) return absl::OkStatus();
    absl::Status s = Check(writer_->Finish());
    writer_.reset();
    return s;
  }

  absl::Status Check(const rocksdb::Status& s) {
    return FromRocks(s, absl::StrCat("writing ", files_written_.back()));
  }

  const std::string staging_, db_dir_;
  const rocksdb::Options options_;
  const uint64_t max_bytes_;
  std::unique_ptr<rocksdb::SstFileWriter> writer_;
  std::vector<std::string> files_written_;
};

// kCuckoo: rows through the memtable into the rows column family.
class CuckooSink final : public RowSink {
 public:
  static absl::StatusOr<std::unique_ptr<RowSink>> Open(const std::string& db_dir,
                                                       uint64_t max_bytes) {
    rocksdb::Options o = ShardDbOptions({.mmap_reads = true});  // a flush reopens its table
    o.create_if_missing = true;
    o.error_if_exists = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
        {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions(o)},
        {kRowsColumnFamily, CuckooRowsOptions(max_bytes)}};
    o.create_missing_column_families = true;
    o.allow_concurrent_memtable_write = false;  // the vector memtable cannot
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    RETURN_IF_ERROR(
        FromRocks(rocksdb::DB::Open(rocksdb::DBOptions(o), db_dir, cfs, &handles, &raw), db_dir));
    return std::unique_ptr<RowSink>(new CuckooSink(db_dir, raw, handles));
  }

  ~CuckooSink() override { (void)Close(); }  // after a failure: discarded anyway

  absl::Status PutRow(uint64_t key, const uint8_t* row, size_t n) override {
    // A table holds one value size: each layer starts a table of its own.
    const uint64_t layer = ShardKeyLayer(key);
    if (rows_ > 0 && layer != layer_) {
      RETURN_IF_ERROR(Flush(handles_[1]));
    }
    layer_ = layer;
    EncodeCuckooValue(key, row, n, &value_);
    char k[kShardKeyBytes];
    RETURN_IF_ERROR(FromRocks(db_->Put(write_, handles_[1], KeySlice(key, k),
                                       rocksdb::Slice(value_.data(), value_.size())),
                              "writing rows into " + db_dir_));
    ++rows_;
    return absl::OkStatus();
  }

  absl::Status Finish(const std::string& identity) override {
    char k[kShardKeyBytes];
    RETURN_IF_ERROR(
        FromRocks(db_->Put(write_, handles_[0], KeySlice(kStoreIdentityKey, k), identity),
                  "writing the identity record into " + db_dir_));
    for (rocksdb::ColumnFamilyHandle* h : handles_) {
      RETURN_IF_ERROR(Flush(h));
    }
    std::vector<rocksdb::LiveFileMetaData> live;
    db_->GetLiveFilesMetaData(&live);
    files_ = static_cast<int>(live.size());
    return Close();
  }

 private:
  CuckooSink(std::string db_dir, rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*> h)
      : db_dir_(std::move(db_dir)), db_(db), handles_(std::move(h)) {
    write_.disableWAL = true;  // a failed import is thrown away whole
  }

  absl::Status Flush(rocksdb::ColumnFamilyHandle* h) {
    return FromRocks(db_->Flush(rocksdb::FlushOptions(), h), "flushing " + db_dir_);
  }

  absl::Status Close() {
    if (db_ == nullptr) return absl::OkStatus();
    for (rocksdb::ColumnFamilyHandle* h : handles_) db_->DestroyColumnFamilyHandle(h);
    handles_.clear();
    absl::Status s = FromRocks(db_->Close(), "closing " + db_dir_);
    delete db_;
    db_ = nullptr;
    return s;
  }

  const std::string db_dir_;
  rocksdb::DB* db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // default, rows
  rocksdb::WriteOptions write_;
  uint64_t layer_ = 0;
  std::string value_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RowSink>> RowSink::Create(TailFormat format,
                                                         const std::string& staging,
                                                         const std::string& db_dir,
                                                         uint64_t max_file_bytes) {
  if (format == TailFormat::kCuckoo) return CuckooSink::Open(db_dir, max_file_bytes);
  return std::unique_ptr<RowSink>(new BlockSink(staging, db_dir, max_file_bytes));
}

}  // namespace engram
