// The state behind EngramClient: the table it reads, its hasher, channels,
// local cache and step pool. Internal to the client library. Everything of
// a step happens in its StepEngine (client/step_engine.h); Impl only makes
// the collaborators and hands steps their ids.
#ifndef ENGRAM_CLIENT_ENGRAM_CLIENT_IMPL_H_
#define ENGRAM_CLIENT_ENGRAM_CLIENT_IMPL_H_

#include <memory>

#include "client/client_metrics.h"
#include "client/engram_client.h"
#include "client/engram_types.h"
#include "client/local_cache.h"
#include "client/shard_channels.h"
#include "client/step_engine.h"
#include "common/format/shard_map.h"
#include "common/format/table.h"
#include "common/hash/engram_hash.h"

namespace engram {

// The per-sequence state of the hash, behind the public Sequence.
struct Sequence::Rep {
  explicit Rep(int64_t capacity) : state(capacity) {}
  SequenceState state;
};

struct EngramClient::Impl {
  ClientOptions options;
  TableManifest manifest;
  ShardMap shard_map;
  std::unique_ptr<NgramHasher> hasher;
  TableLayout layout;  // hasher's layout, as the public API gives it
  int n_layers = 0, n_cols = 0, n_shards = 0;
  std::unique_ptr<ShardChannels> channels;
  std::unique_ptr<LocalCache> local_cache;
  // After the channels and the cache: destroyed before them.
  std::unique_ptr<StepPool> steps;
  // Last: unregisters (and refreshes from stats() once more) before the
  // counters go away.
  std::unique_ptr<ClientMetrics> metrics;
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_ENGRAM_CLIENT_IMPL_H_
