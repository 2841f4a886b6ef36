// shard_store_probe: measures the effect of each RocksDB choice in
// ShardDbOptions, for docs/table-format.md.
//
//   shard_store_probe DIR [rows] [reads]
//
// For each variant (the shipped options, then one choice changed at a time)
// it writes `rows` 264-byte synthetic rows with SstFileWriter, ingests them,
// reopens the DB read-only with O_DIRECT reads and no page cache help, and
// does `reads` random point lookups. Prints file and index sizes, the table
// readers' and block cache's memory, and per lookup: blocks read and their
// bytes (PerfContext), file bytes requested (IOStatsContext), bytes fetched
// from the device (/proc/self/io read_bytes, which sees O_DIRECT rounding)
// and latency.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/table_gen.h"
#include "rocksdb/db.h"
#include "rocksdb/cache.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/iostats_context.h"
#include "rocksdb/perf_context.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "rocksdb/table_properties.h"
#include "shard/file_util.h"
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

bool Probe(const Variant& v, const std::string& dir, uint64_t rows, int reads) {
  (void)RemoveTree(dir);
  const std::string sst = dir + ".sst";
  {
    rocksdb::Options o = VariantOptions(v, false);
    rocksdb::SstFileWriter w(rocksdb::EnvOptions(), o);
    if (!Check(w.Open(sst), "open sst")) return false;
    std::vector<uint8_t> buf(4096 * kRowBytes);
    for (uint64_t first = 0; first < rows; first += 4096) {
      const uint64_t n = std::min<uint64_t>(4096, rows - first);
      GenerateRows(1, 0, first, n, 256, 32, buf.data());
      for (uint64_t i = 0; i < n; ++i) {
        char k[kShardKeyBytes];
        EncodeShardKey(ShardKey(0, first + i), k);
        if (!Check(w.Put(rocksdb::Slice(k, 8),
                         rocksdb::Slice(reinterpret_cast<char*>(buf.data()) + i * kRowBytes,
                                        kRowBytes)),
                   "put")) {
          return false;
        }
      }
    }
    if (!Check(w.Finish(), "finish")) return false;
    o.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    if (!Check(rocksdb::DB::Open(o, dir, &db), "open")) return false;
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;
    const bool ok = Check(db->IngestExternalFile({sst}, ingest), "ingest");
    db->Close();
    delete db;
    if (!ok) return false;
  }
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
    if (!Check(db->Get(ro, db->DefaultColumnFamily(), rocksdb::Slice(k, 8), &value),
               "get") ||
        value.size() != kRowBytes) {
      return false;
    }
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
          .count() / reads;
  const double storage = 1.0 * (StorageReadBytes() - storage_before) / reads;
  db->GetIntProperty("rocksdb.block-cache-usage", &cache_mem);
  const rocksdb::PerfContext* pc = rocksdb::get_perf_context();
  const rocksdb::IOStatsContext* io = rocksdb::get_iostats_context();
  std::printf("| %-36s | %7.1f | %5.0f | %6.2f | %6.2f | %7.2f | %7.2f | %5.2f | %7.0f | %7.0f | %7.0f | %5.1f |\n",
              v.name, sst_bytes / 1048576.0, 1.0 * sst_bytes / rows,
              index_size / 1048576.0, filter_size / 1048576.0,
              readers_mem / 1048576.0, cache_mem / 1048576.0,
              1.0 * pc->block_read_count / reads, 1.0 * pc->block_read_byte / reads,
              1.0 * io->bytes_read / reads, storage, us);
  db.reset();
  return RemoveTree(dir).ok();
}

}  // namespace
}  // namespace engram

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: shard_store_probe DIR [rows] [reads]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const uint64_t rows = argc > 2 ? std::stoull(argv[2]) : 1000000;
  const int reads = argc > 3 ? std::stoi(argv[3]) : 20000;
  std::printf("%llu rows of 264 bytes, %d random point reads, O_DIRECT, cold\n",
              static_cast<unsigned long long>(rows), reads);
  std::printf("| %-36s | %7s | %5s | %6s | %6s | %7s | %7s | %5s | %7s | %7s | %7s | %5s |\n",
              "variant", "SST MiB", "B/row", "idx MiB", "flt MiB", "rdr MiB",
              "bc MiB", "blk/rd", "blkB/rd", "ioB/rd", "devB/rd", "us/rd");
  for (const engram::Variant& v : engram::kVariants) {
    if (!engram::Probe(v, dir + "/probe-db", rows, reads)) return 1;
  }
  return 0;
}
