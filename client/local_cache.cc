#include "client/local_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/engram_client.h"
#include "client/engram_client_impl.h"
#include "common/format/hot_profile.h"
#include "common/util/status_macros.h"

namespace engram {
absl::StatusOr<std::unique_ptr<LocalCache>> LocalCache::Build(EngramClient& client) {
  EngramClient::Impl& c = *client.impl_;
  const ClientOptions& o = c.options;
  if (o.local_cache_profiles.size() != static_cast<size_t>(c.n_shards)) {
    return absl::InvalidArgumentError(
        absl::StrCat("local_cache_bytes needs one hot-row profile per shard (", c.n_shards,
                     "), got ", o.local_cache_profiles.size()));
  }
  std::vector<HotProfileEntry> all;
  for (int s = 0; s < c.n_shards; ++s) {
    ASSIGN_OR_RETURN(
        std::vector<HotProfileEntry> p,
        ReadHotProfile(o.local_cache_profiles[s], c.shard_map, static_cast<uint32_t>(s)));
    all.insert(all.end(), p.begin(), p.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const HotProfileEntry& a, const HotProfileEntry& b) {
    return a.count > b.count;
  });
  // Take the hottest rows that fit.
  std::vector<std::vector<uint64_t>> rows(static_cast<size_t>(c.n_layers));
  uint64_t used = 0;
  for (const HotProfileEntry& e : all) {
    if (e.layer >= static_cast<uint32_t>(c.n_layers)) continue;
    const uint64_t rb = static_cast<uint64_t>(client.row_bytes(static_cast<int>(e.layer)));
    if (used + rb > o.local_cache_bytes) break;
    used += rb;
    rows[e.layer].push_back(e.row);
  }
  auto cache = std::unique_ptr<LocalCache>(new LocalCache());
  uint64_t n_rows = 0;
  for (const auto& r : rows) n_rows += r.size();
  cache->index_.Reset(n_rows);
  cache->offsets_.reserve(n_rows);
  cache->arena_.resize(used);

  // Fetch through the ordinary step machinery: one "step" whose unique rows
  // are the cache's rows.
  ASSIGN_OR_RETURN(Step step, c.FetchRows(rows));
  uint64_t off = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    if (absl::Status s = step.WaitArrived(l); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("filling the local cache: ", s.message()));
    }
    const size_t rb = static_cast<size_t>(client.row_bytes(l));
    const std::vector<const uint8_t*> src = c.UniqueRowSources(step, l);
    for (size_t k = 0; k < rows[l].size(); ++k) {
      std::memcpy(cache->arena_.data() + off, src[k], rb);
      cache->index_.Insert(Key(static_cast<uint32_t>(l), rows[l][k]),
                           static_cast<uint32_t>(cache->offsets_.size()));
      cache->offsets_.push_back(off);
      off += rb;
    }
  }
  return cache;
}

}  // namespace engram
