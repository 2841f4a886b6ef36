// Fuzz target: the GGUF reader (shard/import/gguf.h) on an input that is a whole
// model file, held in a memfd: ReadGgufHeader on its descriptor, then
// GgufEngramFile::Open on its /proc/self/fd path (the deepseek41 Engram
// layout built from the metadata). A header it accepts has an aligned data
// section inside the file and aligned tensor offsets; a file it opens has
// a valid layout, row bytes that follow from each layer's encoding, and the
// first and last row of every layer can be read.
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/gguf_checks.h"
#include "shard/import/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  const fuzz::MemFile file(data, size);
  const absl::StatusOr<GgufHeader> h = ReadGgufHeader(file.fd(), "fuzz");
  if (!h.ok()) {
    FUZZ_CHECK(h.status().code() == absl::StatusCode::kInvalidArgument ||
                   h.status().code() == absl::StatusCode::kDataLoss,
               h.status().ToString());
    return 0;
  }
  FUZZ_CHECK(h->file_size == size && h->data_start <= size, "data section");
  FUZZ_CHECK(h->alignment != 0 && h->data_start % h->alignment == 0, "data alignment");
  for (const GgufTensorInfo& t : h->tensors) {
    FUZZ_CHECK(t.offset % h->alignment == 0 && t.dims.size() <= 8, t.name);
  }

  const absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = GgufEngramFile::Open(file.path());
  if (!f.ok()) {
    FUZZ_CHECK(f.status().code() == absl::StatusCode::kInvalidArgument ||
                   f.status().code() == absl::StatusCode::kDataLoss,
               f.status().ToString());
    return 0;
  }
  fuzz::CheckOpenedGguf(**f);
  return 0;
}
