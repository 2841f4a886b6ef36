#include "client/local_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/engram_client.h"
#include "client/engram_client_impl.h"
#include "shard/hot_profile.h"

namespace engram {
namespace {

inline uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

int64_t LocalCache::Slot(uint32_t layer, uint64_t row) const {
  if (keys_.empty()) return -1;
  const uint64_t key = Key(layer, row);
  size_t h = static_cast<size_t>(Mix(key) >> shift_);
  const size_t mask = keys_.size() - 1;
  while (keys_[h] != 0) {
    if (keys_[h] == key) return index_[h];
    h = (h + 1) & mask;
  }
  return -1;
}

void LocalCache::Insert(uint32_t layer, uint64_t row, uint64_t offset) {
  const uint64_t key = Key(layer, row);
  size_t h = static_cast<size_t>(Mix(key) >> shift_);
  const size_t mask = keys_.size() - 1;
  while (keys_[h] != 0 && keys_[h] != key) h = (h + 1) & mask;
  keys_[h] = key;
  index_[h] = static_cast<uint32_t>(offsets_.size());
  offsets_.push_back(offset);
}

absl::StatusOr<std::unique_ptr<LocalCache>> LocalCache::Build(EngramClient& client) {
  EngramClient::Impl& c = *client.impl_;
  const ClientOptions& o = c.options;
  if (o.local_cache_profiles.size() != static_cast<size_t>(c.n_shards)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local_cache_bytes needs one hot-row profile per shard (", c.n_shards,
        "), got ", o.local_cache_profiles.size()));
  }
  std::vector<HotProfileEntry> all;
  for (int s = 0; s < c.n_shards; ++s) {
    absl::StatusOr<std::vector<HotProfileEntry>> p = ReadHotProfile(
        o.local_cache_profiles[s], c.shard_map, static_cast<uint32_t>(s));
    if (!p.ok()) return p.status();
    all.insert(all.end(), p->begin(), p->end());
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const HotProfileEntry& a, const HotProfileEntry& b) {
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
  size_t cap = 64;
  while (cap < 2 * std::max<size_t>(1, all.size())) cap <<= 1;
  cache->keys_.assign(cap, 0);
  cache->index_.assign(cap, 0);
  cache->shift_ = 64 - __builtin_ctzll(cap);
  cache->arena_.resize(used);

  // Fetch through the ordinary step machinery: one "step" whose unique rows
  // are the cache's rows.
  absl::StatusOr<Step> step = c.FetchRows(rows);
  if (!step.ok()) return step.status();
  uint64_t off = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    if (absl::Status s = step->WaitArrived(l); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("filling the local cache: ", s.message()));
    }
    const size_t rb = static_cast<size_t>(client.row_bytes(l));
    const std::vector<const uint8_t*> src = c.UniqueRowSources(*step, l);
    for (size_t k = 0; k < rows[l].size(); ++k) {
      std::memcpy(cache->arena_.data() + off, src[k], rb);
      cache->Insert(static_cast<uint32_t>(l), rows[l][k], off);
      off += rb;
    }
  }
  return cache;
}

}  // namespace engram
