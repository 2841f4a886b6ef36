// Fuzz target: the table manifest reader (TableManifest::FromJson,
// common/format/table.h), what TableManifest::Load and TableReader::Open make of
// a manifest.json. A manifest it accepts must validate, and its ToJson
// must read back to the same document (a fixed point).
#include <cstdint>
#include <string>

#include "common/format/table.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  const absl::StatusOr<TableManifest> m = TableManifest::FromJson(fuzz::AsText(data, size));
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() == absl::StatusCode::kInvalidArgument, m.status().ToString());
    return 0;
  }
  const absl::Status valid = m->Validate(/*require_checksums=*/true);
  FUZZ_CHECK(valid.ok(), valid.ToString());
  uint64_t rows = 0;
  for (const LayerInfo& l : m->layers) {
    FUZZ_CHECK(l.row_bytes == EncodedRowBytes(l.encoding, l.head_dim, l.scale_block).value_or(-1),
               "row_bytes");
    FUZZ_CHECK(!__builtin_add_overflow(rows, l.rows, &rows), "total rows wrap");
  }
  FUZZ_CHECK(m->total_rows() == rows, "total_rows");
  const std::string json = m->ToJson();
  const absl::StatusOr<TableManifest> again = TableManifest::FromJson(json);
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->ToJson() == json, "ToJson is not a fixed point");
  return 0;
}
