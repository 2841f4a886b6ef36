// engramctl subcommands about a deployment's addresses:
//
//   shardmap --from-dns SERVICE --shards K --replicas R [--port 7070]
//       prints, on one line, the shard-map string of the Helm chart's
//       deployment behind the headless Service SERVICE
//       (ShardAddressesFromDns, common/net/shard_addresses.h)
//   info --shards ADDRS [--timeout 5s]
//       calls Info on every address of the shard-map string ADDRS, all at
//       once within one deadline, and prints one line per address:
//       ADDR: shard I/K of table T vV, ... row stream port P
//       or ADDR: CODE: message when the call fails; --auth-token-file F
//       sends the shards' data token
//   activate --shards ADDRS --to-version N [--admin-token-file F]
//            [--timeout 5s]
//       switches every replica, one at a time, to table version N imported
//       beside the served one (EngramAdmin/Activate); one line per replica,
//       ADDR: version P -> N (load X s, drain Y s); stops at the first
//       failure (ADDR: CODE: message, exit 1)
//
// info, activate (and lookup) speak TLS to shards that serve it with
// --tls-ca CA [--tls-cert C --tls-key K] [--tls-server-name N].
//
// Each returns the process exit code: 0 on success, 2 with one line on
// stderr (`engramctl <command>: what is wrong and how to fix it`) for bad
// input; info returns 1 when an address failed its call or is not the shard
// its place in ADDRS says, activate when a replica refused the switch.
#ifndef ENGRAM_TOOLS_DEPLOY_COMMANDS_H_
#define ENGRAM_TOOLS_DEPLOY_COMMANDS_H_

#include <string>
#include <vector>

namespace engram {

int ShardMapCommand(const std::vector<std::string>& args);
int InfoCommand(const std::vector<std::string>& args);
int ActivateCommand(const std::vector<std::string>& args);

}  // namespace engram

#endif  // ENGRAM_TOOLS_DEPLOY_COMMANDS_H_
