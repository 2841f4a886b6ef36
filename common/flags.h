// Command-line parsing shared by the project's main()s.
#ifndef ENGRAM_COMMON_FLAGS_H_
#define ENGRAM_COMMON_FLAGS_H_

#include <vector>

#include "absl/flags/parse.h"

namespace engram {

// absl::ParseCommandLine, but flag names may be written with dashes as well
// as underscores (--shard-index = --shard_index): Abseil flag names are
// identifiers, the documented interfaces use dashes. Stops rewriting at
// "--". Returns the positional arguments (argv[0] first).
inline std::vector<char*> ParseFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (a[0] != '-' || a[1] != '-') continue;
    if (a[2] == '\0') break;  // "--": the rest is positional
    for (char* c = a + 2; *c != '\0' && *c != '='; ++c) {
      if (*c == '-') *c = '_';
    }
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace engram

#endif  // ENGRAM_COMMON_FLAGS_H_
