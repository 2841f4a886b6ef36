// Fuzz target: the shard-map reader (ShardMap::FromJson,
// common/format/shard_map.h), what servers and clients make of shard_map.json. A
// map it accepts must validate, read back from its ToJson with the same
// data and replicas, and (for a small shard count) partition every layer's
// rows exactly among its shards.
#include <cstdint>
#include <string>

#include "common/format/shard_map.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  const absl::StatusOr<ShardMap> m = ShardMap::FromJson(fuzz::AsText(data, size));
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() == absl::StatusCode::kInvalidArgument, m.status().ToString());
    return 0;
  }
  const absl::Status valid = m->Validate();
  FUZZ_CHECK(valid.ok(), valid.ToString());
  const absl::StatusOr<ShardMap> again = ShardMap::FromJson(m->ToJson());
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->SameData(*m) && again->replicas == m->replicas, "ToJson round trip");
  if (m->n_shards <= 64) {
    for (uint32_t l = 0; l < m->layer_rows.size(); ++l) {
      uint64_t rows = 0;
      for (uint32_t s = 0; s < m->n_shards; ++s) rows += m->RowsOnShard(l, s);
      FUZZ_CHECK(rows == m->layer_rows[l],
                 absl::StrCat("layer ", l, " partitions ", rows, " rows"));
    }
  }
  return 0;
}
