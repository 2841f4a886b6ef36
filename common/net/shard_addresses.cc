#include "common/net/shard_addresses.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

constexpr char kFormatHint[] =
    "list host:port per shard, shards separated by ',' and replicas by '|' "
    "(e.g. a:7070|b:7070,c:7070)";
constexpr size_t kMaxDnsLabel = 63;
constexpr size_t kMaxDnsName = 253;

// OK when `address` is host:port (or [v6]:port) with a port in 1..65535;
// otherwise says what is wrong with it, for a message about `where`.
absl::Status CheckAddress(absl::string_view address, absl::string_view where) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": address \"", address, "\" ", what));
  };
  for (char c : address) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      return bad("contains whitespace; remove it");
    }
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return bad("has no :port (want host:port)");
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port = address.substr(colon + 1);
  if (host.empty() || host == "[]") return bad("has no host (want host:port)");
  const bool bracketed = host.front() == '[' && host.back() == ']';
  if (!bracketed && absl::StrContains(host, ':')) {
    return bad("has an IPv6 host without brackets (want [host]:port)");
  }
  uint32_t value = 0;
  const bool digits =
      !port.empty() && port.find_first_not_of("0123456789") == absl::string_view::npos;
  if (!digits || !absl::SimpleAtoi(port, &value) || value < 1 || value > 65535) {
    return bad(absl::StrCat("has port \"", port, "\"; the port must be a number in 1..65535"));
  }
  return absl::OkStatus();
}

// OK when `name` is a DNS name of lower-case labels: [a-z0-9-], not starting
// or ending with '-', 1..63 characters each, 253 in all.
absl::Status CheckDnsName(absl::string_view name) {
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "the service name is empty; give the headless Service's DNS name, e.g. "
        "engram-store.engram.svc.cluster.local");
  }
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("service \"", name, "\" is not a DNS name: ", what));
  };
  if (name.size() > kMaxDnsName) {
    return bad(absl::StrCat("it has ", name.size(), " characters, DNS allows ", kMaxDnsName));
  }
  for (absl::string_view label : absl::StrSplit(name, '.')) {
    if (label.empty()) return bad("it has an empty label (a '.' at an end or '..')");
    if (label.size() > kMaxDnsLabel) {
      return bad(absl::StrCat("label \"", label, "\" has ", label.size(),
                              " characters, DNS allows ", kMaxDnsLabel));
    }
    for (char c : label) {
      if (!absl::ascii_islower(static_cast<unsigned char>(c)) &&
          !absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '-') {
        return bad(absl::StrCat("label \"", label, "\" has '", absl::string_view(&c, 1),
                                "'; labels are lower-case letters, digits and '-'"));
      }
    }
    if (label.front() == '-' || label.back() == '-') {
      return bad(absl::StrCat("label \"", label, "\" starts or ends with '-'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::vector<std::string>>> ParseShardAddresses(absl::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat("no addresses; ", kFormatHint));
  std::vector<std::vector<std::string>> shards;
  for (absl::string_view shard : absl::StrSplit(text, ',')) {
    const size_t s = shards.size();
    if (shard.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", s, " is empty (a ',' at an end or ',,'); ", kFormatHint));
    }
    std::vector<std::string>& replicas = shards.emplace_back();
    for (absl::string_view address : absl::StrSplit(shard, '|')) {
      if (address.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("shard ", s, " has an empty replica (a '|' at an end or '||'); ",
                         "separate a shard's replicas by one '|'"));
      }
      RETURN_IF_ERROR(
          CheckAddress(address, absl::StrCat("shard ", s, " replica ", replicas.size())));
      replicas.emplace_back(address);
    }
  }
  return shards;
}

std::string FormatShardAddresses(const std::vector<std::vector<std::string>>& shards) {
  return absl::StrJoin(shards, ",", [](std::string* out, const std::vector<std::string>& r) {
    absl::StrAppend(out, absl::StrJoin(r, "|"));
  });
}

absl::StatusOr<std::vector<std::vector<std::string>>> ShardAddressesFromDns(
    absl::string_view service, int shards, int replicas, int port) {
  if (shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(shards, " shards: a deployment has at least 1 shard"));
  }
  if (replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(replicas, " replicas: every shard has at least 1 replica"));
  }
  if (int64_t{shards} * replicas > kMaxDnsShardAddresses) {
    return absl::InvalidArgumentError(absl::StrCat(shards, " shards x ", replicas,
                                                   " replicas is more than ", kMaxDnsShardAddresses,
                                                   " addresses"));
  }
  if (port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", port, " is outside 1..65535; give the shard servers' gRPC port"));
  }
  RETURN_IF_ERROR(CheckDnsName(service));
  const absl::string_view base = service.substr(0, service.find('.'));
  // The longest pod label and name are those of the last shard's last replica.
  const std::string last_pod = absl::StrCat(base, "-", shards - 1, "-", replicas - 1);
  if (last_pod.size() > kMaxDnsLabel) {
    return absl::InvalidArgumentError(
        absl::StrCat("pod name \"", last_pod, "\" has ", last_pod.size(),
                     " characters, DNS labels allow ", kMaxDnsLabel,
                     "; shorten the service's first label \"", base, "\" (the chart's full name)"));
  }
  if (last_pod.size() + 1 + service.size() > kMaxDnsName) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", last_pod, ".", service,
                                                   "\" is longer than the ", kMaxDnsName,
                                                   " characters DNS allows; shorten the service"));
  }
  std::vector<std::vector<std::string>> out(static_cast<size_t>(shards));
  for (int i = 0; i < shards; ++i) {
    for (int r = 0; r < replicas; ++r) {
      out[i].push_back(absl::StrCat(base, "-", i, "-", r, ".", service, ":", port));
    }
  }
  return out;
}

}  // namespace engram
