// Fuzz target: the row stream as a shard server reads it off a socket
// (proto/stream_wire.h): a client hello (and the bearer token a version 2
// hello announces), then request frames, each payload a LookupRequest for
// wire::ParseLookupRequest. The loop follows service/stream_server.cc's
// (unknown kind or oversized payload: stop). Checks that a decoded hello
// never names version 0 or a token over kMaxTokenBytes, that it re-encodes
// to the same version and token length, and that frame headers re-encode
// to their bytes.
#include <cstdint>
#include <cstring>

#include "fuzz/fuzz_util.h"
#include "proto/stream_wire.h"
#include "proto/wire.h"

namespace {

constexpr size_t kMaxRequestBytes = size_t{1} << 20;
constexpr size_t kMaxRows = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  if (size < stream::kHelloBytes) return 0;
  const absl::StatusOr<uint32_t> version = stream::DecodeHello(data);
  if (!version.ok()) {
    FUZZ_CHECK(version.status().code() == absl::StatusCode::kInvalidArgument,
               version.status().ToString());
    return 0;
  }
  FUZZ_CHECK(*version != 0, "a hello of version 0 decoded");
  const absl::StatusOr<uint32_t> token = stream::DecodeHelloTokenBytes(data);
  if (!token.ok()) {
    FUZZ_CHECK(token.status().code() == absl::StatusCode::kInvalidArgument,
               token.status().ToString());
    return 0;
  }
  FUZZ_CHECK(*token <= stream::kMaxTokenBytes && (*version >= 2 || *token == 0),
             absl::StrCat("token of ", *token, " bytes in a hello of version ", *version));
  uint8_t hello[stream::kHelloBytes];
  stream::EncodeHello(*version, hello, *token);
  FUZZ_CHECK(stream::DecodeHello(hello).value_or(0) == *version &&
                 stream::DecodeHelloTokenBytes(hello).value_or(~0u) == *token,
             "hello round trip");
  if (*token > size - stream::kHelloBytes) return 0;  // closed inside the token

  size_t pos = stream::kHelloBytes + *token;
  wire::LookupQuery query;
  while (size - pos >= stream::kHeaderBytes) {
    const stream::FrameHeader h = stream::DecodeHeader(data + pos);
    uint8_t again[stream::kHeaderBytes];
    stream::EncodeHeader(h, again);
    FUZZ_CHECK(std::memcmp(again, data + pos, sizeof(again)) == 0, "header round trip");
    pos += stream::kHeaderBytes;
    if (h.word != stream::kLookup || h.payload_bytes > kMaxRequestBytes) break;
    if (h.payload_bytes > size - pos) break;  // the connection closed mid-frame
    const absl::Status s = wire::ParseLookupRequest(
        std::span<const uint8_t>(data + pos, h.payload_bytes), kMaxRows, &query);
    FUZZ_CHECK(s.ok() || s.code() == absl::StatusCode::kInvalidArgument ||
                   s.code() == absl::StatusCode::kResourceExhausted,
               s.ToString());
    pos += h.payload_bytes;
  }
  return 0;
}
