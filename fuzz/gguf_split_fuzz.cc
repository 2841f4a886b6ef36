// Fuzz target: a split GGUF set (shard/import/gguf.h): the input is two split
// files, a 4-byte little-endian length of the first then both, written as
// NAME-00001-of-00002.gguf and NAME-00002-of-00002.gguf in a scratch
// directory, and GgufEngramFile::Open is called on the second (any split
// opens the set). Its split keys (split.no, split.count,
// split.tensors.count), the Engram metadata of the first split and tables
// that live in either are all read. What it opens has a valid layout, row
// bytes that follow from each layer's encoding, and readable first and last
// rows.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/gguf_checks.h"
#include "shard/import/gguf.h"

namespace {

const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string tmpl = "/tmp/engram-gguf-split-fuzz.XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    return tmpl;
  }();
  return dir;
}

void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  FUZZ_CHECK(out.good(), path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  if (size < 4) return 0;
  uint32_t first = 0;
  std::memcpy(&first, data, 4);
  data += 4;
  size -= 4;
  if (first > size) first = static_cast<uint32_t>(size);
  const std::string base = ScratchDir() + "/set-0000";
  WriteFile(base + "1-of-00002.gguf", data, first);
  WriteFile(base + "2-of-00002.gguf", data + first, size - first);

  const absl::StatusOr<std::unique_ptr<GgufEngramFile>> f =
      GgufEngramFile::Open(base + "2-of-00002.gguf");
  if (!f.ok()) {
    FUZZ_CHECK(f.status().code() == absl::StatusCode::kInvalidArgument ||
                   f.status().code() == absl::StatusCode::kDataLoss ||
                   f.status().code() == absl::StatusCode::kNotFound,
               f.status().ToString());
    return 0;
  }
  FUZZ_CHECK((*f)->files().size() == 2, "both splits");
  fuzz::CheckOpenedGguf(**f);
  return 0;
}
