// The row stream: engram.v1.EngramStore/Lookup carried over a plain TCP
// connection instead of HTTP/2 (docs/wire-protocol.md, "Row stream").
//
// A shard server offers it on a port of its own, which it advertises in
// InfoResponse.stream_port. The messages are the same serialized
// LookupRequest / LookupResponse bytes the gRPC method carries
// (proto/wire.h); the stream only frames them. All integers are little
// endian.
//
//   connection: [TLS handshake,] client hello, server hello, then frames
//   hello:      "ENGRAMRS" u32 version u32 token_bytes  (16 bytes)
//               then, from a client of version >= 2, token_bytes of its
//               bearer token (none: 0)
//   request:    u32 id  u32 kind    u64 payload_bytes   then the payload
//               (kind kLookupTimed, version >= 3: the payload starts with
//               u64 timeout_us, the caller's time left, then the request)
//   response:   u32 id  u32 status  u64 payload_bytes   then the payload
//
// The client's hello names the highest version it speaks; the server
// answers with the version both will use (at most the client's; its own
// hello's token_bytes is 0) or closes the connection after answering with
// its own when it cannot serve the client's. A server that requires a
// token and gets none or a wrong one answers its hello, then one response
// with id kConnectionError (UNAUTHENTICATED and why), and closes. With TLS
// on, the whole connection, hello included, runs inside TLS
// (common/net/tls.h). A request's kind is kLookup and its payload a LookupRequest,
// or (version >= 3) kLookupTimed, the same after the time the caller still
// waits: the server reads no rows for it from disk once that has passed
// (counted from the frame's arrival, so the hosts' clocks need not agree);
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

// 1: the first; 2: the client's hello carries its bearer token; 3: requests
// may carry their timeout (kLookupTimed).
inline constexpr uint32_t kVersion = 3;
inline constexpr size_t kHelloBytes = 16;
// Longest token a hello may carry.
inline constexpr uint32_t kMaxTokenBytes = 4096;
// The id of a response that answers no request: the connection's error,
// sent before the server closes it. Clients never use it for a request.
inline constexpr uint32_t kConnectionError = 0xFFFFFFFF;
inline constexpr size_t kHeaderBytes = 16;
// Error messages longer than this are cut.
inline constexpr size_t kMaxErrorBytes = 4096;

enum Kind : uint32_t { kLookup = 1, kLookupTimed = 2 };
// Bytes of a kLookupTimed payload's timeout, before the request.
inline constexpr size_t kTimeoutBytes = 8;
// The timeout a kLookupTimed payload starts with, and its encoding.
uint64_t DecodeTimeoutMicros(const uint8_t in[kTimeoutBytes]);
void EncodeTimeoutMicros(uint64_t timeout_us, uint8_t out[kTimeoutBytes]);

// `token_bytes`: the length of the token that follows (clients of version
// >= 2; 0 for none and in a server's hello).
void EncodeHello(uint32_t version, uint8_t out[kHelloBytes], uint32_t token_bytes = 0);
// The version in a hello. InvalidArgument when the bytes are not one.
absl::StatusOr<uint32_t> DecodeHello(const uint8_t in[kHelloBytes]);
// The length of the token after a client's hello of version >= 2 (0 for
// version 1). InvalidArgument above kMaxTokenBytes.
absl::StatusOr<uint32_t> DecodeHelloTokenBytes(const uint8_t in[kHelloBytes]);

struct FrameHeader {
  uint32_t id = 0;    // the request's, echoed by its response
  uint32_t word = 0;  // request: a Kind; response: a gRPC status code
  uint64_t payload_bytes = 0;
};
void EncodeHeader(const FrameHeader& header, uint8_t out[kHeaderBytes]);
FrameHeader DecodeHeader(const uint8_t in[kHeaderBytes]);

}  // namespace engram::stream

#endif  // ENGRAM_PROTO_STREAM_WIRE_H_
