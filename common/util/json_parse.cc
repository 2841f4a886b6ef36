#include "common/util/json_parse.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace engram {
namespace {

// The deepest nesting of arrays and objects in `text`, counting brackets
// outside strings. Exact for valid JSON; for anything else it is a number
// the parse then rejects anyway.
int MaxDepth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) max_depth = depth;
      if (max_depth > kMaxJsonDepth) break;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text) {
  if (MaxDepth(text) > kMaxJsonDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON nested deeper than ", kMaxJsonDepth, " levels"));
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  return j;
}

}  // namespace engram
