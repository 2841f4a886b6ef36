#include "common/format/hot_profile.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

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

namespace {

// Checks a profile's bytes as they arrive, header first, then entry by entry
// (row of the shard, file order), keeping the first `keep` entries. Memory is
// the kept entries and one partial entry, whatever the file's length.
class ProfileParser {
 public:
  ProfileParser(const ShardMap& map, uint32_t shard, absl::string_view what, uint64_t file_bytes,
                uint64_t keep)
      : map_(map), shard_(shard), what_(what), file_bytes_(file_bytes), keep_(keep) {}

  absl::Status Start() {
    if (absl::Status s = map_.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hot profile ", what_, ": checked against an invalid ", s.message()));
    }
    if (file_bytes_ < kHeaderBytes) return Corrupt("not a hot profile (bad magic or too short)");
    return absl::OkStatus();
  }

  absl::Status Feed(std::string_view data) {
    while (!data.empty()) {
      const size_t want = (seen_ < kHeaderBytes ? kHeaderBytes : kEntryBytes) - pending_len_;
      if (pending_len_ == 0 && data.size() >= want) {  // a whole record in place
        RETURN_IF_ERROR(Record(data.data()));
        data.remove_prefix(want);
        continue;
      }
      const size_t n = std::min(want, data.size());
      std::memcpy(pending_ + pending_len_, data.data(), n);
      pending_len_ += n;
      data.remove_prefix(n);
      if (n == want) {
        pending_len_ = 0;
        RETURN_IF_ERROR(Record(pending_));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<HotProfileEntry>> Finish() {
    if (seen_ < kHeaderBytes || pending_len_ != 0 || next_ != count_) {
      return Corrupt(absl::StrCat("header says ", count_, " entries, file has ",
                                  seen_ + pending_len_, " bytes"));
    }
    return std::move(out_);
  }

 private:
  absl::Status Corrupt(absl::string_view problem) const {
    return absl::DataLossError(
        absl::StrCat("hot profile ", what_, ": ", problem,
                     "; re-run engramctl import --profile-trace into a new directory"));
  }

  // One header (the first record) or entry, kHeaderBytes or kEntryBytes at p.
  absl::Status Record(const char* p) {
    if (seen_ == 0) {
      seen_ = kHeaderBytes;
      if (std::memcmp(p, kHotProfileMagic, 4) != 0) {
        return Corrupt("not a hot profile (bad magic or too short)");
      }
      const uint32_t version = Take<uint32_t>(p + 4);
      if (version != kHotProfileVersion) {
        return Corrupt(absl::StrCat("version ", version, " is not supported"));
      }
      count_ = Take<uint64_t>(p + 8);
      if (count_ > (file_bytes_ - kHeaderBytes) / kEntryBytes ||
          file_bytes_ != kHeaderBytes + count_ * kEntryBytes) {
        return Corrupt(
            absl::StrCat("header says ", count_, " entries, file has ", file_bytes_, " bytes"));
      }
      out_.reserve(std::min(count_, keep_));
      return absl::OkStatus();
    }
    seen_ += kEntryBytes;
    const uint64_t i = next_++;
    if (i >= count_) {
      return Corrupt(absl::StrCat("header says ", count_, " entries, file has more bytes"));
    }
    const HotProfileEntry e = {Take<uint32_t>(p), Take<uint64_t>(p + 4), Take<uint64_t>(p + 12)};
    if (e.layer >= map_.layer_rows.size() || e.row >= map_.layer_rows[e.layer] ||
        map_.ShardOf(e.row) != shard_) {
      return Corrupt(absl::StrCat("entry ", i, " (layer ", e.layer, " row ", e.row,
                                  ") is not a row of shard ", shard_));
    }
    if (i > 0 && !HotProfileOrder(last_, e)) {
      return Corrupt(absl::StrCat("entry ", i, " is out of order"));
    }
    last_ = e;
    if (out_.size() < keep_) out_.push_back(e);
    return absl::OkStatus();
  }

  const ShardMap& map_;
  const uint32_t shard_;
  const absl::string_view what_;
  const uint64_t file_bytes_;
  const uint64_t keep_;
  uint64_t seen_ = 0;   // bytes of whole records checked
  uint64_t count_ = 0;  // entries the header announces
  uint64_t next_ = 0;   // index of the next entry
  char pending_[kHeaderBytes > kEntryBytes ? kHeaderBytes : kEntryBytes];
  size_t pending_len_ = 0;  // bytes of a record split across chunks
  HotProfileEntry last_;
  std::vector<HotProfileEntry> out_;
};

}  // namespace

absl::StatusOr<std::vector<HotProfileEntry>> ParseHotProfile(std::string_view data,
                                                             const ShardMap& map, uint32_t shard,
                                                             std::string_view what) {
  ProfileParser parser(map, shard, absl::string_view(what.data(), what.size()), data.size(),
                       std::numeric_limits<uint64_t>::max());
  RETURN_IF_ERROR(parser.Start());
  RETURN_IF_ERROR(parser.Feed(data));
  return parser.Finish();
}

absl::StatusOr<std::vector<HotProfileEntry>> ReadHotProfile(const std::string& path,
                                                            const ShardMap& map, uint32_t shard,
                                                            uint64_t max_entries) {
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) {
    const std::string msg = absl::StrCat("cannot open ", path, ": ", ec.message());
    return ec == std::errc::no_such_file_or_directory ? absl::NotFoundError(msg)
                                                      : absl::InternalError(msg);
  }
  ProfileParser parser(map, shard, path, file_bytes, max_entries);
  RETURN_IF_ERROR(parser.Start());
  RETURN_IF_ERROR(
      ReadFileInChunks(path, [&](std::string_view chunk) { return parser.Feed(chunk); }));
  return parser.Finish();
}

}  // namespace engram
