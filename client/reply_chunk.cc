#include "client/reply_chunk.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"

namespace engram {

absl::Status ReplyChunk::Decode(const grpc::ByteBuffer& response, uint64_t version) {
  ASSIGN_OR_RETURN(uint64_t v, wire::LocateLookupResponseRows(response, rows_bytes(), &rows));
  if (v != version) {  // never rows of another version
    return absl::FailedPreconditionError(
        absl::StrCat("answered with table version ", v, ", asked for ", version));
  }
  MapRows();
  return absl::OkStatus();
}

void ReplyChunk::MapRows() {
  size_t max_rb = 0;
  for (const Piece& p : pieces) max_rb = std::max(max_rb, p.row_bytes);
  const std::vector<std::span<const uint8_t>>& spans = rows.spans;
  straddle.resize(spans.size() * max_rb);  // never grows while in use below
  uint8_t* next_straddle = straddle.data();
  size_t span = 0, at = 0;  // position in spans
  for (const Piece& piece : pieces) {
    const size_t rb = piece.row_bytes;
    for (size_t j = 0; j < piece.count; ++j) {
      while (at == spans[span].size()) {
        ++span;
        at = 0;
      }
      if (spans[span].size() - at >= rb) {
        piece.dst[j] = spans[span].data() + at;
        at += rb;
        continue;
      }
      piece.dst[j] = next_straddle;
      for (size_t need = rb; need > 0;) {
        if (at == spans[span].size()) {
          ++span;
          at = 0;
        }
        const size_t take = std::min(need, spans[span].size() - at);
        std::memcpy(next_straddle + (rb - need), spans[span].data() + at, take);
        at += take;
        need -= take;
      }
      next_straddle += rb;
    }
  }
}

}  // namespace engram
