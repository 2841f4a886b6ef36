#include "shard/row_store.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/util/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/iterator.h"
#include "rocksdb/statistics.h"
#include "rocksdb/table_properties.h"
#include "shard/mapping_guard.h"
#include "shard/read_queue.h"
#include "shard/shard_format.h"
#include "shard/uring_file_system.h"

namespace engram {
namespace {

// One ReadRows call: its refs sorted by key, split into chunks that reader
// threads (and, for a blocking call, the caller) claim from the store's
// ReadQueue one at a time. The last chunk to finish reports the result.
// Shared by every thread that holds a claim, so it outlives all of them.
struct Request : ReadQueue::Job {
  struct Item {
    uint64_t key;
    uint8_t* dst;
  };
  std::vector<Item> items;      // sorted by key
  std::vector<char> key_bytes;  // items[i]'s encoded key at 8 * i
  size_t batch = 0;             // keys per chunk
  absl::Time deadline = absl::InfiniteFuture();
  std::atomic<size_t> chunks_left{0};
  absl::Mutex mu;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::function<void(absl::Status)> done;
};

// Per-thread MultiGet buffers, reused across chunks.
struct Scratch {
  std::vector<rocksdb::Slice> keys;
  std::vector<rocksdb::PinnableSlice> values;
  std::vector<rocksdb::Status> statuses;

  explicit Scratch(size_t batch) : keys(batch), values(batch), statuses(batch) {}
};

class RowStoreImpl final : public RowStore {
 public:
  RowStoreImpl(std::string dir, std::unique_ptr<rocksdb::Env> env,
               std::shared_ptr<rocksdb::FileSystem> uring_fs, std::unique_ptr<rocksdb::DB> db,
               std::vector<rocksdb::ColumnFamilyHandle*> cfs,
               std::vector<std::unique_ptr<MappingGuard>> db_guards, rocksdb::Options db_options,
               ShardMap map, ShardInfo info, const RowStoreOptions& options,
               std::string tail_access)
      : dir_(std::move(dir)),
        env_(std::move(env)),
        uring_fs_(std::move(uring_fs)),
        name_(absl::StrCat("shard ", info.shard_index, " (", dir_, ")")),
        db_(std::move(db)),
        cfs_(std::move(cfs)),
        db_guards_(std::move(db_guards)),
        rows_cf_(cfs_.back()),
        row_checksums_(info.tail_format == TailFormat::kCuckoo),
        db_options_(std::move(db_options)),
        map_(std::move(map)),
        info_(std::move(info)),
        batch_(static_cast<size_t>(std::max(1, options.multiget_batch))),
        tail_access_(std::move(tail_access)),
        queue_(ReadQueueOptions{.later_depth = options.later_read_depth}) {
    read_options_.verify_checksums = true;
    read_options_.fill_cache = options.block_cache_bytes > 0;
    const int n = std::max(1, options.reader_threads);
    threads_.reserve(n);
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { WorkerLoop(); });
  }

  ~RowStoreImpl() override {
    queue_.Stop();
    for (std::thread& t : threads_) t.join();
    db_guards_.clear();  // before RocksDB unmaps the files
    for (rocksdb::ColumnFamilyHandle* cf : cfs_) db_->DestroyColumnFamilyHandle(cf);
    db_->Close();
  }

  const ShardMap& shard_map() const override { return map_; }
  const ShardInfo& shard_info() const override { return info_; }
  uint32_t shard_index() const override { return info_.shard_index; }
  const std::string& shard_dir() const override { return dir_; }
  std::string tail_access() const override { return tail_access_; }

  absl::Status ReadRows(std::span<const RowRef> refs) override {
    if (refs.empty()) return absl::OkStatus();
    absl::Notification finished;
    absl::Status result;
    std::shared_ptr<Request> req = Prepare(refs, [&](absl::Status s) {
      result = std::move(s);
      finished.Notify();
    });
    if (req == nullptr) return result;  // rejected up front; done ran
    // Reader threads help (after every request with a need-by); this
    // thread works on it too, so a small request never waits for one.
    queue_.Add(req);
    Scratch scratch(batch_);
    while (std::optional<size_t> chunk = queue_.ClaimOwn(*req)) RunChunk(*req, *chunk, scratch);
    finished.WaitForNotification();
    return result;
  }

  void ReadRowsAsync(std::span<const RowRef> refs, std::function<void(absl::Status)> done,
                     absl::Time deadline, absl::Time need_by) override {
    if (refs.empty()) {
      done(ReadRows(refs));
      return;
    }
    std::shared_ptr<Request> req = Prepare(refs, std::move(done));
    if (req == nullptr) return;
    req->deadline = deadline;
    req->need_by = need_by;
    queue_.Add(std::move(req));
  }

  absl::Status ScanRows(std::span<const RowRef> refs) override;

  std::vector<std::pair<std::string, double>> Stats() const override;

 private:
  // INVALID_ARGUMENT naming the first ref that is not a row of this shard.
  absl::Status CheckRefs(std::span<const RowRef> refs) const;
  // Validates and sorts refs. On a bad ref calls done and returns null.
  std::shared_ptr<Request> Prepare(std::span<const RowRef> refs,
                                   std::function<void(absl::Status)> done);
  void WorkerLoop();
  // Reads chunk `chunk` of `req` (claimed from the queue, or by its own
  // caller when `claim` is null); the last chunk to finish calls req.done.
  void RunChunk(Request& req, size_t chunk, Scratch& scratch,
                const ReadQueue::Claim* claim = nullptr);
  absl::Status ReadChunk(Request& req, size_t begin, size_t end, Scratch& scratch);
  // DATA_LOSS (or INTERNAL) for `key`: `what` is wrong with it.
  absl::Status RowError(uint64_t key, const std::string& what, const rocksdb::Status& st) const;

  const std::string dir_;
  // The Env the DB reads through (over uring_fs_ for an O_DIRECT tail), or
  // null for the default: declared before db_ so that it outlives it.
  std::unique_ptr<rocksdb::Env> env_;
  std::shared_ptr<rocksdb::FileSystem> uring_fs_;  // null: no rings
  const std::string name_;                         // "shard I (DIR)", how errors name the store
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs_;  // opened; the rows' last
  // RocksDB's mappings of the table files (with mmap reads): a page lost
  // under them reads as zeros, which fail the block or row checksums.
  std::vector<std::unique_ptr<MappingGuard>> db_guards_;
  rocksdb::ColumnFamilyHandle* const rows_cf_;
  const bool row_checksums_;     // kCuckoo: each value ends in RowChecksum
  rocksdb::Options db_options_;  // owns the statistics object
  ShardMap map_;
  ShardInfo info_;
  rocksdb::ReadOptions read_options_;
  size_t batch_;

  const std::string tail_access_;
  // Since Open: rows that reads found missing, damaged or unreadable; rows
  // not read because their request's deadline had passed; rows read after
  // their request's need-by.
  std::atomic<uint64_t> damaged_rows_{0}, expired_rows_{0}, late_rows_{0};

  ReadQueue queue_;
  std::vector<std::thread> threads_;
};

absl::Status RowStoreImpl::CheckRefs(std::span<const RowRef> refs) const {
  for (const RowRef& r : refs) {
    if (r.layer >= map_.layer_rows.size() || r.row >= map_.layer_rows[r.layer] ||
        map_.ShardOf(r.row) != info_.shard_index) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", r.layer, " row ", r.row,
                                                     " is not a row of shard ", info_.shard_index,
                                                     " of table ", map_.table));
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<Request> RowStoreImpl::Prepare(std::span<const RowRef> refs,
                                               std::function<void(absl::Status)> done) {
  if (absl::Status s = CheckRefs(refs); !s.ok()) {
    done(std::move(s));
    return nullptr;
  }
  auto req = std::make_shared<Request>();
  req->items.resize(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    req->items[i] = {ShardKey(refs[i].layer, refs[i].row), refs[i].dst};
  }
  std::sort(req->items.begin(), req->items.end(),
            [](const Request::Item& a, const Request::Item& b) { return a.key < b.key; });
  req->key_bytes.resize(req->items.size() * kShardKeyBytes);
  for (size_t i = 0; i < req->items.size(); ++i) {
    EncodeShardKey(req->items[i].key, &req->key_bytes[i * kShardKeyBytes]);
  }
  // With rings, a chunk's reads are all in the device's queue at once:
  // chunks of up to batch_ keys. Without, one thread has one read in
  // flight, so as many chunks as there are readers (up to batch_ keys
  // each, at least one): a small request's rows are read side by side, not
  // one after another in one MultiGet.
  const size_t n = req->items.size();
  req->batch = uring_fs_ != nullptr
                   ? std::min(n, batch_)
                   : std::clamp<size_t>((n + threads_.size() - 1) / threads_.size(), 1, batch_);
  req->chunks = (n + req->batch - 1) / req->batch;
  req->chunks_left.store(req->chunks, std::memory_order_relaxed);
  req->done = std::move(done);
  return req;
}

void RowStoreImpl::WorkerLoop() {
  Scratch scratch(batch_);
  while (std::optional<ReadQueue::Claim> claim = queue_.Next()) {
    Request& req = static_cast<Request&>(*claim->job);  // the claim keeps it alive
    RunChunk(req, claim->chunk, scratch, &*claim);
  }
}

void RowStoreImpl::RunChunk(Request& req, size_t chunk, Scratch& scratch,
                            const ReadQueue::Claim* claim) {
  const size_t begin = chunk * req.batch;
  const size_t end = std::min(begin + req.batch, req.items.size());
  absl::Status s;
  if (req.deadline != absl::InfiniteFuture() && absl::Now() >= req.deadline) {
    // Nobody waits for these rows any more: the disk serves live requests.
    expired_rows_.fetch_add(end - begin, std::memory_order_relaxed);
    s = absl::DeadlineExceededError(
        absl::StrCat(name_, ": the request's deadline passed before its rows were read (",
                     req.items.size(), " rows from disk)"));
  } else {
    s = ReadChunk(req, begin, end, scratch);
    if (req.need_by != absl::InfiniteFuture() && absl::Now() > req.need_by) {
      late_rows_.fetch_add(end - begin, std::memory_order_relaxed);
    }
  }
  // The disk is free for the next chunk before the reply is built.
  if (claim != nullptr) queue_.Done(*claim);
  if (!s.ok()) {
    absl::MutexLock lock(&req.mu);
    if (req.status.ok()) req.status = std::move(s);
  }
  if (req.chunks_left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    absl::Status result;
    {
      absl::MutexLock lock(&req.mu);
      result = req.status;
    }
    req.done(std::move(result));
  }
}

absl::Status RowStoreImpl::ReadChunk(Request& req, size_t begin, size_t end, Scratch& scratch) {
  const size_t n = end - begin;
  for (size_t i = 0; i < n; ++i) {
    scratch.keys[i] = rocksdb::Slice(&req.key_bytes[(begin + i) * kShardKeyBytes], kShardKeyBytes);
  }
  db_->MultiGet(read_options_, rows_cf_, n, scratch.keys.data(), scratch.values.data(),
                scratch.statuses.data(), /*sorted_input=*/true);
  absl::Status first_error;
  uint64_t damaged = 0;
  for (size_t i = 0; i < n; ++i) {
    const Request::Item& item = req.items[begin + i];
    const uint32_t layer = ShardKeyLayer(item.key);
    const rocksdb::Status& st = scratch.statuses[i];
    rocksdb::PinnableSlice& v = scratch.values[i];
    const uint32_t rb = map_.row_bytes[layer];
    const size_t want = rb + (row_checksums_ ? kRowChecksumBytes : 0);
    const bool intact = st.ok() && v.size() == want &&
                        (!row_checksums_ || CuckooValueIntact(item.key, v.data(), rb));
    if (intact) {
      std::memcpy(item.dst, v.data(), rb);
    } else if (++damaged == 1) {
      std::string what;
      if (st.ok() && v.size() == want) {
        what = kRowChecksumFailure;
      } else if (st.ok()) {
        what = absl::StrCat("holds ", v.size(), " bytes, expected ", want);
      } else if (st.IsNotFound()) {
        what = "is missing from the store";
      } else {
        what = absl::StrCat("cannot be read: ", st.ToString());
      }
      first_error = RowError(item.key, what, st);
    }
    v.Reset();
  }
  if (damaged != 0) damaged_rows_.fetch_add(damaged, std::memory_order_relaxed);
  return first_error;
}

absl::Status RowStoreImpl::RowError(uint64_t key, const std::string& what,
                                    const rocksdb::Status& st) const {
  const std::string faults = DescribeFaults(db_guards_);
  const std::string msg =
      absl::StrCat(name_, ": layer ", ShardKeyLayer(key), " row ", ShardKeyRow(key), " ", what,
                   faults.empty() ? "" : "; ", faults);
  // A read error of a static store (EIO: a media error) loses the row as
  // surely as a checksum mismatch does.
  return st.ok() || st.IsNotFound() || st.IsCorruption() || st.IsIOError()
             ? absl::DataLossError(msg)
             : absl::InternalError(msg);
}

absl::Status RowStoreImpl::ScanRows(std::span<const RowRef> refs) {
  if (refs.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckRefs(refs));
  for (size_t i = 1; i < refs.size(); ++i) {
    if (ShardKey(refs[i].layer, refs[i].row) <= ShardKey(refs[i - 1].layer, refs[i - 1].row)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ScanRows: layer ", refs[i].layer, " row ", refs[i].row, " follows layer ",
                       refs[i - 1].layer, " row ", refs[i - 1].row, ": refs must ascend"));
    }
  }
  // CuckooTable iterators sort every key of a file first: point reads it is.
  if (row_checksums_) return ReadRows(refs);
  const uint64_t first = ShardKey(refs.front().layer, refs.front().row);
  const uint64_t last = ShardKey(refs.back().layer, refs.back().row);
  char first_key[kShardKeyBytes], end_key[kShardKeyBytes];
  EncodeShardKey(first, first_key);
  EncodeShardKey(last + 1, end_key);
  const rocksdb::Slice end(end_key, sizeof(end_key));
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  ro.iterate_upper_bound = &end;
  // The bytes the refs span (keys and values with some slack per entry),
  // read ahead in one go; a scan of a few rows reads a block or two.
  size_t span_bytes = 0;
  for (const RowRef& r : refs) span_bytes += map_.row_bytes[r.layer] + 32;
  ro.readahead_size = std::clamp<size_t>(span_bytes, size_t{16} << 10, size_t{4} << 20);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, rows_cf_));
  it->Seek(rocksdb::Slice(first_key, sizeof(first_key)));
  for (const RowRef& r : refs) {
    const uint64_t want_key = ShardKey(r.layer, r.row);
    uint64_t key = 0;
    while (it->Valid() && it->key().size() == kShardKeyBytes &&
           (key = DecodeShardKey(it->key().data())) < want_key) {
      it->Next();
    }
    if (!it->Valid() || it->key().size() != kShardKeyBytes || key != want_key) {
      const rocksdb::Status st = it->status();
      return RowError(want_key,
                      st.ok() ? std::string("is missing from the store")
                              : absl::StrCat("cannot be read: ", st.ToString()),
                      st);
    }
    const uint32_t rb = map_.row_bytes[r.layer];
    if (it->value().size() != rb) {
      return RowError(want_key, absl::StrCat("holds ", it->value().size(), " bytes, expected ", rb),
                      rocksdb::Status::OK());
    }
    std::memcpy(r.dst, it->value().data(), rb);
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, double>> RowStoreImpl::Stats() const {
  std::vector<std::pair<std::string, double>> out;
  auto prop = [&](const char* name, const char* as) {
    uint64_t v = 0;  // summed over column families
    if (db_->GetAggregatedIntProperty(name, &v)) out.emplace_back(as, static_cast<double>(v));
  };
  prop("rocksdb.estimate-table-readers-mem", "rocksdb_index_memory_bytes");
  prop("rocksdb.total-sst-files-size", "rocksdb_sst_bytes");
  prop("rocksdb.estimate-num-keys", "rocksdb_keys");
  out.emplace_back("damaged_rows",
                   static_cast<double>(damaged_rows_.load(std::memory_order_relaxed)));
  out.emplace_back("expired_rows",
                   static_cast<double>(expired_rows_.load(std::memory_order_relaxed)));
  out.emplace_back("late_rows", static_cast<double>(late_rows_.load(std::memory_order_relaxed)));
  uint64_t zeroed = 0;
  for (const std::unique_ptr<MappingGuard>& g : db_guards_) zeroed += g->zeroed_pages();
  out.emplace_back("unreadable_pages", static_cast<double>(zeroed));
  if (uring_fs_ != nullptr) {
    const UringReadCounts rings = UringCounts(*uring_fs_);
    out.emplace_back("uring_reads", static_cast<double>(rings.reads));
    out.emplace_back("uring_submissions", static_cast<double>(rings.calls));
  }
  const rocksdb::Statistics* st = db_options_.statistics.get();
  if (st == nullptr) return out;
  auto ticker = [&](const char* as, std::initializer_list<uint32_t> tickers) {
    uint64_t v = 0;
    for (uint32_t t : tickers) v += st->getTickerCount(t);
    out.emplace_back(as, static_cast<double>(v));
  };
  ticker("rocksdb_multiget_calls", {rocksdb::NUMBER_MULTIGET_CALLS});
  ticker("rocksdb_multiget_keys", {rocksdb::NUMBER_MULTIGET_KEYS_READ});
  ticker("rocksdb_multiget_bytes", {rocksdb::NUMBER_MULTIGET_BYTES_READ});
  ticker("rocksdb_file_reads",
         {rocksdb::LAST_LEVEL_READ_COUNT, rocksdb::NON_LAST_LEVEL_READ_COUNT});
  ticker("rocksdb_file_read_bytes",
         {rocksdb::LAST_LEVEL_READ_BYTES, rocksdb::NON_LAST_LEVEL_READ_BYTES});
  ticker("rocksdb_block_checksums", {rocksdb::BLOCK_CHECKSUM_COMPUTE_COUNT});
  ticker("rocksdb_block_cache_hits", {rocksdb::BLOCK_CACHE_HIT});
  return out;
}

absl::Status Refuse(const std::string& dir, const std::string& what) {
  return absl::FailedPreconditionError(
      absl::StrCat("shard directory ", dir, ": ", what,
                   "; re-import it with engramctl import into a new directory"));
}

// Checks that the DB holds what shard.json and shard_map.json describe: its
// identity record, its entry count, and the first and last row of each layer.
absl::Status CheckStore(rocksdb::DB& db, std::span<rocksdb::ColumnFamilyHandle* const> cfs,
                        const std::string& dir, const ShardMap& map, const ShardInfo& info) {
  char kbuf[kShardKeyBytes];
  EncodeShardKey(kStoreIdentityKey, kbuf);
  std::string value;
  rocksdb::Status s = db.Get(rocksdb::ReadOptions(), rocksdb::Slice(kbuf, sizeof(kbuf)), &value);
  if (!s.ok()) {
    return Refuse(dir, absl::StrCat("rocksdb/ has no identity record (", s.ToString(), ")"));
  }
  absl::StatusOr<StoreIdentity> got = StoreIdentity::Decode(value);
  const StoreIdentity want = StoreIdentity::From(map, info);
  if (!got.ok() || !(*got == want)) {
    return Refuse(
        dir, absl::StrCat("rocksdb/ holds ", got.ok() ? got->Encode() : "an unreadable identity",
                          " but shard_map.json and shard.json describe ", want.Encode()));
  }
  uint64_t entries = 0, want_entries = 1;
  for (rocksdb::ColumnFamilyHandle* cf : cfs) {
    rocksdb::TablePropertiesCollection tables;
    if (s = db.GetPropertiesOfAllTables(cf, &tables); !s.ok()) {
      return Refuse(dir,
                    absl::StrCat("cannot read rocksdb/ table properties (", s.ToString(), ")"));
    }
    for (const auto& [file, props] : tables) entries += props->num_entries;
  }
  const bool cuckoo = info.tail_format == TailFormat::kCuckoo;
  for (const ShardInfo::Layer& l : info.layers) want_entries += l.rows_owned;
  if (entries != want_entries) {
    return Refuse(dir, absl::StrCat("rocksdb/ holds ", entries,
                                    " entries, shard.json accounts for ", want_entries));
  }
  for (uint32_t l = 0; l < info.layers.size(); ++l) {
    const uint64_t n = info.layers[l].rows_owned;
    if (n == 0) continue;
    for (uint64_t k : {uint64_t{0}, n - 1}) {
      const uint64_t row = info.shard_index + k * map.n_shards;
      EncodeShardKey(ShardKey(l, row), kbuf);
      s = db.Get(rocksdb::ReadOptions(), cfs.back(), rocksdb::Slice(kbuf, sizeof(kbuf)), &value);
      const size_t rb = map.row_bytes[l];
      if (s.IsCorruption() || s.IsIOError() ||
          (s.ok() && value.size() == rb + kRowChecksumBytes && cuckoo &&
           !CuckooValueIntact(ShardKey(l, row), value.data(), rb))) {
        return absl::DataLossError(absl::StrCat("shard directory ", dir, ": layer ", l, " row ",
                                                row, " is damaged (", s.ToString(),
                                                "); re-import it into a new directory"));
      }
      if (!s.ok() || value.size() != rb + (cuckoo ? kRowChecksumBytes : 0)) {
        return Refuse(dir, absl::StrCat("layer ", l, " row ", row,
                                        " is missing or has the wrong size (", s.ToString(), ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RowStore>> RowStore::Open(const std::string& shard_dir,
                                                         const RowStoreOptions& options) {
  auto unusable = [&](const absl::Status& s) {
    return absl::IsNotFound(s) ? s : Refuse(shard_dir, std::string(s.message()));
  };
  absl::StatusOr<ShardMap> map = ShardMap::Load(shard_dir + "/" + kShardMapFile);
  if (!map.ok()) return unusable(map.status());
  absl::StatusOr<ShardInfo> info = ShardInfo::Load(shard_dir + "/" + kShardInfoFile);
  if (!info.ok()) return unusable(info.status());
  if (auto s = info->Validate(*map); !s.ok()) {
    return Refuse(shard_dir, std::string(s.message()));
  }
  const bool cuckoo = info->tail_format == TailFormat::kCuckoo;
  if (cuckoo && options.direct_io) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard directory ", shard_dir,
                     " holds a cuckoo tail, which is read through "
                     "mmap only: drop --direct-io, or re-import it with --tail-format block"));
  }
  ShardDbTuning tuning;
  tuning.direct_io = options.direct_io;
  tuning.mmap_reads = options.mmap_reads || cuckoo;  // CuckooTables need mmap
  tuning.block_cache_bytes = options.block_cache_bytes;
  tuning.statistics = true;
  rocksdb::Options db_options = ShardDbOptions(tuning);
  // An O_DIRECT tail is read through rings when this process may make them
  // (shard/uring_file_system.h).
  std::shared_ptr<rocksdb::FileSystem> uring_fs;
  std::unique_ptr<rocksdb::Env> env;
  if (options.direct_io && options.uring_reads && UringAvailable()) {
    uring_fs = NewUringFileSystem(rocksdb::FileSystem::Default());
    env = rocksdb::NewCompositeEnv(uring_fs);
    db_options.env = env.get();
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions(db_options)}};
  if (cuckoo) descriptors.emplace_back(kRowsColumnFamily, CuckooRowsOptions(64 << 20));
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const std::string db_dir = shard_dir + "/" + kShardDbDir;
  const bool mmap_reads = db_options.allow_mmap_reads;
  const std::vector<FileMapping> before =
      mmap_reads ? FileMappingsIn(db_dir) : std::vector<FileMapping>();
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions(db_options), db_dir,
                                                   descriptors, &handles, &raw);
  if (!s.ok()) {
    // A damaged, truncated or unreadable table file (RocksDB reads every
    // file's footer at open) is lost data; anything else (a missing file
    // included) a directory to fix.
    const std::string msg = absl::StrCat("cannot open the shard store ", db_dir, " (",
                                         TailFormatName(info->tail_format),
                                         " tail, as shard.json says): ", s.ToString());
    if (s.IsCorruption() || (s.IsIOError() && !s.IsPathNotFound())) {
      return absl::DataLossError(absl::StrCat(
          msg,
          "; a table file is damaged, truncated or unreadable: re-import the shard into a "
          "new directory"));
    }
    return absl::FailedPreconditionError(msg);
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  auto close = [&] {
    for (rocksdb::ColumnFamilyHandle* h : handles) db->DestroyColumnFamilyHandle(h);
  };
  std::vector<std::unique_ptr<MappingGuard>> guards;
  if (mmap_reads) {
    absl::StatusOr<std::vector<std::unique_ptr<MappingGuard>>> g =
        GuardNewMappingsIn(db_dir, before);
    if (!g.ok()) {
      close();
      return g.status();
    }
    guards = *std::move(g);
  }
  if (auto st = CheckStore(*db, handles, shard_dir, *map, *info); !st.ok()) {
    guards.clear();
    close();
    return st;
  }
  const std::string access = absl::StrCat(
      "MultiGet on ", std::max(1, options.reader_threads), " reader threads, ",
      options.direct_io ? "O_DIRECT"
      : mmap_reads      ? "mmap"
                        : "buffered pread",
      uring_fs != nullptr                        ? " through io_uring"
      : options.direct_io && options.uring_reads ? " (no io_uring here: one read per thread)"
                                                 : "");
  return std::unique_ptr<RowStore>(
      new RowStoreImpl(shard_dir, std::move(env), std::move(uring_fs), std::move(db),
                       std::move(handles), std::move(guards), std::move(db_options),
                       *std::move(map), *std::move(info), options, std::move(access)));
}

}  // namespace engram
