// engramctl subcommands that build and describe shard data:
//
//   import --table DIR | --gguf FILE  --shards K --shard-index I --out DIR
//          [--profile-trace FILE] [--table-version N]
//   layout --from-gguf FILE [--out FILE]
//
// Each returns the process exit code: 0 on success, 2 with one line on
// stderr saying what is wrong and how to fix it.
#ifndef ENGRAM_TOOLS_SHARD_COMMANDS_H_
#define ENGRAM_TOOLS_SHARD_COMMANDS_H_

#include <string>
#include <vector>

namespace engram {

int ImportCommand(const std::vector<std::string>& args);
int LayoutCommand(const std::vector<std::string>& args);

}  // namespace engram

#endif  // ENGRAM_TOOLS_SHARD_COMMANDS_H_
