#include "client/local_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/step_engine.h"
#include "common/format/hot_profile.h"
#include "common/util/status_macros.h"

namespace engram {

absl::StatusOr<std::unique_ptr<LocalCache>> LocalCache::Build(
    const std::vector<std::string>& profiles, uint64_t bytes, const ShardMap& map,
    StepPool& steps) {
  const StepConfig& config = steps.config();
  const int n_shards = config.n_shards;
  const int n_layers = config.n_layers();
  if (profiles.size() != static_cast<size_t>(n_shards)) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_cache_bytes needs one hot-row profile per shard (", n_shards,
                     "), got ", profiles.size()));
  }
  std::vector<HotProfileEntry> all;
  for (int s = 0; s < n_shards; ++s) {
    ASSIGN_OR_RETURN(std::vector<HotProfileEntry> p,
                     ReadHotProfile(profiles[s], map, static_cast<uint32_t>(s)));
    all.insert(all.end(), p.begin(), p.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const HotProfileEntry& a, const HotProfileEntry& b) {
    return a.count > b.count;
  });
  // Take the hottest rows that fit.
  std::vector<std::vector<uint64_t>> rows(static_cast<size_t>(n_layers));
  uint64_t used = 0;
  for (const HotProfileEntry& e : all) {
    if (e.layer >= static_cast<uint32_t>(n_layers)) continue;
    const uint64_t rb = static_cast<uint64_t>(config.layers[e.layer].row_bytes);
    if (used + rb > bytes) break;
    used += rb;
    rows[e.layer].push_back(e.row);
  }
  auto cache = std::unique_ptr<LocalCache>(new LocalCache());
  uint64_t n_rows = 0;
  for (const auto& r : rows) n_rows += r.size();
  cache->index_.Reset(n_rows);
  cache->offsets_.reserve(n_rows);
  cache->arena_.resize(used);

  // Fetch through the ordinary step machinery: one step whose unique rows
  // are the cache's rows.
  std::unique_ptr<StepEngine> step = steps.Take();
  step->SendRows(rows);
  absl::Status filled;
  uint64_t off = 0;
  for (int l = 0; l < n_layers && filled.ok(); ++l) {
    if (absl::Status s = step->WaitLayer(l); !s.ok()) {
      filled = absl::Status(s.code(), absl::StrCat("filling the local cache: ", s.message()));
      break;
    }
    const size_t rb = static_cast<size_t>(config.layers[l].row_bytes);
    const std::vector<const uint8_t*> src = step->UniqueRowSources(l);
    for (size_t k = 0; k < rows[l].size(); ++k) {
      std::memcpy(cache->arena_.data() + off, src[k], rb);
      cache->index_.Insert(ShardKey(static_cast<uint32_t>(l), rows[l][k]),
                           static_cast<uint32_t>(cache->offsets_.size()));
      cache->offsets_.push_back(off);
      off += rb;
    }
  }
  steps.Return(std::move(step));
  RETURN_IF_ERROR(filled);
  return cache;
}

}  // namespace engram
