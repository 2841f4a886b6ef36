// Fuzz target: the hot-row profile reader (ParseHotProfile,
// common/format/hot_profile.h), what a shard's hot tier and a client's local cache
// make of hot_profile.bin. The profile is read as shard 1 of the map
// below (the geometry fuzz/corpus/hot_profile_fuzz/ was written for). A
// profile it accepts holds rows of that shard in file order, and
// re-encodes to exactly its bytes (the format has one encoding).
#include <cstdint>
#include <string>
#include <vector>

#include "common/format/hot_profile.h"
#include "fuzz/fuzz_util.h"

namespace engram::fuzz {

// The map hot_profile_fuzz's seeds were written for.
const ShardMap& ProfileMap() {
  static const ShardMap* map = [] {
    auto* m = new ShardMap;
    m->table = "fuzz";
    m->version = 1;
    m->n_shards = 3;
    m->layer_rows = {1000, 37};
    m->row_bytes = {66, 66};
    return m;
  }();
  return *map;
}

}  // namespace engram::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  const ShardMap& map = fuzz::ProfileMap();
  constexpr uint32_t kShard = 1;
  const absl::StatusOr<std::vector<HotProfileEntry>> p =
      ParseHotProfile(fuzz::AsText(data, size), map, kShard, "fuzz");
  if (!p.ok()) {
    FUZZ_CHECK(p.status().code() == absl::StatusCode::kDataLoss, p.status().ToString());
    return 0;
  }
  for (size_t i = 0; i < p->size(); ++i) {
    const HotProfileEntry& e = (*p)[i];
    FUZZ_CHECK(e.layer < map.layer_rows.size() && e.row < map.layer_rows[e.layer] &&
                   e.row % map.n_shards == kShard,
               absl::StrCat("entry ", i, " is not a row of the shard"));
    FUZZ_CHECK(i == 0 || HotProfileOrder((*p)[i - 1], e), absl::StrCat("entry ", i, " order"));
  }
  FUZZ_CHECK(EncodeHotProfile(*p) == fuzz::AsText(data, size), "re-encoding differs");
  return 0;
}
