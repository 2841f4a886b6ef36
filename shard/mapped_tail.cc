#include "shard/mapped_tail.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rocksdb/db.h"
#include "shard/shard_format.h"

namespace engram {
namespace {

bool Holds(const FileMapping& e, const char* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a >= e.start && a + n <= e.end;
}

// The entry holding [p, p + n), or null.
const FileMapping* Containing(const std::vector<FileMapping>& maps, const char* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = std::upper_bound(maps.begin(), maps.end(), a,
                             [](uintptr_t v, const FileMapping& e) { return v < e.start; });
  if (it == maps.begin()) return nullptr;
  --it;
  return Holds(*it, p, n) ? &*it : nullptr;
}

absl::Status Unaddressable(const std::string& what) {
  return absl::FailedPreconditionError(
      absl::StrCat("the cuckoo tail cannot be read through its own mapping: ", what));
}

}  // namespace

// All of `path`, read-only, its page tables filled now (MAP_POPULATE), so
// that reads take no page faults while the page cache holds the file; and
// guarded, so that a page lost later reads as zeros (shard/mapping_guard.h).
// Refused when the file's size is not `want_size`, what RocksDB's manifest
// recorded for it: a truncated (or replaced) file is not mapped.
absl::StatusOr<MappedTail::Mapping> MappedTail::MapFile(const std::string& path,
                                                        uint64_t want_size) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    return Unaddressable(absl::StrCat(path, ": ", std::strerror(err)));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size != want_size) {
    close(fd);
    return Unaddressable(absl::StrCat(path, " holds ", size, " bytes, RocksDB's manifest says ",
                                      want_size, " (truncated or replaced)"));
  }
  void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return Unaddressable(absl::StrCat("mmap ", path, ": ", std::strerror(err)));
  }
  absl::StatusOr<std::unique_ptr<MappingGuard>> guard = MappingGuard::Register(base, size, path);
  if (!guard.ok()) {
    munmap(base, size);
    return Unaddressable(std::string(guard.status().message()));
  }
  return Mapping{base, size, *std::move(guard)};
}

MappedTail::MappedTail(const ShardMap& map, uint32_t shard_index, std::string name)
    : shards_(map.n_shards), name_(std::move(name)), row_bytes_(map.row_bytes) {
  addr_.resize(map.layer_rows.size());
  for (uint32_t l = 0; l < addr_.size(); ++l) {
    addr_[l].assign(map.RowsOnShard(l, shard_index), nullptr);
  }
}

MappedTail::~MappedTail() {
  for (Mapping& m : mappings_) {
    m.guard.reset();  // before the range goes
    munmap(m.base, m.size);
  }
}

uint64_t MappedTail::zeroed_pages() const {
  uint64_t n = 0;
  for (const Mapping& m : mappings_) n += m.guard->zeroed_pages();
  return n;
}

std::string MappedTail::DescribeFaults() const {
  std::string out;
  for (const Mapping& m : mappings_) {
    const std::string d = m.guard->Describe();
    if (!d.empty()) absl::StrAppend(&out, out.empty() ? "" : "; ", d);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<MappedTail>> MappedTail::Build(
    rocksdb::DB& db, rocksdb::ColumnFamilyHandle* rows, const std::string& db_dir,
    const ShardMap& map, uint32_t shard_index, std::string name) {
  std::error_code ec;
  const std::string dir = std::filesystem::canonical(db_dir, ec).string();
  if (ec) return Unaddressable(absl::StrCat(db_dir, ": ", ec.message()));
  std::unique_ptr<MappedTail> tail(new MappedTail(map, shard_index, std::move(name)));
  // What each table file should hold, by file name.
  absl::flat_hash_map<std::string, uint64_t> file_sizes;
  {
    std::vector<rocksdb::LiveFileMetaData> files;
    db.GetLiveFilesMetaData(&files);
    for (const rocksdb::LiveFileMetaData& f : files) {
      file_sizes[std::filesystem::path(f.relative_filename).filename().string()] = f.size;
    }
  }

  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(ro, rows));
  it->SeekToFirst();
  // RocksDB maps every table file at open (max_open_files = -1), so one
  // snapshot of the mappings covers every value the scan meets.
  const std::vector<FileMapping> maps = FileMappingsIn(dir);
  absl::flat_hash_map<std::string, size_t> ours;  // path -> mappings_ index
  const FileMapping* last = nullptr;
  for (; it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key(), v = it->value();
    if (k.size() != kShardKeyBytes) {
      return Unaddressable(absl::StrCat("a key of ", k.size(), " bytes"));
    }
    const uint64_t key = DecodeShardKey(k.data());
    const uint32_t layer = ShardKeyLayer(key);
    const uint64_t row = ShardKeyRow(key);
    uint64_t slot = 0, owner = 0;
    tail->shards_.DivMod(row, &slot, &owner);
    if (layer >= tail->addr_.size() || owner != shard_index || slot >= tail->addr_[layer].size()) {
      return Unaddressable(
          absl::StrCat("layer ", layer, " row ", row, " is not a row of this shard"));
    }
    const size_t want = tail->row_bytes_[layer] + kRowChecksumBytes;
    if (v.size() != want) {
      return Unaddressable(absl::StrCat("layer ", layer, " row ", row, " holds ", v.size(),
                                        " bytes, expected ", want));
    }
    if (tail->addr_[layer][slot] != nullptr) {
      return Unaddressable(absl::StrCat("layer ", layer, " row ", row, " appears twice"));
    }
    const FileMapping* e = last != nullptr && Holds(*last, v.data(), v.size())
                               ? last
                               : Containing(maps, v.data(), v.size());
    if (e == nullptr || !e->path.ends_with(".sst")) {
      return Unaddressable(absl::StrCat("the value of layer ", layer, " row ", row,
                                        " is not a slice of a mapped table file"));
    }
    last = e;
    auto [pos, fresh] = ours.try_emplace(e->path, tail->mappings_.size());
    if (fresh) {
      const auto size = file_sizes.find(std::filesystem::path(e->path).filename().string());
      if (size == file_sizes.end()) {
        return Unaddressable(absl::StrCat(e->path, " is not a live table file of the DB"));
      }
      ASSIGN_OR_RETURN(Mapping m, MapFile(e->path, size->second));
      tail->mapped_bytes_ += m.size;
      tail->mappings_.push_back(std::move(m));
    }
    const Mapping& m = tail->mappings_[pos->second];
    const uint64_t at = e->offset + (reinterpret_cast<uintptr_t>(v.data()) - e->start);
    if (at + want > m.size) {
      return Unaddressable(absl::StrCat(e->path, " is shorter than RocksDB's mapping of it"));
    }
    const char* ptr = static_cast<const char*>(m.base) + at;
    if (std::memcmp(ptr, v.data(), want) != 0) {
      return Unaddressable(absl::StrCat("layer ", layer, " row ", row, " differs in ", e->path,
                                        " from what RocksDB serves"));
    }
    tail->addr_[layer][slot] = ptr;
    ++tail->rows_;
  }
  if (!it->status().ok()) {
    return Unaddressable(absl::StrCat("scanning the rows: ", it->status().ToString()));
  }
  for (uint32_t l = 0; l < tail->addr_.size(); ++l) {
    const std::vector<const char*>& a = tail->addr_[l];
    const auto missing = std::find(a.begin(), a.end(), nullptr);
    if (missing != a.end()) {
      return Unaddressable(absl::StrCat(
          "layer ", l, " row ", shard_index + (missing - a.begin()) * map.n_shards, " is missing"));
    }
  }
  return tail;
}

absl::Status MappedTail::Read(std::span<const RowRef> refs, uint64_t* damaged) const {
  // A row is a cache (and often TLB) miss, and so is its address. Each
  // group of rows is read in passes that keep many misses in flight (a
  // checksum between two copies would fill the CPU's window and serialise
  // them): the addresses, then the copies, then each row's checksum while
  // it is still in cache. (The source is checked, not the copy: refs may
  // share a destination.)
  constexpr size_t kGroup = 64;
  const char* src[kGroup];
  absl::Status first_error;
  for (size_t first = 0; first < refs.size(); first += kGroup) {
    const std::span<const RowRef> group =
        refs.subspan(first, std::min(kGroup, refs.size() - first));
    for (size_t i = 0; i < group.size(); ++i) {
      uint64_t slot, owner;
      shards_.DivMod(group[i].row, &slot, &owner);
      src[i] = addr_[group[i].layer][slot];
    }
    for (size_t i = 0; i < group.size(); ++i) {
      std::memcpy(group[i].dst, src[i], row_bytes_[group[i].layer]);
    }
    for (size_t i = 0; i < group.size(); ++i) {
      const RowRef& r = group[i];
      const uint32_t rb = row_bytes_[r.layer];
      if (CuckooValueIntact(ShardKey(r.layer, r.row), src[i], rb)) [[likely]] {
        continue;
      }
      // Every damaged row is counted; the first is named.
      ++*damaged;
      if (!first_error.ok()) continue;
      const std::string faults = DescribeFaults();
      first_error = absl::DataLossError(absl::StrCat(name_, ": layer ", r.layer, " row ", r.row,
                                                     " ", kRowChecksumFailure,
                                                     faults.empty() ? "" : "; ", faults));
    }
  }
  return first_error;
}

}  // namespace engram
