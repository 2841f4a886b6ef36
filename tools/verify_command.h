// engramctl verify: reads every row of a shard directory back and checks it
// against shard.json's per-layer checksums and, with --table, against the
// table's rows (shard/verify.h).
//
//   verify --db SHARD_DIR [--table TABLE_DIR]
//
// Prints one line per layer, then "verify: N rows, all match" (exit 0) or
// "verify: M of N rows differ (first: layer L row R)" (exit 1). A shard
// that is missing or cannot be opened (a damaged table file) is one line
// on stderr and exit 1; bad flags exit 2.
#ifndef ENGRAM_TOOLS_VERIFY_COMMAND_H_
#define ENGRAM_TOOLS_VERIFY_COMMAND_H_

#include <string>
#include <vector>

namespace engram {

int VerifyCommand(const std::vector<std::string>& args);

}  // namespace engram

#endif  // ENGRAM_TOOLS_VERIFY_COMMAND_H_
