// JSON conversion of HashLayout for code that embeds a layout in a larger
// document (table manifests). Most callers want HashLayout::FromFile instead.
#ifndef ENGRAM_COMMON_HASH_LAYOUT_JSON_H_
#define ENGRAM_COMMON_HASH_LAYOUT_JSON_H_

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/hash/layout.h"

namespace engram {

// Parses and validates a layout object in the golden `layout` form.
absl::StatusOr<HashLayout> LayoutFromJsonValue(const nlohmann::json& j);
nlohmann::json LayoutToJsonValue(const HashLayout& layout);

}  // namespace engram

#endif  // ENGRAM_COMMON_HASH_LAYOUT_JSON_H_
