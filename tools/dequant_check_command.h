// engramctl dequant-check: replays GGUF dequantisation golden files (the
// format of tests/golden/README.md, "GGUF block types") through the row
// decoders of common/codec/row_encoding.h: every row of every type, decoded to f32
// (bit for bit; the files write ggml's -0 as 0, so a zero matches either
// zero) and to bf16 (the nearest-even rounding of each expected f32).
//
//   dequant-check FILE.json...
//
// Prints one line per type of each file, "ok   FILE Q8_0: 6 rows of 256
// values" or "FAIL FILE Q2_K: 1 of 6 rows differ; first: ...", then
// "N passed, M failed" counting rows, and exits 0 when M is 0, else 1. A
// type this build cannot decode, or whose block geometry disagrees with
// ours, counts all its rows as failed. A file that is missing, not JSON or
// not such a golden (no "types", a row without "bytes" hex or "f32"
// numbers) is one line on stderr and exit 2.
#ifndef ENGRAM_TOOLS_DEQUANT_CHECK_COMMAND_H_
#define ENGRAM_TOOLS_DEQUANT_CHECK_COMMAND_H_

#include <string>
#include <vector>

namespace engram {

int DequantCheckCommand(const std::vector<std::string>& files);

}  // namespace engram

#endif  // ENGRAM_TOOLS_DEQUANT_CHECK_COMMAND_H_
