// The wire's seeds: Lookup requests and responses as EncodeLookupRequest,
// NewLookupResponse and protobuf serialize them, row stream conversations
// (EncodeHello, EncodeHeader), and hand-made edge cases ("edge-*"):
// unpacked ids, unknown fields and groups, truncation, a repeated rows
// field, an over-long tag.
#include <string>
#include <vector>

#include "common/gen/table_gen.h"
#include "engram/v1/engram_store.pb.h"
#include "fuzz/make_corpus.h"
#include "proto/stream_wire.h"
#include "proto/wire.h"

namespace engram::fuzz {
namespace {

std::string ToString(const grpc::Slice& s) {
  return std::string(reinterpret_cast<const char*>(s.begin()), s.size());
}

std::string Request(const std::string& table, uint64_t version,
                    const std::vector<std::vector<uint64_t>>& layers) {
  std::vector<wire::LayerRowIds> l;
  for (size_t i = 0; i < layers.size(); ++i) {
    l.push_back({static_cast<uint32_t>(i), std::span<const uint64_t>(layers[i])});
  }
  return ToString(wire::EncodeLookupRequest(table, version, l));
}

std::string Response(uint64_t version, size_t rows) {
  uint8_t* p = nullptr;
  const grpc::Slice s = wire::NewLookupResponse(version, rows * 66, &p);
  if (rows > 0) GenerateRows(3, 0, 0, rows, 64, 32, p);
  return ToString(s);
}

std::string Frame(uint32_t id, uint32_t word, const std::string& payload) {
  uint8_t head[stream::kHeaderBytes];
  stream::EncodeHeader({id, word, payload.size()}, head);
  return std::string(reinterpret_cast<const char*>(head), sizeof(head)) + payload;
}

std::string Hello(uint32_t version, uint32_t token_bytes = 0) {
  uint8_t hello[stream::kHelloBytes];
  stream::EncodeHello(version, hello, token_bytes);
  return std::string(reinterpret_cast<const char*>(hello), sizeof(hello));
}

}  // namespace

void WriteWireSeeds(const std::string& corpus) {
  const std::string req = "wire_request_fuzz";
  const std::string typical = Request("fuzz-tiny", 1, {{0, 3, 6, 9, 16}, {1, 300, 1u << 20}});
  WriteSeed(corpus, req, "typical.bin", typical);
  WriteSeed(corpus, req, "empty.bin", "");
  WriteSeed(corpus, req, "no-table-any-version.bin", Request("", 0, {{5}, {}, {7, 7, 7}}));
  v1::LookupRequest pb;
  pb.set_table("t");
  pb.set_version(~uint64_t{0});
  v1::LayerRows* l = pb.add_layers();
  l->set_layer(0xffffffffu);
  for (uint64_t id : {uint64_t{0}, ~uint64_t{0}, uint64_t{1} << 48}) l->add_row_ids(id);
  WriteSeed(corpus, req, "protobuf-extremes.bin", pb.SerializeAsString());
  // Layer 2 with ids 5 and 6 unpacked (field 2, varint), then an unknown
  // fixed32 field 9, then an unknown group 7 holding a varint field 1.
  WriteSeed(corpus, req, "edge-unpacked-unknown-group.bin",
            std::string("\x1a\x06\x08\x02\x10\x05\x10\x06"
                        "\x4d\x01\x02\x03\x04"
                        "\x3b\x08\x01\x3c",
                        16));
  WriteSeed(corpus, req, "edge-truncated.bin", typical.substr(0, typical.size() - 3));
  // Version 7 under a 5-byte tag whose value is over 32 bits (protobuf
  // keeps the low 32: wire_response_fuzz found the codec refusing it).
  WriteSeed(corpus, req, "edge-five-byte-tag.bin", std::string("\x90\x80\x80\x80\x70\x07", 6));

  const std::string resp = "wire_response_fuzz";
  WriteSeed(corpus, resp, "three-rows.bin", Response(1, 3));
  WriteSeed(corpus, resp, "version-0.bin", Response(0, 1));
  WriteSeed(corpus, resp, "empty.bin", "");
  // An unknown varint field 5 first, then rows twice (the last one wins).
  const std::string two = Response(9, 1);
  WriteSeed(corpus, resp, "edge-unknown-then-two-rows.bin",
            std::string("\x28\x7f", 2) + two + two.substr(2));
  WriteSeed(corpus, resp, "edge-truncated.bin", Response(1, 2).substr(0, 40));
  WriteSeed(corpus, resp, "edge-five-byte-tag.bin",
            std::string("\x88\x80\x80\x80\x70\x09", 6) + Response(0, 1));

  const std::string st = "stream_frame_fuzz";
  WriteSeed(corpus, st, "two-requests.bin",
            Hello(stream::kVersion) + Frame(1, stream::kLookup, typical) +
                Frame(2, stream::kLookup, Request("fuzz-tiny", 0, {{4}})));
  WriteSeed(corpus, st, "hello-only.bin", Hello(stream::kVersion));
  WriteSeed(corpus, st, "version-1.bin", Hello(1) + Frame(5, stream::kLookup, typical));
  WriteSeed(corpus, st, "token.bin",
            Hello(stream::kVersion, 12) + "bearer-token" + Frame(1, stream::kLookup, typical));
  WriteSeed(corpus, st, "edge-future-version-unknown-kind.bin", Hello(7) + Frame(1, 9, "xyz"));
  WriteSeed(corpus, st, "edge-payload-past-end.bin",
            Hello(stream::kVersion) + Frame(3, stream::kLookup, typical).substr(0, 30));
}

}  // namespace engram::fuzz
