// Command-line parsing shared by the project's main()s.
//
// Every binary spells its flags with dashes (--shard-index; underscores are
// accepted too: Abseil flag names are identifiers), takes each flag's
// default from its component's Options struct, and answers --help with its
// usage line and every flag it defines, with the default.
#ifndef ENGRAM_COMMON_UTIL_FLAGS_H_
#define ENGRAM_COMMON_UTIL_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace engram {

// absl::ParseCommandLine with dashed names rewritten to underscores (up to
// a "--", after which everything is positional). `--help` (or `-h`) prints
// absl::ProgramUsageMessage() and FlagsHelp() to stdout and exits 0; Abseil's
// own --helpfull still lists every flag linked in. Returns the positional
// arguments, argv[0] first.
std::vector<char*> ParseFlags(int argc, char** argv);

// Every flag this program defines (those outside Abseil itself), sorted by
// name, one entry each:
//   --dashed-name=DEFAULT
//       help text
std::string FlagsHelp();

// Parses a byte count with an optional binary suffix: "1048576", "512K",
// "512M", "2G", "1T" (case-insensitive, optional trailing "B" or "iB", so
// "2GiB" and "2gb" too; K = 1024). InvalidArgument naming the text.
absl::StatusOr<uint64_t> ParseByteSize(const std::string& text);

}  // namespace engram

#endif  // ENGRAM_COMMON_UTIL_FLAGS_H_
