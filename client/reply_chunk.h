// ReplyChunk: the rows one Lookup RPC of a step asked for, and its reply,
// held so that the rows are read in place until the step is done with them.
// Internal to the client library (client/step_engine.h owns them).
//
// The rows asked for are pieces of the step's layers (one piece per layer,
// in request order); each piece names where its rows' addresses go. The
// reply is decoded without copying rows: a row that straddles two of the
// reply's slices is copied whole into `straddle` (at most one row per slice
// boundary). Not thread-safe: one thread fills the pieces before the RPC
// starts, the thread that completes the RPC decodes.
#ifndef ENGRAM_CLIENT_REPLY_CHUNK_H_
#define ENGRAM_CLIENT_REPLY_CHUNK_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/wire.h"

namespace engram {

struct ReplyChunk {
  struct Piece {
    int layer = 0;
    size_t count = 0;
    size_t row_bytes = 0;
    const uint8_t** dst = nullptr;  // count row addresses, written by MapRows
  };
  std::vector<Piece> pieces;
  wire::ResponseRows rows;
  std::vector<uint8_t> straddle;

  // Bytes of all the pieces' rows.
  size_t rows_bytes() const {
    size_t n = 0;
    for (const Piece& p : pieces) n += p.count * p.row_bytes;
    return n;
  }
  // Finds the rows field of `response` in place and maps it (MapRows).
  // FailedPrecondition when it answers another table version than
  // `version` (never rows of another version); the codec's error when it is
  // malformed or its rows are not rows_bytes().
  absl::Status Decode(const grpc::ByteBuffer& response, uint64_t version);
  // Points each piece's dst[j] at row j's bytes in rows.spans (the rows
  // field, in request order), or at a whole copy in `straddle` for a row
  // split across two spans. REQUIRES: the spans total rows_bytes().
  void MapRows();
  // Forgets the pieces and gives the reply's buffers back (to gRPC or the
  // row stream's pool); keeps the vectors' capacity.
  void Clear() {
    pieces.clear();
    rows.slices.clear();
    rows.spans.clear();
  }
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_REPLY_CHUNK_H_
