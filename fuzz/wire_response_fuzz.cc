// Fuzz target: the client's decoding of a Lookup response
// (wire::DecodeLookupResponse and wire::LocateLookupResponseRows,
// proto/wire.h), the bytes a shard sends back. Each input is decoded
// expecting the rows length protobuf's parser finds in it and, separately,
// a length derived from the input; the contiguous decode, the decode of
// the same bytes in three gRPC slices and the in-place location of the rows
// must agree with each other and with protobuf's engram.v1.LookupResponse.
#include <cstdint>
#include <string>
#include <vector>

#include "engram/v1/engram_store.pb.h"
#include "fuzz/fuzz_util.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/wire.h"

namespace engram::fuzz {
namespace {

grpc::ByteBuffer Sliced(const uint8_t* data, size_t size) {
  const size_t a = size == 0 ? 0 : data[size - 1] % (size + 1);
  const size_t b = a + (size - a) / 3;
  grpc::Slice slices[3] = {grpc::Slice(data, a), grpc::Slice(data + a, b - a),
                           grpc::Slice(data + b, size - b)};
  return grpc::ByteBuffer(slices, 3);
}

// Decodes the input three ways expecting `rows_bytes` row bytes, checks
// they agree (and with `pb`, protobuf's parse, if given); returns the status.
absl::Status Check(const uint8_t* data, size_t size, size_t rows_bytes,
                   const v1::LookupResponse* pb) {
  const std::span<const uint8_t> bytes(data, size);
  std::string rows(rows_bytes, '\0');
  const absl::StatusOr<uint64_t> v = wire::DecodeLookupResponse(
      bytes, std::span<uint8_t>(reinterpret_cast<uint8_t*>(rows.data()), rows.size()));
  FUZZ_CHECK(v.ok() || v.status().code() == absl::StatusCode::kInternal, v.status().ToString());

  const grpc::ByteBuffer buffer = Sliced(data, size);
  std::string rows2(rows_bytes, '\0');
  const absl::StatusOr<uint64_t> v2 = wire::DecodeLookupResponse(
      buffer, std::span<uint8_t>(reinterpret_cast<uint8_t*>(rows2.data()), rows2.size()));
  FUZZ_CHECK(v.status() == v2.status(), v2.status().ToString());

  wire::ResponseRows located;
  const absl::StatusOr<uint64_t> v3 = wire::LocateLookupResponseRows(buffer, rows_bytes, &located);
  FUZZ_CHECK(v.status() == v3.status(), v3.status().ToString());
  if (!v.ok()) return v.status();

  FUZZ_CHECK(*v2 == *v && *v3 == *v, "versions differ");
  FUZZ_CHECK(rows2 == rows, "the sliced decode copies other rows");
  std::string joined;
  for (const std::span<const uint8_t>& s : located.spans) {
    joined.append(reinterpret_cast<const char*>(s.data()), s.size());
  }
  FUZZ_CHECK(joined == rows, "the located rows differ from the copied ones");
  if (pb != nullptr) {
    FUZZ_CHECK(pb->version() == *v && pb->rows() == rows, "differs from protobuf's parse");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace engram::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  v1::LookupResponse pb;
  if (pb.ParseFromArray(data, static_cast<int>(size))) {
    // protobuf accepts it: so must we, with the same version and rows.
    const absl::Status s = fuzz::Check(data, size, pb.rows().size(), &pb);
    FUZZ_CHECK(s.ok(), absl::StrCat("protobuf accepts what we refuse: ", s.ToString()));
  }
  (void)fuzz::Check(data, size, size == 0 ? 0 : data[0] % (size + 1), nullptr);
  return 0;
}
