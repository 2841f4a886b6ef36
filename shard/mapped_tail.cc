#include "shard/mapped_tail.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rocksdb/db.h"
#include "shard/shard_format.h"

namespace engram {
namespace {

// One line of /proc/self/maps that maps a file.
struct MapsEntry {
  uintptr_t start = 0, end = 0;
  uint64_t offset = 0;  // of `start` in the file
  std::string path;
};

// The file mappings of this process whose path lies in `dir`, by start.
std::vector<MapsEntry> FileMappingsIn(const std::string& dir) {
  std::vector<MapsEntry> out;
  std::ifstream in("/proc/self/maps");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string range, perms, offset, dev, inode, path;
    f >> range >> perms >> offset >> dev >> inode;
    std::getline(f >> std::ws, path);
    if (path.size() <= dir.size() || path.compare(0, dir.size(), dir) != 0 ||
        path[dir.size()] != '/') {
      continue;
    }
    MapsEntry e;
    uint64_t start = 0, end = 0;
    const size_t dash = range.find('-');
    if (dash == std::string::npos ||
        !absl::SimpleHexAtoi(absl::string_view(range).substr(0, dash), &start) ||
        !absl::SimpleHexAtoi(absl::string_view(range).substr(dash + 1), &end) ||
        !absl::SimpleHexAtoi(offset, &e.offset)) {
      continue;  // not a line of the documented form: not used
    }
    e.start = static_cast<uintptr_t>(start);
    e.end = static_cast<uintptr_t>(end);
    e.path = std::move(path);
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(),
            [](const MapsEntry& a, const MapsEntry& b) { return a.start < b.start; });
  return out;
}

bool Holds(const MapsEntry& e, const char* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a >= e.start && a + n <= e.end;
}

// The entry holding [p, p + n), or null.
const MapsEntry* Containing(const std::vector<MapsEntry>& maps, const char* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = std::upper_bound(maps.begin(), maps.end(), a,
                             [](uintptr_t v, const MapsEntry& e) { return v < e.start; });
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
// that reads take no page faults while the page cache holds the file.
absl::StatusOr<MappedTail::Mapping> MappedTail::MapFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    return Unaddressable(absl::StrCat(path, ": ", std::strerror(err)));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return Unaddressable(absl::StrCat("mmap ", path, ": ", std::strerror(err)));
  }
  return Mapping{base, size};
}

MappedTail::MappedTail(const ShardMap& map, uint32_t shard_index)
    : shards_(map.n_shards), shard_index_(shard_index), row_bytes_(map.row_bytes) {
  addr_.resize(map.layer_rows.size());
  for (uint32_t l = 0; l < addr_.size(); ++l) {
    addr_[l].assign(map.RowsOnShard(l, shard_index), nullptr);
  }
}

MappedTail::~MappedTail() {
  for (const Mapping& m : mappings_) munmap(m.base, m.size);
}

absl::StatusOr<std::unique_ptr<MappedTail>> MappedTail::Build(rocksdb::DB& db,
                                                              rocksdb::ColumnFamilyHandle* rows,
                                                              const std::string& db_dir,
                                                              const ShardMap& map,
                                                              uint32_t shard_index) {
  std::error_code ec;
  const std::string dir = std::filesystem::canonical(db_dir, ec).string();
  if (ec) return Unaddressable(absl::StrCat(db_dir, ": ", ec.message()));
  std::unique_ptr<MappedTail> tail(new MappedTail(map, shard_index));

  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(ro, rows));
  it->SeekToFirst();
  // RocksDB maps every table file at open (max_open_files = -1), so one
  // snapshot of the mappings covers every value the scan meets.
  const std::vector<MapsEntry> maps = FileMappingsIn(dir);
  absl::flat_hash_map<std::string, size_t> ours;  // path -> mappings_ index
  const MapsEntry* last = nullptr;
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
    const MapsEntry* e = last != nullptr && Holds(*last, v.data(), v.size())
                             ? last
                             : Containing(maps, v.data(), v.size());
    if (e == nullptr || !e->path.ends_with(".sst")) {
      return Unaddressable(absl::StrCat("the value of layer ", layer, " row ", row,
                                        " is not a slice of a mapped table file"));
    }
    last = e;
    auto [pos, fresh] = ours.try_emplace(e->path, tail->mappings_.size());
    if (fresh) {
      ASSIGN_OR_RETURN(Mapping m, MapFile(e->path));
      tail->mappings_.push_back(m);
      tail->mapped_bytes_ += m.size;
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

absl::Status MappedTail::Read(std::span<const RowRef> refs) const {
  // A row is a cache (and often TLB) miss, and so is its address. Each
  // group of rows is read in passes that keep many misses in flight (a
  // checksum between two copies would fill the CPU's window and serialise
  // them): the addresses, then the copies, then each row's checksum while
  // it is still in cache. (The source is checked, not the copy: refs may
  // share a destination.)
  constexpr size_t kGroup = 64;
  const char* src[kGroup];
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
      if (!CuckooValueIntact(ShardKey(r.layer, r.row), src[i], rb)) {
        return absl::DataLossError(absl::StrCat("shard ", shard_index_, ": layer ", r.layer,
                                                " row ", r.row, " ", kRowChecksumFailure));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace engram
