#include "common/format/hot_profile.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/util/file_util.h"
#include "common/util/status_macros.h"

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
  for (size_t i = sizeof(T); i > 0; --i) v = v << 8 | static_cast<uint8_t>(p[i - 1]);
  return v;
}

}  // namespace

bool HotProfileOrder(const HotProfileEntry& a, const HotProfileEntry& b) {
  if (a.count != b.count) return a.count > b.count;
  if (a.layer != b.layer) return a.layer < b.layer;
  return a.row < b.row;
}

std::string EncodeHotProfile(const std::vector<HotProfileEntry>& entries) {
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
  return buf;
}

absl::Status WriteHotProfile(const std::string& path, std::vector<HotProfileEntry> entries) {
  std::sort(entries.begin(), entries.end(), HotProfileOrder);
  return WriteFileAtomically(path, EncodeHotProfile(entries));
}

absl::StatusOr<std::vector<HotProfileEntry>> ParseHotProfile(std::string_view data,
                                                             const ShardMap& map, uint32_t shard,
                                                             std::string_view what_sv) {
  const absl::string_view what(what_sv.data(), what_sv.size());
  if (absl::Status s = map.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hot profile ", what, ": checked against an invalid ", s.message()));
  }
  auto corrupt = [&](const std::string& problem) {
    return absl::DataLossError(
        absl::StrCat("hot profile ", what, ": ", problem,
                     "; re-run engramctl import --profile-trace into a new directory"));
  };
  if (data.size() < kHeaderBytes || std::memcmp(data.data(), kHotProfileMagic, 4) != 0) {
    return corrupt("not a hot profile (bad magic or too short)");
  }
  const uint32_t version = Take<uint32_t>(data.data() + 4);
  if (version != kHotProfileVersion) {
    return corrupt(absl::StrCat("version ", version, " is not supported"));
  }
  const uint64_t n = Take<uint64_t>(data.data() + 8);
  if (n > (data.size() - kHeaderBytes) / kEntryBytes ||
      data.size() != kHeaderBytes + n * kEntryBytes) {
    return corrupt(absl::StrCat("header says ", n, " entries, file has ", data.size(), " bytes"));
  }
  std::vector<HotProfileEntry> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    const char* p = data.data() + kHeaderBytes + i * kEntryBytes;
    HotProfileEntry& e = out[i];
    e = {Take<uint32_t>(p), Take<uint64_t>(p + 4), Take<uint64_t>(p + 12)};
    if (e.layer >= map.layer_rows.size() || e.row >= map.layer_rows[e.layer] ||
        map.ShardOf(e.row) != shard) {
      return corrupt(absl::StrCat("entry ", i, " (layer ", e.layer, " row ", e.row,
                                  ") is not a row of shard ", shard));
    }
    if (i > 0 && !HotProfileOrder(out[i - 1], e)) {
      return corrupt(absl::StrCat("entry ", i, " is out of order"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<HotProfileEntry>> ReadHotProfile(const std::string& path,
                                                            const ShardMap& map, uint32_t shard) {
  ASSIGN_OR_RETURN(std::string data, ReadFileToString(path));
  return ParseHotProfile(data, map, shard, path);
}

}  // namespace engram
