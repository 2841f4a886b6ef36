// Fuzz target: the shard server's decoding of a Lookup request
// (wire::ParseLookupRequest, proto/wire.h), the bytes every gRPC call and
// row stream frame hands it. Beyond "no crash" it checks that the parse of
// one contiguous span, the parse of the same bytes in three gRPC slices and
// protobuf's own parser agree on every input (protobuf parsing
// LookupRequestBytes, fuzz/lookup_bytes.proto: the same message with the
// table as bytes, since the codec does not check UTF-8), and that a parsed
// request re-encodes (EncodeLookupRequest) to one that parses the same.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "grpcpp/support/byte_buffer.h"
#include "lookup_bytes.pb.h"
#include "proto/wire.h"

namespace engram::fuzz {
namespace {

// Small enough that the corpus reaches it: over it, ResourceExhausted.
constexpr size_t kMaxRows = 64;

using Layers = std::vector<std::pair<uint32_t, std::vector<uint64_t>>>;

Layers FromQuery(const wire::LookupQuery& q) {
  Layers out;
  for (const wire::LayerRange& l : q.layers) {
    out.emplace_back(
        l.layer, std::vector<uint64_t>(q.ids.begin() + l.begin, q.ids.begin() + l.begin + l.count));
  }
  return out;
}

// Protobuf's entries with row ids (the codec keeps only those), and the
// highest layer of the others (-1: none).
Layers FromProto(const LookupRequestBytes& r, int64_t* max_empty_layer) {
  Layers out;
  *max_empty_layer = -1;
  for (const LayerRowsBytes& l : r.layers()) {
    if (l.row_ids().empty()) {
      *max_empty_layer = std::max(*max_empty_layer, int64_t{l.layer()});
      continue;
    }
    out.emplace_back(l.layer(), std::vector<uint64_t>(l.row_ids().begin(), l.row_ids().end()));
  }
  return out;
}

// The input in three slices (some possibly empty), cut where its bytes say.
grpc::ByteBuffer Sliced(const uint8_t* data, size_t size) {
  const size_t a = size == 0 ? 0 : data[0] % (size + 1);
  const size_t b = a + (size - a) / 2;
  grpc::Slice slices[3] = {grpc::Slice(data, a), grpc::Slice(data + a, b - a),
                           grpc::Slice(data + b, size - b)};
  return grpc::ByteBuffer(slices, 3);
}

}  // namespace
}  // namespace engram::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  using namespace engram::fuzz;
  wire::LookupQuery q;
  const absl::Status s =
      wire::ParseLookupRequest(std::span<const uint8_t>(data, size), kMaxRows, &q);
  FUZZ_CHECK(s.ok() || s.code() == absl::StatusCode::kInvalidArgument ||
                 s.code() == absl::StatusCode::kResourceExhausted,
             s.ToString());

  wire::LookupQuery sliced;
  const absl::Status s2 = wire::ParseLookupRequest(Sliced(data, size), kMaxRows, &sliced);
  FUZZ_CHECK(s2 == s, absl::StrCat(s.ToString(), " vs sliced ", s2.ToString()));

  LookupRequestBytes pb;
  const bool pb_ok = pb.ParseFromArray(data, static_cast<int>(size));
  size_t pb_ids = 0;
  for (const LayerRowsBytes& l : pb.layers()) pb_ids += l.row_ids_size();
  if (s.ok()) {
    FUZZ_CHECK(q.ids.size() <= kMaxRows, "more ids than max_rows");
    FUZZ_CHECK(
        sliced.table == q.table && sliced.version == q.version && FromQuery(sliced) == FromQuery(q),
        "the sliced parse differs");
    FUZZ_CHECK(pb_ok, "protobuf refuses what we accept");
    FUZZ_CHECK(pb.table() == q.table, "table differs from protobuf's");
    FUZZ_CHECK(pb.version() == q.version, "version differs from protobuf's");
    FUZZ_CHECK(pb.source_checksum() == q.source_checksum,
               "source_checksum differs from protobuf's");
    int64_t pb_max_empty = -1;
    FUZZ_CHECK(FromProto(pb, &pb_max_empty) == FromQuery(q), "layers differ from protobuf's");
    FUZZ_CHECK(pb_max_empty == q.max_empty_layer, "empty layers differ from protobuf's");
    FUZZ_CHECK(
        sliced.source_checksum == q.source_checksum && sliced.max_empty_layer == q.max_empty_layer,
        "the sliced parse differs");
    std::vector<wire::LayerRowIds> layers;
    for (const wire::LayerRange& l : q.layers) {
      layers.push_back({l.layer, std::span<const uint64_t>(q.ids.data() + l.begin, l.count)});
    }
    const grpc::Slice encoded =
        wire::EncodeLookupRequest(q.table, q.version, layers, q.source_checksum);
    wire::LookupQuery again;
    const absl::Status s3 = wire::ParseLookupRequest(
        std::span<const uint8_t>(encoded.begin(), encoded.size()), kMaxRows, &again);
    FUZZ_CHECK(s3.ok(), s3.ToString());
    FUZZ_CHECK(again.table == q.table && again.version == q.version &&
                   again.source_checksum == q.source_checksum && FromQuery(again) == FromQuery(q),
               "the re-encoded request parses differently");
  } else if (s.code() == absl::StatusCode::kResourceExhausted) {
    FUZZ_CHECK(!pb_ok || pb_ids > kMaxRows, "ResourceExhausted for a request within max_rows");
  } else {
    FUZZ_CHECK(!pb_ok, absl::StrCat("protobuf accepts what we refuse: ", s.ToString()));
  }
  return 0;
}
