// engramctl lookup: fetches the rows of a token string from a running
// deployment through the client library, the operator's end-to-end check.
//
//   lookup --table DIR --shards host:port,... --tokens "12 7 99 ..." [--json]
//
// Returns the process exit code: 0 on success, 2 with one line on stderr
// for bad input, 1 when the deployment fails the lookup.
#ifndef ENGRAM_TOOLS_LOOKUP_COMMAND_H_
#define ENGRAM_TOOLS_LOOKUP_COMMAND_H_

#include <string>
#include <vector>

namespace engram {

int LookupCommand(const std::vector<std::string>& args);

}  // namespace engram

#endif  // ENGRAM_TOOLS_LOOKUP_COMMAND_H_
