// What gguf_fuzz and gguf_split_fuzz require of every GGUF file set that
// GgufEngramFile::Open accepts: a valid layout, row bytes that follow from
// each layer's encoding, and readable first and last rows.
#ifndef ENGRAM_FUZZ_GGUF_CHECKS_H_
#define ENGRAM_FUZZ_GGUF_CHECKS_H_

#include <cstdint>
#include <vector>

#include "common/codec/row_encoding.h"
#include "fuzz/fuzz_util.h"
#include "shard/import/gguf.h"

namespace engram::fuzz {

inline void CheckOpenedGguf(const GgufEngramFile& f) {
  const absl::Status valid = f.layout().Validate();
  FUZZ_CHECK(valid.ok(), valid.ToString());
  for (int l = 0; l < f.n_layers(); ++l) {
    const absl::StatusOr<int> rb = EncodedRowBytes(f.encoding(l), f.head_dim(l), f.scale_block(l));
    FUZZ_CHECK(rb.ok() && *rb == f.row_bytes(l), "row bytes follow from the encoding");
    std::vector<uint8_t> row(static_cast<size_t>(*rb));
    for (uint64_t r : {uint64_t{0}, f.rows(l) - 1}) {
      const absl::Status s = f.ReadRows(l, r, 1, row.data());
      FUZZ_CHECK(s.ok(), s.ToString());
    }
  }
}

}  // namespace engram::fuzz

#endif  // ENGRAM_FUZZ_GGUF_CHECKS_H_
