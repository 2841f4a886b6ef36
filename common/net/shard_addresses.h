// The shard-map string: the one text form of a deployment's shard addresses,
// as `engramctl lookup --shards`, engram-demo and the Helm chart's ConfigMap
// write it.
//
//   a:7070|b:7070,c:7070|d:7070
//
// Shards are separated by ',' (shard 0 first), the replicas of one shard by
// '|'; each address is host:port (or [v6]:port). Parsed, it is what
// ClientOptions::shard_addresses holds: [shard][replica] "host:port".
#ifndef ENGRAM_COMMON_NET_SHARD_ADDRESSES_H_
#define ENGRAM_COMMON_NET_SHARD_ADDRESSES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace engram {

// Parses a shard-map string. InvalidArgument, with a one-line message naming
// the shard and replica, for an empty string, an empty shard ("a:1,,b:1"), an
// empty replica ("a:1||b:1"), whitespace in an address, or an address that
// is not host:port with a port in 1..65535.
absl::StatusOr<std::vector<std::vector<std::string>>> ParseShardAddresses(absl::string_view text);

// The shard-map string of `shards`; ParseShardAddresses reads it back when
// every shard has at least one valid address.
std::string FormatShardAddresses(const std::vector<std::vector<std::string>>& shards);

// The addresses of the Helm chart's deployment behind the headless Service
// `service` (a DNS name, e.g. engram-store.engram.svc.cluster.local), so a
// worker needs only the service name: shard i is the StatefulSet
// <base>-<i>, its replica r the pod <base>-<i>-<r>, reached at
// <base>-<i>-<r>.<service>:<port>, where <base> is the first label of
// `service`. InvalidArgument when shards or replicas is below 1, port is not
// in 1..65535, `service` is not a DNS name of lower-case labels ([a-z0-9-],
// not starting or ending with '-', at most 63 characters), a pod label or a
// pod's name would be too long for DNS (63 / 253 characters), or there would
// be more than kMaxDnsShardAddresses addresses.
inline constexpr int kMaxDnsShardAddresses = 1 << 16;
absl::StatusOr<std::vector<std::vector<std::string>>> ShardAddressesFromDns(
    absl::string_view service, int shards, int replicas, int port);

}  // namespace engram

#endif  // ENGRAM_COMMON_NET_SHARD_ADDRESSES_H_
