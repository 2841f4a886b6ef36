// The row stream: engram.v1.EngramStore/Lookup carried over a plain TCP
// connection instead of HTTP/2 (docs/wire-protocol.md, "Row stream").
//
// A shard server offers it on a port of its own, which it advertises in
// InfoResponse.stream_port. The messages are the same serialized
// LookupRequest / LookupResponse bytes the gRPC method carries
// (proto/wire.h); the stream only frames them. All integers are little
// endian.
//
//   connection: client hello, server hello, then frames both ways
//   hello:      "ENGRAMRS" u32 version u32 0           (16 bytes)
//   request:    u32 id  u32 kind    u64 payload_bytes   then the payload
//   response:   u32 id  u32 status  u64 payload_bytes   then the payload
//
// The client's hello names the highest version it speaks; the server
// answers with the version both will use (at most the client's) or closes
// the connection after answering with its own when it cannot serve the
// client's. A request's kind is kLookup and its payload a LookupRequest;
// a response echoes the request's id, with status 0 (OK) and a
// LookupResponse, or a gRPC status code and the error message (UTF-8).
// Responses may come back in any order. A malformed frame closes the
// connection, after an error response naming the problem when the
// request's id is known.
//
// Pure functions of their arguments; thread-safe.
#ifndef ENGRAM_PROTO_STREAM_WIRE_H_
#define ENGRAM_PROTO_STREAM_WIRE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace engram::stream {

inline constexpr uint32_t kVersion = 1;  // the only version so far
inline constexpr size_t kHelloBytes = 16;
inline constexpr size_t kHeaderBytes = 16;
// Error messages longer than this are cut.
inline constexpr size_t kMaxErrorBytes = 4096;

enum Kind : uint32_t { kLookup = 1 };

void EncodeHello(uint32_t version, uint8_t out[kHelloBytes]);
// The version in a hello. InvalidArgument when the bytes are not one.
absl::StatusOr<uint32_t> DecodeHello(const uint8_t in[kHelloBytes]);

struct FrameHeader {
  uint32_t id = 0;    // the request's, echoed by its response
  uint32_t word = 0;  // request: a Kind; response: a gRPC status code
  uint64_t payload_bytes = 0;
};
void EncodeHeader(const FrameHeader& header, uint8_t out[kHeaderBytes]);
FrameHeader DecodeHeader(const uint8_t in[kHeaderBytes]);

}  // namespace engram::stream

#endif  // ENGRAM_PROTO_STREAM_WIRE_H_
