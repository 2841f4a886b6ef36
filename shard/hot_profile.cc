#include "shard/hot_profile.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/engram_hash.h"
#include "shard/file_util.h"

namespace engram {
namespace {

constexpr size_t kHeaderBytes = 16;
constexpr size_t kEntryBytes = 20;

template <typename T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i, v >>= 8) b[i] = static_cast<char>(v & 0xff);
  out->append(b, sizeof(T));
}

template <typename T>
T Take(const char* p) {
  T v = 0;
  for (size_t i = sizeof(T); i-- > 0;) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

bool FileOrder(const HotProfileEntry& a, const HotProfileEntry& b) {
  if (a.count != b.count) return a.count > b.count;
  if (a.layer != b.layer) return a.layer < b.layer;
  return a.row < b.row;
}

}  // namespace

absl::StatusOr<std::vector<HotProfileEntry>> ProfileTrace(
    const std::string& trace_path, const HashLayout& layout,
    const ShardMap& map, uint32_t shard) {
  absl::StatusOr<std::unique_ptr<NgramHasher>> hasher = NgramHasher::Create(layout);
  if (!hasher.ok()) return hasher.status();
  std::ifstream in(trace_path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open profile trace ", trace_path));
  }
  const int n_layers = (*hasher)->n_layers();
  const int n_cols = (*hasher)->n_cols();
  absl::flat_hash_map<uint64_t, uint64_t> counts;
  std::vector<int64_t> ids;
  std::vector<RowId> rows;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    ids.clear();
    for (absl::string_view tok :
         absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty())) {
      int64_t id = 0;
      if (!absl::SimpleAtoi(tok, &id) || id < 0 || id >= layout.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            trace_path, ":", line_no, ": token '", tok,
            "' is not a token id in [0, ", layout.vocab_size, ")"));
      }
      ids.push_back(id);
    }
    if (ids.empty()) continue;
    SequenceState seq(std::max<int64_t>(SequenceState::kDefaultCapacity,
                                        static_cast<int64_t>(ids.size())));
    rows.resize(ids.size() * n_layers * n_cols);
    if (auto s = (*hasher)->Hash(seq, 0, ids, {}, rows.data()); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(trace_path, ":", line_no, ": ", s.message()));
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const uint32_t layer = static_cast<uint32_t>((i / n_cols) % n_layers);
      if (map.ShardOf(rows[i]) == shard) ++counts[ShardKey(layer, rows[i])];
    }
  }
  if (in.bad()) {
    return absl::InternalError(absl::StrCat("cannot read ", trace_path));
  }
  std::vector<HotProfileEntry> out;
  out.reserve(counts.size());
  for (const auto& [key, count] : counts) {
    out.push_back({ShardKeyLayer(key), ShardKeyRow(key), count});
  }
  std::sort(out.begin(), out.end(), FileOrder);
  return out;
}

absl::Status WriteHotProfile(const std::string& path,
                             std::vector<HotProfileEntry> entries) {
  std::sort(entries.begin(), entries.end(), FileOrder);
  std::string buf;
  buf.reserve(kHeaderBytes + entries.size() * kEntryBytes);
  buf.append(kHotProfileMagic, 4);
  Put<uint32_t>(&buf, kHotProfileVersion);
  Put<uint64_t>(&buf, entries.size());
  for (const HotProfileEntry& e : entries) {
    Put<uint32_t>(&buf, e.layer);
    Put<uint64_t>(&buf, e.row);
    Put<uint64_t>(&buf, e.count);
  }
  return WriteFileAtomically(path, buf);
}

absl::StatusOr<std::vector<HotProfileEntry>> ReadHotProfile(
    const std::string& path, const ShardMap& map, uint32_t shard) {
  absl::StatusOr<std::string> data = ReadFileToString(path);
  if (!data.ok()) return data.status();
  auto corrupt = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(
        "hot profile ", path, ": ", what,
        "; re-run engramctl import --profile-trace into a new directory"));
  };
  if (data->size() < kHeaderBytes ||
      std::memcmp(data->data(), kHotProfileMagic, 4) != 0) {
    return corrupt("not a hot profile (bad magic or too short)");
  }
  const uint32_t version = Take<uint32_t>(data->data() + 4);
  if (version != kHotProfileVersion) {
    return corrupt(absl::StrCat("version ", version, " is not supported"));
  }
  const uint64_t n = Take<uint64_t>(data->data() + 8);
  if (n > (data->size() - kHeaderBytes) / kEntryBytes ||
      data->size() != kHeaderBytes + n * kEntryBytes) {
    return corrupt(absl::StrCat("header says ", n, " entries, file has ",
                                data->size(), " bytes"));
  }
  std::vector<HotProfileEntry> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    const char* p = data->data() + kHeaderBytes + i * kEntryBytes;
    HotProfileEntry& e = out[i];
    e = {Take<uint32_t>(p), Take<uint64_t>(p + 4), Take<uint64_t>(p + 12)};
    if (e.layer >= map.layer_rows.size() || e.row >= map.layer_rows[e.layer] ||
        map.ShardOf(e.row) != shard) {
      return corrupt(absl::StrCat("entry ", i, " (layer ", e.layer, " row ",
                                  e.row, ") is not a row of shard ", shard));
    }
    if (i > 0 && !FileOrder(out[i - 1], e)) {
      return corrupt(absl::StrCat("entry ", i, " is out of order"));
    }
  }
  return out;
}

}  // namespace engram
