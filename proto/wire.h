// Hand codec for the hot messages of engram.v1.EngramStore/Lookup.
//
// Lookup carries rows as raw grpc::ByteBuffers instead of protobuf messages:
// a protobuf `bytes` field costs a serialize copy on one side and a parse
// copy on the other (the cost: docs/benchmarks.md, "Shard server"). This
// codec produces and consumes the exact protobuf wire format of
// LookupRequest / LookupResponse (so grpcurl, other languages and
// protobuf's own parser keep working) while touching the row bytes once:
//
//   server: ParseLookupRequest   -> ids in one contiguous array
//           NewLookupResponse    -> one slice of the exact response size;
//                                   rows are gathered straight into it
//   client: EncodeLookupRequest  -> one slice, packed ids
//           DecodeLookupResponse -> rows copied once, slice by slice, into
//                                   the caller's buffer (no flattening)
//
// Everything here is a pure function of its arguments: thread-safe, no
// global state.
#ifndef ENGRAM_PROTO_WIRE_H_
#define ENGRAM_PROTO_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace engram::wire {

// One LayerRows entry of a parsed request: its ids are
// LookupQuery::ids[begin, begin + count).
struct LayerRange {
  uint32_t layer = 0;
  size_t begin = 0;
  size_t count = 0;
};

// A parsed LookupRequest with every layer's row ids in one array, in request
// order. Reusable: Clear() keeps the capacity, so a pooled query parses
// without allocating.
struct LookupQuery {
  std::string table;
  uint64_t version = 0;
  std::string source_checksum;     // empty when the request has none
  uint32_t need_within_us = 0;     // 0 when the request has none
  std::vector<LayerRange> layers;  // in request order (a layer may repeat); none empty
  std::vector<uint64_t> ids;       // all layers' row ids, in request order
  // The highest layer named by a LayerRows entry without row ids (such
  // entries ask for nothing and are not kept in `layers`, so a request of
  // many of them costs no server state); -1 when there is none.
  int64_t max_empty_layer = -1;

  void Clear() {
    table.clear();
    version = 0;
    source_checksum.clear();
    need_within_us = 0;
    layers.clear();
    ids.clear();
    max_empty_layer = -1;
  }
};

// Parses a serialized engram.v1.LookupRequest into *query (cleared first).
// Accepts what protobuf's parser accepts for the message: fields in any
// order, repeated scalars (last one wins), packed or unpacked row_ids,
// unknown fields (including groups) skipped. The table name and source
// checksum are kept as bytes (not UTF-8 checked). LayerRows entries without
// row ids are not kept (LookupQuery::max_empty_layer). Errors: InvalidArgument for malformed input;
// ResourceExhausted as soon as the request holds more than `max_rows` ids
// (so an oversized request is refused before it is fully decoded).
absl::Status ParseLookupRequest(std::span<const uint8_t> bytes, size_t max_rows,
                                LookupQuery* query);
// The same over a received buffer of any slicing, without flattening it.
absl::Status ParseLookupRequest(const grpc::ByteBuffer& buffer, size_t max_rows,
                                LookupQuery* query);

// One layer of a request to encode.
struct LayerRowIds {
  uint32_t layer = 0;
  std::span<const uint64_t> row_ids;
};

// Serializes a LookupRequest (row ids packed) into one slice of exactly its
// size; byte-identical to protobuf's serialization of the same message.
// `need_within_us`: LookupRequest.need_within_us (0 = not sent).
grpc::Slice EncodeLookupRequest(std::string_view table, uint64_t version,
                                std::span<const LayerRowIds> layers,
                                std::string_view source_checksum = {}, uint32_t need_within_us = 0);

// Bytes of a serialized LookupResponse carrying `rows_bytes` row bytes.
size_t LookupResponseSize(uint64_t version, size_t rows_bytes);

// Allocates one slice of exactly LookupResponseSize(version, rows_bytes)
// bytes and writes the LookupResponse framing into it (field 1 = version,
// field 2 tag + length; fields with default values are omitted as protobuf
// omits them). *rows receives the address of the rows field's rows_bytes
// bytes, for the caller to fill before the slice is sent; it stays valid as
// long as any copy of the slice lives. The result is byte-identical to
// protobuf's serialization once the rows are filled in.
grpc::Slice NewLookupResponse(uint64_t version, size_t rows_bytes, uint8_t** rows);
// The same framing written into caller-owned memory `out` of exactly
// LookupResponseSize(version, rows_bytes) bytes (e.g. a pooled buffer);
// returns the address of the rows field's bytes.
uint8_t* WriteLookupResponseFraming(uint64_t version, size_t rows_bytes, uint8_t* out);

// Decodes a serialized LookupResponse held in `buffer` (any slicing):
// copies its rows field once into `rows_out` and returns its version.
// Unknown fields are skipped; a repeated rows field follows protobuf (the
// last one wins). Errors: Internal for a malformed message or when the rows
// field's length differs from rows_out.size() (the message names both).
absl::StatusOr<uint64_t> DecodeLookupResponse(const grpc::ByteBuffer& buffer,
                                              std::span<uint8_t> rows_out);
// The same over contiguous bytes.
absl::StatusOr<uint64_t> DecodeLookupResponse(std::span<const uint8_t> bytes,
                                              std::span<uint8_t> rows_out);

// A LookupResponse's rows field found in place, without copying it: the
// field's bytes, in order, as spans into the response's own slices, which
// `slices` holds references to (so the spans stay valid as long as this
// object keeps them). Reusable: a steady stream of decodes allocates nothing.
struct ResponseRows {
  std::vector<grpc::Slice> slices;
  std::vector<std::span<const uint8_t>> spans;
  std::vector<std::span<const uint8_t>> chunks_scratch;  // internal
};
// Like DecodeLookupResponse(buffer, rows_out) with rows_out.size() ==
// rows_bytes, but fills *rows instead of copying the rows field. The spans
// total rows_bytes on success; on error *rows is unspecified.
absl::StatusOr<uint64_t> LocateLookupResponseRows(const grpc::ByteBuffer& buffer, size_t rows_bytes,
                                                  ResponseRows* rows);

}  // namespace engram::wire

#endif  // ENGRAM_PROTO_WIRE_H_
