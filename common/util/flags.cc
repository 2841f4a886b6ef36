#include "common/util/flags.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace engram {

std::string FlagsHelp() {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired() || absl::StrContains(flag->Filename(), "absl/")) continue;
    flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  std::string out;
  for (const absl::CommandLineFlag* f : flags) {
    absl::StrAppend(&out, "  --", absl::StrReplaceAll(f->Name(), {{"_", "-"}}), "=",
                    f->DefaultValue(), "\n      ", f->Help(), "\n");
  }
  return out;
}

std::vector<char*> ParseFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0) {
      std::printf("%s\n\nflags (dashes or underscores: --shard-index = --shard_index):\n%s",
                  std::string(absl::ProgramUsageMessage()).c_str(), FlagsHelp().c_str());
      std::exit(0);
    }
    if (a[0] != '-' || a[1] != '-') continue;
    if (a[2] == '\0') break;  // "--": the rest is positional
    for (char* c = a + 2; *c != '\0' && *c != '='; ++c) {
      if (*c == '-') *c = '_';
    }
  }
  return absl::ParseCommandLine(argc, argv);
}

absl::StatusOr<uint64_t> ParseByteSize(const std::string& text) {
  std::string s;
  for (char c : text) s.push_back(static_cast<char>(std::tolower(c)));
  for (const char* unit : {"ib", "b"}) {
    const size_t n = std::char_traits<char>::length(unit);
    if (s.size() > n && s.compare(s.size() - n, n, unit) == 0) {
      s.resize(s.size() - n);
      break;
    }
  }
  int shift = 0;
  if (!s.empty()) {
    switch (s.back()) {
      case 'k':
        shift = 10;
        break;
      case 'm':
        shift = 20;
        break;
      case 'g':
        shift = 30;
        break;
      case 't':
        shift = 40;
        break;
      default:
        break;
    }
    if (shift != 0) s.pop_back();
  }
  const bool digits =
      !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  uint64_t value;
  if (!digits || !absl::SimpleAtoi(absl::string_view(s), &value) ||
      (shift != 0 && value > (~uint64_t{0} >> shift))) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a byte size (use e.g. 1048576, 512M or 2G)"));
  }
  return value << shift;
}

}  // namespace engram
