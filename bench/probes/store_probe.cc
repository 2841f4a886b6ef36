// shard_store_probe: measures the effect of each RocksDB choice in
// ShardDbOptions, for docs/table-format.md.
//
//   shard_store_probe DIR [rows] [reads] [page-cache]
//
// Default mode (O_DIRECT): for each variant (the shipped options, then one choice changed at a
// time) it writes `rows` 264-byte synthetic rows with SstFileWriter, ingests them, reopens the DB
// read-only with O_DIRECT reads and no page cache help, and does `reads` random point lookups.
// Prints file and index sizes, the table readers' and block cache's memory, and per lookup: blocks
// read and their bytes (PerfContext), file bytes requested (IOStatsContext), bytes fetched from the
// device (/proc/self/io read_bytes, which sees O_DIRECT rounding) and latency.
//
// page-cache mode: the question of a tail that the page cache holds. For
// each table format (the block tail's tables read through mmap, a smaller
// block with an in-block hash index, PlainTable, CuckooTable with RocksDB's
// defaults and with the cuckoo tail's options) it writes the rows, reopens
// the DB read-only with mmap reads, touches every row once (so the file is
// resident and mapped), then times `reads` random rows in sorted MultiGet
// batches of 16, as RowStore reads a request's misses, checking a sample
// of values. Prints µs per row (RocksDB's read alone: the cuckoo tail's
// row checksum, ~20 ns a row, is not in it).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/gen/table_gen.h"
#include "common/util/file_util.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/iostats_context.h"
#include "rocksdb/perf_context.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "rocksdb/table_properties.h"
#include "shard/shard_format.h"

namespace engram {
namespace {

constexpr int kRowBytes = 264;

struct Variant {
  const char* name;
  void (*tweak)(rocksdb::Options&, rocksdb::BlockBasedTableOptions&);
};

const Variant kVariants[] = {
    {"shipped", [](rocksdb::Options&, rocksdb::BlockBasedTableOptions&) {}},
    {"no block_align",
     [](rocksdb::Options&, rocksdb::BlockBasedTableOptions& t) { t.block_align = false; }},
    {"partitioned index, pinned top level",
     [](rocksdb::Options&, rocksdb::BlockBasedTableOptions& t) {
       t.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
       t.cache_index_and_filter_blocks = true;
       t.pin_top_level_index_and_filter = true;
       t.no_block_cache = false;
       t.block_cache = rocksdb::NewLRUCache(size_t{4} << 20);
     }},
    {"index in a 4 MiB block cache",
     [](rocksdb::Options&, rocksdb::BlockBasedTableOptions& t) {
       t.cache_index_and_filter_blocks = true;
       t.no_block_cache = false;
       t.block_cache = rocksdb::NewLRUCache(size_t{4} << 20);
     }},
    {"bloom filter 10 bits/key",
     [](rocksdb::Options&, rocksdb::BlockBasedTableOptions& t) {
       t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
     }},
    {"lz4 compression",
     [](rocksdb::Options& o, rocksdb::BlockBasedTableOptions& t) {
       o.compression = rocksdb::kLZ4Compression;
       t.block_align = false;  // requires uncompressed blocks
     }},
    {"zstd compression",
     [](rocksdb::Options& o, rocksdb::BlockBasedTableOptions& t) {
       o.compression = rocksdb::kZSTD;
       t.block_align = false;
     }},
    {"block_size 16 KiB",
     [](rocksdb::Options&, rocksdb::BlockBasedTableOptions& t) { t.block_size = 16384; }},
};

// Bytes this process caused to be fetched from storage (/proc/self/io).
uint64_t StorageReadBytes() {
  absl::StatusOr<std::string> io = ReadFileToString("/proc/self/io");
  if (!io.ok()) return 0;
  const size_t at = io->find("\nread_bytes: ");
  return at == std::string::npos ? 0 : std::stoull(io->substr(at + 13));
}

bool Check(const rocksdb::Status& s, const char* what) {
  if (!s.ok()) std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  return s.ok();
}

rocksdb::Options VariantOptions(const Variant& v, bool direct) {
  rocksdb::Options o = ShardDbOptions({.direct_io = direct});
  rocksdb::BlockBasedTableOptions t =
      *o.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>();
  v.tweak(o, t);
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

// Writes `rows` synthetic rows into a new DB at `dir` with options `o`:
// through SstFileWriter and ingestion, or (for table formats that cannot be
// ingested) through the memtable and one flush.
bool WriteRows(const rocksdb::Options& o, const std::string& dir, uint64_t rows, bool ingest) {
  std::vector<uint8_t> buf(4096 * kRowBytes);
  auto for_rows = [&](auto&& put) {
    for (uint64_t first = 0; first < rows; first += 4096) {
      const uint64_t n = std::min<uint64_t>(4096, rows - first);
      GenerateRows(1, 0, first, n, 256, 32, buf.data());
      for (uint64_t i = 0; i < n; ++i) {
        char k[kShardKeyBytes];
        EncodeShardKey(ShardKey(0, first + i), k);
        if (!put(rocksdb::Slice(k, sizeof(k)),
                 rocksdb::Slice(reinterpret_cast<char*>(buf.data()) + i * kRowBytes, kRowBytes))) {
          return false;
        }
      }
    }
    return true;
  };
  rocksdb::Options wo = o;
  wo.create_if_missing = true;
  if (!ingest) wo.write_buffer_size = static_cast<size_t>(rows) * (kRowBytes + 64) + (64 << 20);
  rocksdb::DB* db = nullptr;
  if (!Check(rocksdb::DB::Open(wo, dir, &db), "open")) return false;
  std::unique_ptr<rocksdb::DB> owned(db);
  if (ingest) {
    const std::string sst = dir + ".sst";
    rocksdb::SstFileWriter w(rocksdb::EnvOptions(), o);
    if (!Check(w.Open(sst), "open sst")) return false;
    if (!for_rows([&](const rocksdb::Slice& k, const rocksdb::Slice& v) {
          return Check(w.Put(k, v), "put");
        }) ||
        !Check(w.Finish(), "finish")) {
      return false;
    }
    rocksdb::IngestExternalFileOptions move;
    move.move_files = true;
    return Check(db->IngestExternalFile({sst}, move), "ingest");
  }
  rocksdb::WriteOptions no_wal;
  no_wal.disableWAL = true;
  return for_rows([&](const rocksdb::Slice& k, const rocksdb::Slice& v) {
           return Check(db->Put(no_wal, k, v), "put");
         }) &&
         Check(db->Flush(rocksdb::FlushOptions()), "flush");
}

bool Probe(const Variant& v, const std::string& dir, uint64_t rows, int reads) {
  (void)RemoveTree(dir);
  if (!WriteRows(VariantOptions(v, false), dir, rows, /*ingest=*/true)) return false;
  rocksdb::Options o = VariantOptions(v, true);
  rocksdb::DB* raw = nullptr;
  if (!Check(rocksdb::DB::OpenForReadOnly(o, dir, &raw), "open ro")) return false;
  std::unique_ptr<rocksdb::DB> db(raw);
  uint64_t readers_mem = 0, sst_bytes = 0, cache_mem = 0;
  db->GetIntProperty("rocksdb.estimate-table-readers-mem", &readers_mem);
  db->GetIntProperty("rocksdb.total-sst-files-size", &sst_bytes);
  rocksdb::TablePropertiesCollection props;
  db->GetPropertiesOfAllTables(&props);
  uint64_t index_size = 0, filter_size = 0;
  for (const auto& [f, p] : props) {
    index_size += p->index_size;
    filter_size += p->filter_size;
  }
  std::mt19937_64 rng(7);
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableTimeExceptForMutex);
  rocksdb::get_perf_context()->Reset();
  rocksdb::get_iostats_context()->Reset();
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  rocksdb::PinnableSlice value;
  const uint64_t storage_before = StorageReadBytes();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reads; ++i) {
    char k[kShardKeyBytes];
    EncodeShardKey(ShardKey(0, rng() % rows), k);
    value.Reset();
    if (!Check(db->Get(ro, db->DefaultColumnFamily(), rocksdb::Slice(k, 8), &value), "get") ||
        value.size() != kRowBytes) {
      return false;
    }
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      reads;
  const double storage = 1.0 * (StorageReadBytes() - storage_before) / reads;
  db->GetIntProperty("rocksdb.block-cache-usage", &cache_mem);
  const rocksdb::PerfContext* pc = rocksdb::get_perf_context();
  const rocksdb::IOStatsContext* io = rocksdb::get_iostats_context();
  std::printf(
      "| %-36s | %7.1f | %5.0f | %6.2f | %6.2f | %7.2f | %7.2f | %5.2f | %7.0f | %7.0f | %7.0f | "
      "%5.1f |\n",
      v.name, sst_bytes / 1048576.0, 1.0 * sst_bytes / rows, index_size / 1048576.0,
      filter_size / 1048576.0, readers_mem / 1048576.0, cache_mem / 1048576.0,
      1.0 * pc->block_read_count / reads, 1.0 * pc->block_read_byte / reads,
      1.0 * io->bytes_read / reads, storage, us);
  db.reset();
  return RemoveTree(dir).ok();
}

// A table format for the page-cache mode. PlainTable and CuckooTable cannot
// be ingested (SstFileWriter writes neither the version property nor an
// iterator that seeks to the last key), so those are written through the
// memtable and one flush.
struct Format {
  const char* name;
  void (*tweak)(rocksdb::Options&);
  bool ingest;
};

const Format kFormats[] = {
    {"block tail (default): 4 KiB blocks, mmap", [](rocksdb::Options&) {}, true},
    {"block 1 KiB + in-block hash index, mmap",
     [](rocksdb::Options& o) {
       rocksdb::BlockBasedTableOptions t =
           *o.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>();
       t.block_size = 1024;
       t.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
       o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
     },
     true},
    {"PlainTable, mmap",
     [](rocksdb::Options& o) {
       rocksdb::PlainTableOptions p;
       p.user_key_len = kShardKeyBytes;
       p.bloom_bits_per_key = 0;
       p.index_sparseness = 1;
       o.table_factory.reset(rocksdb::NewPlainTableFactory(p));
       o.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(kShardKeyBytes));
     },
     false},
    {"CuckooTable, RocksDB's defaults, mmap",
     [](rocksdb::Options& o) {
       o.table_factory.reset(rocksdb::NewCuckooTableFactory(rocksdb::CuckooTableOptions()));
     },
     false},
    {"shipped cuckoo tail (CuckooRowsOptions)",
     [](rocksdb::Options& o) {
       const rocksdb::ColumnFamilyOptions rows = CuckooRowsOptions(64 << 20);
       o.table_factory = rows.table_factory;
     },
     false},
};

bool ProbePageCache(const Format& f, const std::string& dir, uint64_t rows, int reads) {
  (void)RemoveTree(dir);
  rocksdb::Options o = ShardDbOptions({.mmap_reads = true});
  f.tweak(o);
  if (!WriteRows(o, dir, rows, f.ingest)) return false;
  rocksdb::DB* raw = nullptr;
  if (!Check(rocksdb::DB::OpenForReadOnly(o, dir, &raw), "open ro")) return false;
  std::unique_ptr<rocksdb::DB> db(raw);
  uint64_t sst_bytes = 0;
  db->GetIntProperty("rocksdb.total-sst-files-size", &sst_bytes);
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  constexpr size_t kBatch = 16;
  std::vector<uint64_t> ids(kBatch);
  std::vector<char> key_bytes(kBatch * kShardKeyBytes);
  std::vector<rocksdb::Slice> keys(kBatch);
  std::vector<rocksdb::PinnableSlice> values(kBatch);
  std::vector<rocksdb::Status> statuses(kBatch);
  std::vector<uint8_t> want(kRowBytes), out(kRowBytes);
  // One batch: reads ids, checks each value against the generator.
  auto batch = [&](bool check) {
    for (size_t i = 0; i < kBatch; ++i) {
      EncodeShardKey(ShardKey(0, ids[i]), &key_bytes[i * kShardKeyBytes]);
      keys[i] = rocksdb::Slice(&key_bytes[i * kShardKeyBytes], kShardKeyBytes);
    }
    db->MultiGet(ro, db->DefaultColumnFamily(), kBatch, keys.data(), values.data(), statuses.data(),
                 /*sorted_input=*/true);
    bool ok = true;
    for (size_t i = 0; i < kBatch; ++i) {
      ok = ok && Check(statuses[i], "multiget") && values[i].size() == kRowBytes;
      if (ok) std::memcpy(out.data(), values[i].data(), kRowBytes);
      if (ok && check) {
        GenerateRows(1, 0, ids[i], 1, 256, 32, want.data());
        ok = std::memcmp(out.data(), want.data(), kRowBytes) == 0;
      }
      values[i].Reset();
    }
    return ok;
  };
  for (uint64_t first = 0; first < rows; first += kBatch) {  // make every page resident
    for (size_t i = 0; i < kBatch; ++i) ids[i] = std::min(first + i, rows - 1);
    if (!batch(first % 4096 == 0)) return false;
  }
  std::mt19937_64 rng(7);
  const int batches = std::max(1, reads / static_cast<int>(kBatch));
  double seconds = 0;
  for (int b = 0; b < batches; ++b) {
    for (uint64_t& id : ids) id = rng() % rows;
    std::sort(ids.begin(), ids.end());
    const auto start = std::chrono::steady_clock::now();
    const bool ok = batch(false);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!ok || (b % 64 == 0 && !batch(true))) return false;
  }
  std::printf("| %-40s | %7.1f | %6.2f |\n", f.name, sst_bytes / 1048576.0,
              seconds * 1e6 / (batches * kBatch));
  db.reset();
  return RemoveTree(dir).ok();
}

}  // namespace
}  // namespace engram

int main(int argc, char** argv) {
  const bool page_cache = argc > 4 && std::string(argv[4]) == "page-cache";
  if (argc < 2 || (argc > 4 && !page_cache)) {
    std::fprintf(stderr, "usage: shard_store_probe DIR [rows] [reads] [page-cache]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const uint64_t rows = argc > 2 ? std::stoull(argv[2]) : 1000000;
  const int reads = argc > 3 ? std::stoi(argv[3]) : 20000;
  if (page_cache) {
    std::printf(
        "%llu rows of 264 bytes, %d random rows in sorted MultiGets of 16, "
        "mmap, every page resident\n",
        static_cast<unsigned long long>(rows), reads);
    std::printf("| %-40s | %7s | %6s |\n", "format", "SST MiB", "us/row");
    for (const engram::Format& f : engram::kFormats) {
      if (!engram::ProbePageCache(f, dir + "/probe-db", rows, reads)) return 1;
    }
    return 0;
  }
  std::printf("%llu rows of 264 bytes, %d random point reads, O_DIRECT, cold\n",
              static_cast<unsigned long long>(rows), reads);
  std::printf("| %-36s | %7s | %5s | %6s | %6s | %7s | %7s | %5s | %7s | %7s | %7s | %5s |\n",
              "variant", "SST MiB", "B/row", "idx MiB", "flt MiB", "rdr MiB", "bc MiB", "blk/rd",
              "blkB/rd", "ioB/rd", "devB/rd", "us/rd");
  for (const engram::Variant& v : engram::kVariants) {
    if (!engram::Probe(v, dir + "/probe-db", rows, reads)) return 1;
  }
  return 0;
}
