// Fuzz target: a sharded checkpoint's model.safetensors.index.json
// (ParseSafetensorsIndex, common/format/safetensors.h), what `engramctl import
// --checkpoint` reads to find the Engram tensors. Refusals are
// InvalidArgument; an accepted map names only plain files inside the
// checkpoint directory.
#include <cstdint>
#include <string>

#include "common/format/safetensors.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  const auto map = ParseSafetensorsIndex(fuzz::AsText(data, size), "index");
  if (!map.ok()) {
    FUZZ_CHECK(map.status().code() == absl::StatusCode::kInvalidArgument, map.status().ToString());
    return 0;
  }
  for (const auto& [tensor, file] : *map) {
    FUZZ_CHECK(!file.empty() && file != "." && file != "..", file);
    FUZZ_CHECK(file.find('/') == std::string::npos, file);
  }
  return 0;
}
