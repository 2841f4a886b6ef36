// engramctl subcommands that build and describe shard data:
//
//   import --table DIR | --checkpoint DIR | --gguf FILE  --shards K
//          --shard-index I --out DIR [--profile-trace FILE] [--table-version N]
//          (its last lines name each layer's encoding and the source's Engram
//          tensors that are not served)
//   manifest --checkpoint DIR | --gguf FILE --out TABLE_DIR [--table-version N]
//          the manifest-only table directory workers read (ClientOptions::
//          table_dir): layout, geometry, encodings and the source's checksums,
//          no rows; "manifest: wrote ..." or "manifest: already written: ..."
//   layout --from-gguf FILE [--out FILE]
//   footprint SHARD_DIR...   per directory, one line
//          "footprint: DIR fixed_bytes=F whole_shard_budget=W": the smallest
//          engram-shard --ram-budget it accepts (RocksDB's index) and the one
//          that pins every row (shard/footprint.h)
//
// Each returns the process exit code: 0 on success, 2 with one line on
// stderr saying what is wrong and how to fix it.
#ifndef ENGRAM_TOOLS_SHARD_COMMANDS_H_
#define ENGRAM_TOOLS_SHARD_COMMANDS_H_

#include <string>
#include <vector>

namespace engram {

int ImportCommand(const std::vector<std::string>& args);
int ManifestCommand(const std::vector<std::string>& args);
int LayoutCommand(const std::vector<std::string>& args);
int FootprintCommand(const std::vector<std::string>& args);

}  // namespace engram

#endif  // ENGRAM_TOOLS_SHARD_COMMANDS_H_
