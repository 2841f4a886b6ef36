// Minimal safetensors header codec.
//
// File layout: an 8-byte little-endian u64 N, N bytes of JSON header
//   {"<name>": {"dtype": "...", "shape": [...], "data_offsets": [b, e]}, ...,
//    "__metadata__": {"k": "v"}}
// then the data section; offsets are relative to the data section start
// (8 + N). Only the header is handled here; tensor bytes are read and written
// by the caller (pread/pwrite at data_start + begin).
#ifndef ENGRAM_COMMON_FORMAT_SAFETENSORS_H_
#define ENGRAM_COMMON_FORMAT_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace engram {

// Headers longer than this are rejected as corrupt.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // e.g. "F8_E4M3", "F8_E8M0", "BF16"
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // byte range within the data section
  uint64_t end = 0;

  uint64_t num_elements() const;
  uint64_t num_bytes() const { return end - begin; }
};

// A parsed header. Tensors are kept in file-data order (ascending begin).
struct SafetensorsHeader {
  uint64_t data_start = 0;  // absolute file offset of the data section
  uint64_t file_size = 0;
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;

  // The tensor called `name`, or nullptr.
  const SafetensorsTensor* Find(std::string_view name) const;
};

// Bits per element of a safetensors dtype name (e.g. 8 for "F8_E4M3", 4 for
// "F4"), or 0 if the dtype is unknown.
int SafetensorsDtypeBits(std::string_view dtype);

// Parses a header. `file_prefix` must hold at least the first 8 + N bytes of
// the file (the length word and the JSON). Checks: N <= 100 MB and 8 + N <=
// file_size; valid JSON object; every tensor has a string dtype, a shape of
// non-negative integers whose product fits 64 bits and data_offsets
// [begin, end] with begin <= end; JSON nested at most kMaxJsonDepth deep;
// tensor ranges neither overlap nor extend past file_size; for a known dtype
// the byte extent equals ceil(elements * bits / 8). Unknown dtypes are
// accepted (other tensors of a real checkpoint are tolerated). Errors are
// InvalidArgument, or DataLoss when data extends past the end of the file
// (a truncated file); messages start with `what` (e.g. the file name).
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file_prefix,
                                                         uint64_t file_size, std::string_view what);

// Reads and parses the header of the open file `fd` (pread; does not move
// the file offset). `what` names the file in error messages.
absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(int fd, std::string_view what);
// Opens `path`, reads its header, closes it.
absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path);

// Serialises a header: the 8-byte length followed by the JSON, padded with
// spaces so data_start is a multiple of 8. Tensor begin/end are taken as
// given (relative to the data section). Returns the bytes to write at file
// offset 0; the data section starts at the returned size.
std::string BuildSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                   const std::map<std::string, std::string>& metadata);

// Parses a sharded checkpoint's model.safetensors.index.json: its
// "weight_map" (tensor name -> file name, a plain name inside the
// checkpoint directory). InvalidArgument naming `what` for anything else
// (not JSON, no weight_map object, a value that is not a string or leaves
// the directory).
absl::StatusOr<std::map<std::string, std::string, std::less<>>> ParseSafetensorsIndex(
    std::string_view text, std::string_view what);

// Positional I/O helpers for tensor data (retry on EINTR and short
// transfers; do not move the file offset; safe to call concurrently).
// PreadFully: DataLoss at end of file. `what` names the file in errors.
absl::Status PreadFully(int fd, void* buf, size_t n, uint64_t offset, std::string_view what);
absl::Status PwriteFully(int fd, const void* buf, size_t n, uint64_t offset, std::string_view what);

}  // namespace engram

#endif  // ENGRAM_COMMON_FORMAT_SAFETENSORS_H_
