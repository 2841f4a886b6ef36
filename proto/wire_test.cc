// The hand codec against protobuf's own serializer and parser.
#include "proto/wire.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engram/v1/engram_store.pb.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"

namespace engram::wire {
namespace {

using Layers = std::vector<std::pair<uint32_t, std::vector<uint64_t>>>;

// A request in a form both codecs can be compared in.
struct Flat {
  Flat(std::string t = {}, uint64_t v = 0, Layers l = {}, std::string checksum = {},
       int64_t max_empty = -1)
      : table(std::move(t)),
        version(v),
        layers(std::move(l)),
        source_checksum(std::move(checksum)),
        max_empty_layer(max_empty) {}
  std::string table;
  uint64_t version = 0;
  Layers layers;
  std::string source_checksum;
  int64_t max_empty_layer = -1;  // Kept() form: the highest layer of a dropped entry
  uint32_t need_within_us = 0;
  bool operator==(const Flat&) const = default;
};

// The request as the codec keeps it: entries without ids dropped, the
// highest layer among them remembered (LookupQuery::max_empty_layer).
Flat Kept(Flat flat) {
  Layers kept;
  for (auto& [layer, ids] : flat.layers) {
    if (ids.empty()) {
      flat.max_empty_layer = std::max(flat.max_empty_layer, int64_t{layer});
    } else {
      kept.emplace_back(layer, std::move(ids));
    }
  }
  flat.layers = std::move(kept);
  return flat;
}

Flat FromProto(const v1::LookupRequest& request) {
  Flat flat{request.table(), request.version(), {}, request.source_checksum()};
  flat.need_within_us = request.need_within_us();
  for (const v1::LayerRows& l : request.layers()) {
    flat.layers.emplace_back(l.layer(),
                             std::vector<uint64_t>(l.row_ids().begin(), l.row_ids().end()));
  }
  return Kept(std::move(flat));
}

Flat FromQuery(const LookupQuery& query) {
  Flat flat{query.table, query.version, {}, query.source_checksum, query.max_empty_layer};
  flat.need_within_us = query.need_within_us;
  for (const LayerRange& l : query.layers) {
    flat.layers.emplace_back(l.layer, std::vector<uint64_t>(query.ids.begin() + l.begin,
                                                            query.ids.begin() + l.begin + l.count));
  }
  return flat;
}

v1::LookupRequest ToProto(const Flat& flat) {
  v1::LookupRequest request;
  request.set_table(flat.table);
  request.set_version(flat.version);
  request.set_source_checksum(flat.source_checksum);
  request.set_need_within_us(flat.need_within_us);
  for (const auto& [layer, ids] : flat.layers) {
    v1::LayerRows* l = request.add_layers();
    l->set_layer(layer);
    for (uint64_t id : ids) l->add_row_ids(id);
  }
  return request;
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string SliceString(const grpc::Slice& slice) {
  return std::string(reinterpret_cast<const char*>(slice.begin()), slice.size());
}

// `bytes` as a ByteBuffer cut at the given offsets (one slice per piece).
grpc::ByteBuffer Split(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t from = 0;
  cuts.push_back(bytes.size());
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.data() + from, cut - from);
    from = cut;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::vector<Flat> SampleRequests() {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> many(5000);
  for (uint64_t& id : many) id = rng() >> (rng() % 64);
  // need_within_us: one byte, the largest, and alone.
  Flat timed{"engram-synthetic", 1, {{0, {3, 5}}, {1, {7}}}, "xxh3_64:0123456789abcdef"};
  timed.need_within_us = 500;
  Flat longest{"t", 2, {{0, {1}}}};
  longest.need_within_us = ~uint32_t{0};
  Flat only;
  only.need_within_us = 1;
  return {
      timed,
      longest,
      only,
      Flat{},
      Flat{"t", 0, {}},
      Flat{"", 3, {{0, {}}}},
      Flat{
          "engram-synthetic", 1, {{0, {0, 1, 127, 128, 16383, 16384}}}, "xxh3_64:0123456789abcdef"},
      Flat{"x", ~uint64_t{0}, {{7, {~uint64_t{0}, 0}}, {0, {5}}, {7, {9}}}},
      Flat{std::string(300, 'n'), 2, {{1, many}, {2, {}}, {3, many}}, std::string(200, 's')},
      Flat{"t", 1, {{9, {}}, {0, {1}}, {4, {}}, {0, {}}}},
  };
}

constexpr size_t kNoLimit = ~size_t{0};

TEST(WireRequest, EncodeMatchesProtobufSerializer) {
  for (const Flat& flat : SampleRequests()) {
    std::vector<LayerRowIds> layers;
    for (const auto& [layer, ids] : flat.layers) layers.push_back({layer, ids});
    const grpc::Slice slice = EncodeLookupRequest(flat.table, flat.version, layers,
                                                  flat.source_checksum, flat.need_within_us);
    EXPECT_EQ(SliceString(slice), ToProto(flat).SerializeAsString());
  }
}

TEST(WireRequest, ParsesProtobufSerialization) {
  LookupQuery query;
  for (const Flat& flat : SampleRequests()) {
    const std::string bytes = ToProto(flat).SerializeAsString();
    ASSERT_TRUE(ParseLookupRequest(Bytes(bytes), kNoLimit, &query).ok());
    EXPECT_EQ(FromQuery(query), Kept(flat));
    // The same through a ByteBuffer cut into three slices.
    const grpc::ByteBuffer buffer = Split(bytes, {bytes.size() / 3, bytes.size() / 2});
    ASSERT_TRUE(ParseLookupRequest(buffer, kNoLimit, &query).ok());
    EXPECT_EQ(FromQuery(query), Kept(flat));
  }
}

TEST(WireRequest, ParsesEverySliceBoundary) {
  const std::string bytes =
      ToProto(Flat{"table", 300, {{1, {1, 300, ~uint64_t{0}}}, {2, {77}}}}).SerializeAsString();
  LookupQuery query;
  for (size_t a = 0; a <= bytes.size(); ++a) {
    for (size_t b = a; b <= bytes.size(); ++b) {
      ASSERT_TRUE(ParseLookupRequest(Split(bytes, {a, b}), kNoLimit, &query).ok()) << a << "," << b;
      ASSERT_EQ(ToProto(FromQuery(query)).SerializeAsString(), bytes);
    }
  }
}

// Encodes with protobuf's CodedOutputStream, for forms its serializer never
// writes (unpacked ids, unknown fields, repeated scalars).
class RawWriter {
 public:
  RawWriter() : out_(&string_out_) {}
  RawWriter& Varint(uint32_t field, uint64_t v) {
    Tag(field, 0);
    out_.WriteVarint64(v);
    return *this;
  }
  RawWriter& Fixed64(uint32_t field, uint64_t v) {
    Tag(field, 1);
    out_.WriteLittleEndian64(v);
    return *this;
  }
  RawWriter& Fixed32(uint32_t field, uint32_t v) {
    Tag(field, 5);
    out_.WriteLittleEndian32(v);
    return *this;
  }
  RawWriter& Bytes(uint32_t field, const std::string& v) {
    Tag(field, 2);
    out_.WriteVarint32(static_cast<uint32_t>(v.size()));
    out_.WriteString(v);
    return *this;
  }
  RawWriter& Group(uint32_t field, const std::string& body) {
    Tag(field, 3);
    out_.WriteString(body);
    Tag(field, 4);
    return *this;
  }
  std::string Done() {
    out_.Trim();
    return buffer_;
  }

 private:
  void Tag(uint32_t field, uint32_t wire_type) { out_.WriteTag(field << 3 | wire_type); }
  std::string buffer_;
  google::protobuf::io::StringOutputStream string_out_{&buffer_};
  google::protobuf::io::CodedOutputStream out_;
};

TEST(WireRequest, AcceptsWhatProtobufAccepts) {
  const std::string unknown_group = RawWriter().Varint(1, 5).Bytes(2, "zz").Done();
  const std::string layer_a = RawWriter()
                                  .Varint(2, 11)  // unpacked id
                                  .Fixed32(9, 1)
                                  .Bytes(2, RawWriter().Done())  // empty packed
                                  .Varint(1, 4)
                                  .Varint(2, 12)
                                  .Group(15, unknown_group)
                                  .Varint(1, (uint64_t{1} << 33) | 6)  // truncates
                                  .Done();
  const std::string request = RawWriter()
                                  .Varint(2, 9)
                                  .Bytes(1, "old")
                                  .Bytes(3, layer_a)
                                  .Fixed64(100, 42)
                                  .Bytes(1, "new")  // last one wins
                                  .Varint(2, 10)
                                  .Bytes(77, "unknown")
                                  .Bytes(3, "")
                                  .Group(5, "")
                                  .Done();
  v1::LookupRequest proto;
  ASSERT_TRUE(proto.ParseFromString(request));
  LookupQuery query;
  ASSERT_TRUE(ParseLookupRequest(Bytes(request), kNoLimit, &query).ok());
  EXPECT_EQ(FromQuery(query), FromProto(proto));
  EXPECT_EQ(FromQuery(query), Kept(Flat{"new", 10, {{6, {11, 12}}, {0, {}}}}));
}

// Every prefix: our parser fails exactly when protobuf's does, and agrees
// with it when both succeed.
TEST(WireRequest, EntriesWithoutIdsCostNothing) {
  // 100,000 entries that ask for nothing, and one that asks for a row.
  Flat flat{"t", 1, Layers(100000, {1, {}})};
  flat.layers.emplace_back(0, std::vector<uint64_t>{42});
  const std::string bytes = ToProto(flat).SerializeAsString();
  LookupQuery query;
  ASSERT_TRUE(ParseLookupRequest(Bytes(bytes), kNoLimit, &query).ok());
  ASSERT_EQ(query.layers.size(), 1u);
  EXPECT_EQ(query.layers[0].layer, 0u);
  EXPECT_EQ(query.ids, std::vector<uint64_t>{42});
  EXPECT_EQ(query.max_empty_layer, 1);
  EXPECT_LT(query.layers.capacity(), 16u) << "state grew with the empty entries";
}

TEST(WireRequest, TruncatedInputMatchesProtobuf) {
  const std::string unknown = RawWriter().Fixed64(20, 1).Group(21, "").Done();
  const std::string bytes =
      ToProto(Flat{"tbl", 1234567, {{3, {1, 200, 70000}}, {4, {1ull << 60}}}}).SerializeAsString() +
      unknown;
  LookupQuery query;
  int failures = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string prefix = bytes.substr(0, n);
    v1::LookupRequest proto;
    const bool proto_ok = proto.ParseFromString(prefix);
    const absl::Status ours = ParseLookupRequest(Bytes(prefix), kNoLimit, &query);
    ASSERT_EQ(ours.ok(), proto_ok) << "prefix " << n << ": " << ours;
    if (proto_ok) {
      EXPECT_EQ(FromQuery(query), FromProto(proto));
    } else {
      EXPECT_EQ(ours.code(), absl::StatusCode::kInvalidArgument);
      ++failures;
    }
  }
  EXPECT_GT(failures, 10);
}

TEST(WireRequest, RejectsMalformedInput) {
  LookupQuery query;
  for (const std::string& bad : {
           std::string("\x00", 1),                                           // field number 0
           std::string("\x0f"),                                              // wire type 7
           std::string("\x0c"),                                              // stray end group
           std::string("\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"),  // 11-byte
                                                                             // varint
           std::string("\x1a\x05\x12\x09\x01\x02\x03"),  // packed ids past entry
           std::string("\x0a\x7f"
                       "abc"),           // table past the end
           std::string("\x0b\x10\x01"),  // unterminated group
       }) {
    v1::LookupRequest proto;
    EXPECT_FALSE(proto.ParseFromString(bad));
    const absl::Status s = ParseLookupRequest(Bytes(bad), kNoLimit, &query);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
}

// Found by wire_response_fuzz: protobuf reads a tag of up to 5 varint bytes
// and keeps its low 32 bits; the codec refused any tag over 32 bits.
TEST(WireRequest, FiveByteTagsAreCutTo32BitsAsProtobufCutsThem) {
  // Field 2 (version) varint, as 0x7'0000'0010 in 5 bytes, then 7; and the
  // same tag in 6 bytes, which protobuf refuses.
  const std::string five("\x90\x80\x80\x80\x70\x07", 6);
  const std::string six("\x90\x80\x80\x80\x80\x00\x07", 7);
  // A layer whose row id 5 has such a tag, inside a group whose end tag
  // has one too.
  const std::string layer("\x90\x80\x80\x80\x10\x05", 6);
  const std::string group("\x0b\x08\x01\x8c\x80\x80\x80\x20", 8);
  const std::string nested = RawWriter().Bytes(3, layer + group).Done();
  LookupQuery query;
  for (const std::string& ok : {five, nested}) {
    v1::LookupRequest proto;
    ASSERT_TRUE(proto.ParseFromString(ok));
    const absl::Status s = ParseLookupRequest(Bytes(ok), kNoLimit, &query);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(FromQuery(query), FromProto(proto));
  }
  EXPECT_EQ(query.ids, std::vector<uint64_t>{5});
  ASSERT_TRUE(ParseLookupRequest(Bytes(five), kNoLimit, &query).ok());
  EXPECT_EQ(query.version, 7u);
  v1::LookupRequest proto;
  EXPECT_FALSE(proto.ParseFromString(six));
  const absl::Status s = ParseLookupRequest(Bytes(six), kNoLimit, &query);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("malformed LookupRequest: bad tag"), std::string::npos) << s;
}

TEST(WireRequest, RowLimit) {
  const std::string bytes = ToProto(Flat{"", 0, {{0, {1, 2, 3}}, {1, {4, 5}}}}).SerializeAsString();
  LookupQuery query;
  EXPECT_TRUE(ParseLookupRequest(Bytes(bytes), 5, &query).ok());
  EXPECT_EQ(query.ids.size(), 5u);
  const absl::Status s = ParseLookupRequest(Bytes(bytes), 4, &query);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("more than 4 row ids"), std::string::npos) << s;
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 131 + 7);
  return s;
}

TEST(WireResponse, NewResponseMatchesProtobufSerializer) {
  for (uint64_t version : {uint64_t{0}, uint64_t{1}, uint64_t{1} << 40}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{264 * 1000}}) {
      uint8_t* rows = nullptr;
      grpc::Slice slice = NewLookupResponse(version, n, &rows);
      const std::string pattern = Pattern(n);
      if (n > 0) std::memcpy(rows, pattern.data(), n);
      EXPECT_EQ(slice.size(), LookupResponseSize(version, n));

      v1::LookupResponse proto;
      proto.set_version(version);
      proto.set_rows(pattern);
      EXPECT_EQ(SliceString(slice), proto.SerializeAsString()) << version << " " << n;
    }
  }
}

TEST(WireResponse, DecodesProtobufSerializationAcrossSlices) {
  v1::LookupResponse proto;
  proto.set_version(77);
  proto.set_rows(Pattern(500));
  const std::string bytes = proto.SerializeAsString();
  std::string out(500, '\0');
  std::span<uint8_t> dst(reinterpret_cast<uint8_t*>(out.data()), out.size());
  for (size_t a = 0; a <= bytes.size(); a += 7) {
    for (size_t b = a; b <= bytes.size(); b += 5) {
      std::fill(out.begin(), out.end(), '\0');
      absl::StatusOr<uint64_t> version = DecodeLookupResponse(Split(bytes, {a, b}), dst);
      ASSERT_TRUE(version.ok()) << version.status();
      EXPECT_EQ(*version, 77u);
      ASSERT_EQ(out, proto.rows()) << a << "," << b;
    }
  }
}

// The rows field located in place equals the copy, for every way of
// slicing the message (spans concatenate to the rows, none is empty), and
// the last rows field wins; a wrong size or a truncation is an error.
TEST(WireResponse, LocatesRowsInPlaceAcrossSlices) {
  v1::LookupResponse proto;
  proto.set_version(77);
  proto.set_rows(Pattern(500));
  const std::string bytes = proto.SerializeAsString();
  ResponseRows rows;
  for (size_t a = 0; a <= bytes.size(); a += 7) {
    for (size_t b = a; b <= bytes.size(); b += 5) {
      absl::StatusOr<uint64_t> version = LocateLookupResponseRows(Split(bytes, {a, b}), 500, &rows);
      ASSERT_TRUE(version.ok()) << version.status();
      EXPECT_EQ(*version, 77u);
      std::string joined;
      for (std::span<const uint8_t> span : rows.spans) {
        ASSERT_FALSE(span.empty());
        joined.append(reinterpret_cast<const char*>(span.data()), span.size());
      }
      ASSERT_EQ(joined, proto.rows()) << a << "," << b;
      EXPECT_LE(rows.spans.size(), 3u);
    }
  }
  const std::string twice = RawWriter().Bytes(2, "first").Varint(1, 5).Bytes(2, "other").Done();
  ASSERT_TRUE(LocateLookupResponseRows(Split(twice, {3, 9}), 5, &rows).ok());
  std::string joined;
  for (std::span<const uint8_t> span : rows.spans) {
    joined.append(reinterpret_cast<const char*>(span.data()), span.size());
  }
  EXPECT_EQ(joined, "other");
  EXPECT_EQ(LocateLookupResponseRows(Split(bytes, {10}), 499, &rows).status().code(),
            absl::StatusCode::kInternal);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(
        LocateLookupResponseRows(Split(bytes.substr(0, n), {n / 2}), 500, &rows).status().code(),
        absl::StatusCode::kInternal)
        << "prefix " << n;
  }
}

TEST(WireResponse, SkipsUnknownFieldsAndLastRowsWins) {
  const std::string bytes = RawWriter()
                                .Bytes(2, "first")
                                .Fixed32(3, 9)
                                .Varint(1, 5)
                                .Group(8, RawWriter().Varint(1, 1).Done())
                                .Bytes(2, "second")
                                .Bytes(99, "x")
                                .Done();
  v1::LookupResponse proto;
  ASSERT_TRUE(proto.ParseFromString(bytes));
  std::string out(proto.rows().size(), '\0');
  absl::StatusOr<uint64_t> version =
      DecodeLookupResponse(Bytes(bytes), {reinterpret_cast<uint8_t*>(out.data()), out.size()});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, proto.version());
  EXPECT_EQ(out, proto.rows());
  EXPECT_EQ(out, "second");
}

TEST(WireResponse, FiveByteTagsAreCutTo32BitsAsProtobufCutsThem) {
  // wire_response_fuzz's input, minimised: field 1 (version) 9 under a tag
  // of 5 bytes, then the rows.
  const std::string bytes =
      std::string("\x88\x80\x80\x80\x70\x09", 6) + RawWriter().Bytes(2, "rows").Done();
  v1::LookupResponse proto;
  ASSERT_TRUE(proto.ParseFromString(bytes));
  std::string out(4, '\0');
  const absl::StatusOr<uint64_t> version =
      DecodeLookupResponse(Bytes(bytes), {reinterpret_cast<uint8_t*>(out.data()), out.size()});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 9u);
  EXPECT_EQ(out, "rows");
}

TEST(WireResponse, WrongRowSizeAndTruncationAreErrors) {
  v1::LookupResponse proto;
  proto.set_version(3);
  proto.set_rows(Pattern(300));
  const std::string bytes = proto.SerializeAsString();
  std::string out(300, '\0');
  std::span<uint8_t> dst(reinterpret_cast<uint8_t*>(out.data()), out.size());

  std::string small(299, '\0');
  const absl::Status wrong =
      DecodeLookupResponse(Bytes(bytes), {reinterpret_cast<uint8_t*>(small.data()), small.size()})
          .status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInternal);
  EXPECT_NE(wrong.message().find("300 row bytes, expected 299"), std::string::npos) << wrong;

  for (size_t n = 0; n < bytes.size(); ++n) {
    const absl::Status s = DecodeLookupResponse(Bytes(bytes.substr(0, n)), dst).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << "prefix " << n;
  }
  for (const std::string& bad : {std::string("\x00", 1),
                                 std::string("\x12\x05"
                                             "ab"),
                                 std::string("\x08\x80")}) {
    EXPECT_EQ(DecodeLookupResponse(Bytes(bad), dst).status().code(), absl::StatusCode::kInternal);
  }
}

}  // namespace
}  // namespace engram::wire
