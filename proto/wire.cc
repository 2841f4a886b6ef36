#include "proto/wire.h"

#include <grpc/slice.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace engram::wire {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kStartGroup = 3;
constexpr uint32_t kEndGroup = 4;
constexpr uint32_t kFixed32 = 5;

// Field numbers of engram.v1 messages.
constexpr uint32_t kRequestTable = 1;
constexpr uint32_t kRequestVersion = 2;
constexpr uint32_t kRequestLayers = 3;
constexpr uint32_t kRequestSourceChecksum = 4;
constexpr uint32_t kRequestNeedWithinUs = 5;
constexpr uint32_t kLayerRowsLayer = 1;
constexpr uint32_t kLayerRowsRowIds = 2;
constexpr uint32_t kResponseVersion = 1;
constexpr uint32_t kResponseRows = 2;

// protobuf's default recursion limit, applied to nested unknown groups.
constexpr int kMaxGroupDepth = 100;

constexpr uint8_t Tag(uint32_t field, uint32_t wire_type) {
  return static_cast<uint8_t>(field << 3 | wire_type);  // all our tags < 128
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

uint8_t* WriteVarint(uint64_t v, uint8_t* p) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

// A slice that never uses gRPC's inline representation, so its bytes have a
// stable heap address; `*data` receives it.
grpc::Slice AllocateSlice(size_t size, uint8_t** data) {
  grpc_slice slice = grpc_slice_malloc_large(size);
  *data = slice.data.refcounted.bytes;  // malloc_large is never inlined
  return grpc::Slice(slice, grpc::Slice::STEAL_REF);
}

absl::Status Malformed(std::string_view message, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ", std::string(message), ": ", std::string(what)));
}

// Sequential reader over a message held in one or more byte chunks. Reads
// past the end fail (return false) instead of reading out of bounds.
class Reader {
 public:
  explicit Reader(std::span<const std::span<const uint8_t>> chunks) : chunks_(chunks) {
    for (const auto& chunk : chunks_) size_ += chunk.size();
    Load();
  }

  size_t size() const { return size_; }
  size_t position() const { return chunk_pos_ + (p_ - chunk_begin_); }

  bool ReadVarint(uint64_t* value) {
    if (end_ - p_ >= 10) {  // fast path: the whole varint is in this chunk
      uint64_t v = 0;
      for (int shift = 0; shift < 70; shift += 7) {
        const uint8_t b = *p_++;
        v |= static_cast<uint64_t>(b & 0x7f) << shift;
        if (b < 0x80) {
          *value = v;
          return true;
        }
      }
      return false;  // more than 10 bytes
    }
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (b < 0x80) {
        *value = v;
        return true;
      }
    }
    return false;
  }

  bool Skip(size_t n) {
    return Consume(n, [](const uint8_t*, size_t) {});
  }
  bool Copy(size_t n, uint8_t* dst) {
    return Consume(n, [&dst](const uint8_t* p, size_t take) {
      std::memcpy(dst, p, take);
      dst += take;
    });
  }
  // Consumes n bytes, appending where they lie (one span per chunk touched).
  bool Spans(size_t n, std::vector<std::span<const uint8_t>>* out) {
    return Consume(n, [out](const uint8_t* p, size_t take) { out->emplace_back(p, take); });
  }

 private:
  // Makes chunks_[index_] current, skipping empty chunks, so that p_ < end_
  // unless the input is exhausted.
  void Load() {
    while (index_ < chunks_.size() && chunks_[index_].empty()) ++index_;
    if (index_ < chunks_.size()) {
      chunk_begin_ = p_ = chunks_[index_].data();
      end_ = p_ + chunks_[index_].size();
    } else {
      chunk_begin_ = p_ = end_ = nullptr;
    }
  }
  void Advance() {
    chunk_pos_ += end_ - chunk_begin_;
    ++index_;
    Load();
  }

  bool ReadByte(uint8_t* b) {
    if (p_ == end_) {
      if (index_ >= chunks_.size()) return false;
      Advance();
      if (p_ == end_) return false;
    }
    *b = *p_++;
    return true;
  }

  // Consumes n bytes, handing each chunk's share to piece(p, take) in order;
  // false (consuming nothing) when fewer than n bytes are left.
  template <typename PieceFn>
  bool Consume(size_t n, PieceFn&& piece) {
    if (n > size_ - position()) return false;
    while (n > 0) {
      if (p_ == end_) Advance();
      const size_t take = std::min<size_t>(n, end_ - p_);
      piece(p_, take);
      p_ += take;
      n -= take;
    }
    return true;
  }

  std::span<const std::span<const uint8_t>> chunks_;
  size_t size_ = 0;
  size_t index_ = 0;
  size_t chunk_pos_ = 0;  // message offset of chunk_begin_
  const uint8_t* chunk_begin_ = nullptr;
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
};

// Reads a length prefix and checks that the payload ends by `limit`;
// *end receives the payload's end offset.
bool ReadLength(Reader& r, size_t limit, size_t* length, size_t* end) {
  uint64_t n;
  if (!r.ReadVarint(&n)) return false;
  if (r.position() > limit || n > limit - r.position()) return false;
  *length = static_cast<size_t>(n);
  *end = r.position() + *length;
  return true;
}

// A length-delimited field's bytes (its length, then that many bytes), kept
// as they are in *out; false when the length is bad.
bool ReadBytes(Reader& r, size_t limit, std::string* out) {
  size_t length, end;
  if (!ReadLength(r, limit, &length, &end)) return false;
  out->resize(length);
  r.Copy(length, reinterpret_cast<uint8_t*>(out->data()));
  return true;
}

// Reads the next tag of a message. As protobuf's parser: a tag is a varint
// of at most 5 bytes whose value is cut to its low 32 bits; false for a
// longer one or field number 0.
bool ReadTag(Reader& r, uint64_t* tag) {
  const size_t start = r.position();
  if (!r.ReadVarint(tag) || r.position() - start > 5) return false;
  *tag &= 0xffffffffu;
  return (*tag >> 3) != 0;
}

// Skips the payload of a field with `tag` (already read), as protobuf skips
// unknown fields.
bool SkipField(Reader& r, uint64_t tag, size_t limit, int depth) {
  switch (tag & 7) {
    case kVarint: {
      uint64_t v;
      return r.ReadVarint(&v);
    }
    case kFixed64:
      return r.Skip(8);
    case kFixed32:
      return r.Skip(4);
    case kLengthDelimited: {
      size_t length, end;
      return ReadLength(r, limit, &length, &end) && r.Skip(length);
    }
    case kStartGroup: {
      if (depth >= kMaxGroupDepth) return false;
      const uint64_t end_tag = (tag & ~uint64_t{7}) | kEndGroup;
      while (r.position() < limit) {
        uint64_t inner;
        if (!ReadTag(r, &inner)) return false;
        if (inner == end_tag) return true;
        if (!SkipField(r, inner, limit, depth + 1)) return false;
      }
      return false;
    }
    default:  // a stray end-group, or wire types 6 and 7
      return false;
  }
}

absl::Status ParseLayerRows(Reader& r, size_t end, size_t max_rows, LookupQuery* query) {
  constexpr std::string_view kWhat = "LookupRequest.layers";
  LayerRange range;
  range.begin = query->ids.size();
  auto add_id = [&](uint64_t id) {
    if (query->ids.size() >= max_rows) {
      return absl::ResourceExhaustedError(
          absl::StrCat("request has more than ", max_rows, " row ids"));
    }
    query->ids.push_back(id);
    return absl::OkStatus();
  };
  while (r.position() < end) {
    uint64_t tag;
    if (!ReadTag(r, &tag)) return Malformed(kWhat, "bad tag");
    const uint32_t field = static_cast<uint32_t>(tag >> 3);
    const uint32_t wire_type = static_cast<uint32_t>(tag & 7);
    if (field == kLayerRowsLayer && wire_type == kVarint) {
      uint64_t layer;
      if (!r.ReadVarint(&layer)) return Malformed(kWhat, "bad layer");
      range.layer = static_cast<uint32_t>(layer);  // protobuf truncates too
    } else if (field == kLayerRowsRowIds && wire_type == kLengthDelimited) {
      size_t length, ids_end;
      if (!ReadLength(r, end, &length, &ids_end)) {
        return Malformed(kWhat, "bad row_ids length");
      }
      // A packed varint takes at least one byte: length bounds the count.
      const size_t room = max_rows - std::min(max_rows, query->ids.size());
      query->ids.reserve(query->ids.size() + std::min(length, room + 1));
      while (r.position() < ids_end) {
        uint64_t id;
        if (!r.ReadVarint(&id)) return Malformed(kWhat, "bad packed row id");
        if (absl::Status s = add_id(id); !s.ok()) return s;
      }
      if (r.position() != ids_end) {
        return Malformed(kWhat, "packed row id crosses its field's end");
      }
    } else if (field == kLayerRowsRowIds && wire_type == kVarint) {
      uint64_t id;
      if (!r.ReadVarint(&id)) return Malformed(kWhat, "bad row id");
      if (absl::Status s = add_id(id); !s.ok()) return s;
    } else if (!SkipField(r, tag, end, 0)) {
      return Malformed(kWhat, "bad unknown field");
    }
    if (r.position() > end) return Malformed(kWhat, "field crosses its end");
  }
  range.count = query->ids.size() - range.begin;
  if (range.count == 0) {
    // Nothing to serve: only its layer is kept, to be validated.
    query->max_empty_layer = std::max(query->max_empty_layer, int64_t{range.layer});
  } else {
    query->layers.push_back(range);
  }
  return absl::OkStatus();
}

absl::Status ParseRequest(Reader& r, size_t max_rows, LookupQuery* query) {
  constexpr std::string_view kWhat = "LookupRequest";
  query->Clear();
  const size_t end = r.size();
  while (r.position() < end) {
    uint64_t tag;
    if (!ReadTag(r, &tag)) return Malformed(kWhat, "bad tag");
    const uint32_t field = static_cast<uint32_t>(tag >> 3);
    const uint32_t wire_type = static_cast<uint32_t>(tag & 7);
    if (field == kRequestTable && wire_type == kLengthDelimited) {
      if (!ReadBytes(r, end, &query->table)) return Malformed(kWhat, "bad table length");
    } else if (field == kRequestSourceChecksum && wire_type == kLengthDelimited) {
      if (!ReadBytes(r, end, &query->source_checksum)) {
        return Malformed(kWhat, "bad source_checksum length");
      }
    } else if (field == kRequestVersion && wire_type == kVarint) {
      if (!r.ReadVarint(&query->version)) return Malformed(kWhat, "bad version");
    } else if (field == kRequestNeedWithinUs && wire_type == kVarint) {
      uint64_t us;
      if (!r.ReadVarint(&us)) return Malformed(kWhat, "bad need_within_us");
      query->need_within_us = static_cast<uint32_t>(us);  // uint32: as protobuf truncates
    } else if (field == kRequestLayers && wire_type == kLengthDelimited) {
      size_t length, layer_end;
      if (!ReadLength(r, end, &length, &layer_end)) {
        return Malformed(kWhat, "bad layers length");
      }
      if (absl::Status s = ParseLayerRows(r, layer_end, max_rows, query); !s.ok()) {
        return s;
      }
      if (r.position() != layer_end) {
        return Malformed(kWhat, "layers entry crosses its end");
      }
    } else if (!SkipField(r, tag, end, 0)) {
      return Malformed(kWhat, "bad unknown field");
    }
  }
  return absl::OkStatus();
}

// Decodes a LookupResponse, handing the last rows field to
// take_rows(reader, length) when its length is `rows_bytes` (skipping it
// otherwise); returns the version.
template <typename TakeRows>
absl::StatusOr<uint64_t> DecodeResponse(Reader& r, size_t rows_bytes, TakeRows&& take_rows) {
  auto malformed = [](std::string_view what) {
    return absl::InternalError(absl::StrCat("malformed LookupResponse: ", std::string(what)));
  };
  uint64_t version = 0;
  size_t rows_length = 0;  // of the last rows field; absent = empty
  const size_t end = r.size();
  while (r.position() < end) {
    uint64_t tag;
    if (!ReadTag(r, &tag)) return malformed("bad tag");
    const uint32_t field = static_cast<uint32_t>(tag >> 3);
    const uint32_t wire_type = static_cast<uint32_t>(tag & 7);
    if (field == kResponseVersion && wire_type == kVarint) {
      if (!r.ReadVarint(&version)) return malformed("bad version");
    } else if (field == kResponseRows && wire_type == kLengthDelimited) {
      size_t field_end;
      if (!ReadLength(r, end, &rows_length, &field_end)) {
        return malformed("bad rows length");
      }
      if (rows_length == rows_bytes) {
        take_rows(r, rows_length);
      } else {
        r.Skip(rows_length);
      }
    } else if (!SkipField(r, tag, end, 0)) {
      return malformed("bad unknown field");
    }
  }
  if (rows_length != rows_bytes) {
    return absl::InternalError(
        absl::StrCat("LookupResponse carries ", rows_length, " row bytes, expected ", rows_bytes));
  }
  return version;
}

absl::StatusOr<uint64_t> DecodeResponse(Reader& r, std::span<uint8_t> rows_out) {
  return DecodeResponse(r, rows_out.size(),
                        [&](Reader& reader, size_t n) { reader.Copy(n, rows_out.data()); });
}

// Calls fn(Reader&) over the bytes of `buffer`, without copying them.
template <typename Fn>
auto WithReader(const grpc::ByteBuffer& buffer, Fn fn) {
  grpc::Slice single;
  if (buffer.TrySingleSlice(&single).ok()) {
    const std::span<const uint8_t> chunk(single.begin(), single.size());
    Reader r(std::span<const std::span<const uint8_t>>(&chunk, 1));
    return fn(r);
  }
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);  // an invalid (empty) buffer leaves it empty
  std::vector<std::span<const uint8_t>> chunks;
  chunks.reserve(slices.size());
  for (const grpc::Slice& s : slices) chunks.emplace_back(s.begin(), s.size());
  Reader r(chunks);
  return fn(r);
}

}  // namespace

absl::Status ParseLookupRequest(std::span<const uint8_t> bytes, size_t max_rows,
                                LookupQuery* query) {
  Reader r(std::span<const std::span<const uint8_t>>(&bytes, 1));
  return ParseRequest(r, max_rows, query);
}

absl::Status ParseLookupRequest(const grpc::ByteBuffer& buffer, size_t max_rows,
                                LookupQuery* query) {
  return WithReader(buffer, [&](Reader& r) { return ParseRequest(r, max_rows, query); });
}

grpc::Slice EncodeLookupRequest(std::string_view table, uint64_t version,
                                std::span<const LayerRowIds> layers,
                                std::string_view source_checksum, uint32_t need_within_us) {
  auto packed_size = [](std::span<const uint64_t> ids) {
    size_t n = 0;
    for (uint64_t id : ids) n += VarintSize(id);
    return n;
  };
  auto layer_size = [](const LayerRowIds& l, size_t packed) {
    size_t n = l.layer != 0 ? 1 + VarintSize(l.layer) : 0;
    if (!l.row_ids.empty()) n += 1 + VarintSize(packed) + packed;
    return n;
  };
  size_t size = table.empty() ? 0 : 1 + VarintSize(table.size()) + table.size();
  if (version != 0) size += 1 + VarintSize(version);
  std::vector<size_t> packed(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    packed[i] = packed_size(layers[i].row_ids);
    const size_t inner = layer_size(layers[i], packed[i]);
    size += 1 + VarintSize(inner) + inner;
  }
  if (!source_checksum.empty()) {
    size += 1 + VarintSize(source_checksum.size()) + source_checksum.size();
  }
  if (need_within_us != 0) size += 1 + VarintSize(need_within_us);
  if (size == 0) return grpc::Slice();

  uint8_t* p;
  grpc::Slice slice = AllocateSlice(size, &p);
  if (!table.empty()) {
    *p++ = Tag(kRequestTable, kLengthDelimited);
    p = WriteVarint(table.size(), p);
    std::memcpy(p, table.data(), table.size());
    p += table.size();
  }
  if (version != 0) {
    *p++ = Tag(kRequestVersion, kVarint);
    p = WriteVarint(version, p);
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerRowIds& l = layers[i];
    *p++ = Tag(kRequestLayers, kLengthDelimited);
    p = WriteVarint(layer_size(l, packed[i]), p);
    if (l.layer != 0) {
      *p++ = Tag(kLayerRowsLayer, kVarint);
      p = WriteVarint(l.layer, p);
    }
    if (!l.row_ids.empty()) {
      *p++ = Tag(kLayerRowsRowIds, kLengthDelimited);
      p = WriteVarint(packed[i], p);
      for (uint64_t id : l.row_ids) p = WriteVarint(id, p);
    }
  }
  if (!source_checksum.empty()) {
    *p++ = Tag(kRequestSourceChecksum, kLengthDelimited);
    p = WriteVarint(source_checksum.size(), p);
    std::memcpy(p, source_checksum.data(), source_checksum.size());
    p += source_checksum.size();
  }
  if (need_within_us != 0) {
    *p++ = Tag(kRequestNeedWithinUs, kVarint);
    p = WriteVarint(need_within_us, p);
  }
  return slice;
}

size_t LookupResponseSize(uint64_t version, size_t rows_bytes) {
  size_t size = version != 0 ? 1 + VarintSize(version) : 0;
  if (rows_bytes != 0) size += 1 + VarintSize(rows_bytes) + rows_bytes;
  return size;
}

grpc::Slice NewLookupResponse(uint64_t version, size_t rows_bytes, uint8_t** rows) {
  const size_t size = LookupResponseSize(version, rows_bytes);
  if (size == 0) {
    *rows = nullptr;
    return grpc::Slice();
  }
  uint8_t* p;
  grpc::Slice slice = AllocateSlice(size, &p);
  *rows = WriteLookupResponseFraming(version, rows_bytes, p);
  return slice;
}

uint8_t* WriteLookupResponseFraming(uint64_t version, size_t rows_bytes, uint8_t* p) {
  if (version != 0) {
    *p++ = Tag(kResponseVersion, kVarint);
    p = WriteVarint(version, p);
  }
  if (rows_bytes != 0) {
    *p++ = Tag(kResponseRows, kLengthDelimited);
    p = WriteVarint(rows_bytes, p);
  }
  return p;
}

absl::StatusOr<uint64_t> DecodeLookupResponse(const grpc::ByteBuffer& buffer,
                                              std::span<uint8_t> rows_out) {
  return WithReader(buffer, [&](Reader& r) { return DecodeResponse(r, rows_out); });
}

absl::StatusOr<uint64_t> DecodeLookupResponse(std::span<const uint8_t> bytes,
                                              std::span<uint8_t> rows_out) {
  Reader r(std::span<const std::span<const uint8_t>>(&bytes, 1));
  return DecodeResponse(r, rows_out);
}

absl::StatusOr<uint64_t> LocateLookupResponseRows(const grpc::ByteBuffer& buffer, size_t rows_bytes,
                                                  ResponseRows* rows) {
  rows->slices.clear();
  rows->spans.clear();
  (void)buffer.Dump(&rows->slices);  // an invalid (empty) buffer leaves it empty
  std::vector<std::span<const uint8_t>>& chunks = rows->chunks_scratch;
  chunks.clear();
  for (const grpc::Slice& s : rows->slices) chunks.emplace_back(s.begin(), s.size());
  Reader r(chunks);
  return DecodeResponse(r, rows_bytes, [&](Reader& reader, size_t n) {
    rows->spans.clear();  // a later rows field wins, as in protobuf
    reader.Spans(n, &rows->spans);
  });
}

}  // namespace engram::wire
