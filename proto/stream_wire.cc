#include "proto/stream_wire.h"

#include <cstring>

#include "absl/base/config.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace engram::stream {
namespace {

#if !defined(ABSL_IS_LITTLE_ENDIAN)
#error "the row stream codec assumes a little-endian host"
#endif

constexpr char kMagic[8] = {'E', 'N', 'G', 'R', 'A', 'M', 'R', 'S'};

void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

void EncodeHello(uint32_t version, uint8_t out[kHelloBytes], uint32_t token_bytes) {
  std::memcpy(out, kMagic, sizeof(kMagic));
  Put32(out + 8, version);
  Put32(out + 12, token_bytes);
}

absl::StatusOr<uint32_t> DecodeHello(const uint8_t in[kHelloBytes]) {
  if (std::memcmp(in, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an Engram row stream: its first bytes are \"",
                     absl::CHexEscape(absl::string_view(reinterpret_cast<const char*>(in), 8)),
                     "\", not \"ENGRAMRS\"",
                     in[0] >= 0x14 && in[0] <= 0x17 && in[1] == 0x03
                         ? " (a TLS record: this row stream speaks TLS; give the client its CA)"
                         : ""));
  }
  const uint32_t version = Get32(in + 8);
  if (version == 0) return absl::InvalidArgumentError("row stream hello with version 0");
  return version;
}

absl::StatusOr<uint32_t> DecodeHelloTokenBytes(const uint8_t in[kHelloBytes]) {
  if (Get32(in + 8) < 2) return 0;
  const uint32_t bytes = Get32(in + 12);
  if (bytes > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("row stream hello announces a token of ", bytes,
                                                   " bytes (at most ", kMaxTokenBytes, ")"));
  }
  return bytes;
}

void EncodeHeader(const FrameHeader& header, uint8_t out[kHeaderBytes]) {
  Put32(out, header.id);
  Put32(out + 4, header.word);
  Put64(out + 8, header.payload_bytes);
}

uint64_t DecodeTimeoutMicros(const uint8_t in[kTimeoutBytes]) { return Get64(in); }
void EncodeTimeoutMicros(uint64_t timeout_us, uint8_t out[kTimeoutBytes]) {
  Put64(out, timeout_us);
}

FrameHeader DecodeHeader(const uint8_t in[kHeaderBytes]) {
  return FrameHeader{Get32(in), Get32(in + 4), Get64(in + 8)};
}

}  // namespace engram::stream
