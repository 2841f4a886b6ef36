// The JSON parse of every document engram-store reads from disk or the
// network (table manifests, hash layouts, shard maps, safetensors headers).
//
// nlohmann::json parses without recursion, but a document nested a million
// levels deep still costs ~100 bytes a level and recursive dump() and
// comparison calls on it exhaust the stack; none of our formats nests more
// than four levels. ParseJson refuses such a document in one pass over the
// text before nlohmann sees it.
#ifndef ENGRAM_COMMON_UTIL_JSON_PARSE_H_
#define ENGRAM_COMMON_UTIL_JSON_PARSE_H_

#include <nlohmann/json.hpp>
#include <string_view>

#include "absl/status/statusor.h"

namespace engram {

// Arrays and objects may nest this deep (the outermost one is level 1).
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as one JSON document. InvalidArgument "not valid JSON" or
// "JSON nested deeper than 64 levels" (no prefix: callers name the file).
// Thread-safe.
absl::StatusOr<nlohmann::json> ParseJson(std::string_view text);

}  // namespace engram

#endif  // ENGRAM_COMMON_UTIL_JSON_PARSE_H_
