#include "shard/import/testing/gguf_writer.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/gen/table_gen.h"

namespace engram::testing {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

void PutBits(std::string* out, GgufType t, uint64_t bits) {
  out->append(reinterpret_cast<const char*>(&bits), GgufScalarBytes(t));  // little-endian
}

}  // namespace

void GgufWriter::Remove(const std::string& key) {
  kvs_.erase(std::remove_if(kvs_.begin(), kvs_.end(), [&](const Kv& kv) { return kv.key == key; }),
             kvs_.end());
}

void GgufWriter::AddString(const std::string& key, const std::string& value) {
  Remove(key);
  std::string e;
  Put<uint32_t>(&e, static_cast<uint32_t>(GgufType::kString));
  PutString(&e, value);
  kvs_.push_back({key, e});
}

void GgufWriter::AddScalar(const std::string& key, GgufType type, uint64_t bits) {
  Remove(key);
  std::string e;
  Put<uint32_t>(&e, static_cast<uint32_t>(type));
  PutBits(&e, type, bits);
  kvs_.push_back({key, e});
}

void GgufWriter::AddIntArray(const std::string& key, GgufType elem,
                             const std::vector<uint64_t>& values) {
  Remove(key);
  std::string e;
  Put<uint32_t>(&e, static_cast<uint32_t>(GgufType::kArray));
  Put<uint32_t>(&e, static_cast<uint32_t>(elem));
  Put<uint64_t>(&e, values.size());
  for (uint64_t v : values) PutBits(&e, elem, v);
  kvs_.push_back({key, e});
}

void GgufWriter::AddStringArray(const std::string& key, const std::vector<std::string>& values) {
  Remove(key);
  std::string e;
  Put<uint32_t>(&e, static_cast<uint32_t>(GgufType::kArray));
  Put<uint32_t>(&e, static_cast<uint32_t>(GgufType::kString));
  Put<uint64_t>(&e, values.size());
  for (const std::string& v : values) PutString(&e, v);
  kvs_.push_back({key, e});
}

void GgufWriter::AddTensor(const std::string& name, std::vector<uint64_t> dims, uint32_t ggml_type,
                           std::string data) {
  tensors_.push_back({name, std::move(dims), ggml_type, std::move(data)});
}

void GgufWriter::set_offset_skew(size_t i, uint64_t delta) { tensors_[i].skew = delta; }

void GgufWriter::set_tensor_type(size_t i, uint32_t ggml_type) { tensors_[i].type = ggml_type; }

void GgufWriter::set_tensor_dims(size_t i, std::vector<uint64_t> dims) {
  tensors_[i].dims = std::move(dims);
}

int GgufWriter::tensor_index(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

bool GgufWriter::has(const std::string& key) const {
  return std::any_of(kvs_.begin(), kvs_.end(), [&](const Kv& kv) { return kv.key == key; });
}

std::string GgufWriter::Build() const {
  std::string out = "GGUF";
  Put<uint32_t>(&out, 3);
  Put<uint64_t>(&out, tensors_.size());
  Put<uint64_t>(&out, kvs_.size());
  for (const Kv& kv : kvs_) {
    PutString(&out, kv.key);
    out += kv.encoded;
  }
  auto align = [&](uint64_t x) { return (x + alignment_ - 1) / alignment_ * alignment_; };
  std::vector<uint64_t> offsets;
  uint64_t off = 0;
  for (const Tensor& t : tensors_) {
    offsets.push_back(off);
    off = align(off + t.data.size());
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    PutString(&out, t.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) Put<uint64_t>(&out, d);
    Put<uint32_t>(&out, t.type);
    Put<uint64_t>(&out, offsets[i] + t.skew);
  }
  out.resize(align(out.size()), '\0');
  const size_t data_start = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.resize(data_start + offsets[i], '\0');
    out += tensors_[i].data;
  }
  return out;
}

absl::Status GgufWriter::Write(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const std::string bytes = Build();
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

GgufWriter EngramGguf(const HashLayout& layout, uint64_t seed, uint64_t alignment) {
  GgufWriter w;
  w.set_alignment(alignment);
  const std::string p = "deepseek41.engram.";
  w.AddString("general.architecture", "deepseek41");
  w.AddString("general.name", "test-engram");
  if (alignment != 32) w.AddScalar("general.alignment", GgufType::kU32, alignment);
  w.AddStringArray("tokenizer.ggml.tokens", {"<pad>", "a", "b", "hello"});
  w.AddString(p + "encoding", GgufEngramFile::kEncoding);
  auto u = [](const auto& v) { return std::vector<uint64_t>(v.begin(), v.end()); };
  w.AddIntArray(p + "layer_ids", GgufType::kU32, u(layout.engram_layer_ids));
  w.AddIntArray(p + "rows", GgufType::kU32, u(layout.table_rows));
  w.AddIntArray(p + "token_map", GgufType::kU32, u(layout.token_map));
  const int64_t compressed =
      *std::max_element(layout.token_map.begin(), layout.token_map.end()) + 1;
  w.AddScalar(p + "compressed_vocab_size", GgufType::kU32,
              static_cast<uint64_t>(std::max(compressed, layout.pad_id + 1)));
  w.AddScalar(p + "pad_id", GgufType::kU32, static_cast<uint64_t>(layout.pad_id));
  std::vector<uint64_t> primes, multipliers;
  for (int l = 0; l < layout.n_layers(); ++l) {
    for (const auto& order : layout.primes[l]) {
      for (int64_t prime : order) primes.push_back(static_cast<uint64_t>(prime));
    }
    for (int64_t m : layout.multipliers[l]) multipliers.push_back(static_cast<uint64_t>(m));
  }
  w.AddIntArray(p + "primes", GgufType::kU32, primes);
  w.AddIntArray(p + "multipliers", GgufType::kU64, multipliers);
  w.AddTensor("token_embd.weight", {4, 4}, 0, std::string(64, '\x01'));
  for (int l = 0; l < layout.n_layers(); ++l) {
    const uint64_t rows = static_cast<uint64_t>(layout.table_rows[l]);
    std::string data(rows * GgufEngramFile::kRowBytes, '\0');
    GenerateRows(seed, l, 0, rows, GgufEngramFile::kHeadDim, GgufEngramFile::kScaleBlock,
                 reinterpret_cast<uint8_t*>(data.data()));
    w.AddTensor(absl::StrCat("blk.", layout.engram_layer_ids[l], ".engram_embd.weight"),
                {static_cast<uint64_t>(GgufEngramFile::kRowBytes), rows}, kGgmlTypeI8,
                std::move(data));
  }
  return w;
}

namespace {}  // namespace

std::string FixtureRowBytes(RowEncoding encoding, uint64_t seed, int layer, uint64_t row,
                            int head_dim) {
  const int scale_block = encoding == RowEncoding::kFp8 ? 32 : 0;
  std::string out(static_cast<size_t>(*EncodedRowBytes(encoding, head_dim, scale_block)), '\0');
  GenerateEncodedRow(encoding, seed, layer, row, head_dim, scale_block,
                     reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

std::string_view GgufFamilyName(GgufFamily family) {
  switch (family) {
    case GgufFamily::kLlamaCpp:
      return "llama.cpp";
    case GgufFamily::kFork:
      return "fork";
    case GgufFamily::kDs4:
      return "ds4";
  }
  return "?";
}

std::vector<std::string> GgufFamilyPaths(const std::string& dir, const GgufFamilyOptions& o) {
  if (o.n_splits <= 1) return {absl::StrCat(dir, "/", o.name, ".gguf")};
  std::vector<std::string> paths;
  for (int i = 1; i <= o.n_splits; ++i) {
    paths.push_back(absl::StrFormat("%s/%s-%05d-of-%05d.gguf", dir, o.name, i, o.n_splits));
  }
  return paths;
}

absl::StatusOr<std::vector<GgufWriter>> EngramGgufFamily(const HashLayout& layout,
                                                         const GgufFamilyOptions& o,
                                                         uint64_t seed) {
  const bool ds4 = o.family == GgufFamily::kDs4;
  if (ds4 != (o.encoding == RowEncoding::kFp8) || (ds4 && o.head_dim != 256) || o.n_splits < 1 ||
      o.n_splits > 99999) {
    return absl::InvalidArgumentError(
        absl::StrCat("fixture: family ", std::string(GgufFamilyName(o.family)), " cannot hold ",
                     RowEncodingName(o.encoding), " rows of ", o.head_dim, " values in ",
                     o.n_splits, " splits"));
  }
  absl::StatusOr<int> row_bytes = EncodedRowBytes(o.encoding, o.head_dim, ds4 ? 32 : 0);
  if (!row_bytes.ok()) return row_bytes.status();
  const int n = o.n_splits;
  std::vector<GgufWriter> w(n);
  GgufWriter& meta = w[0];
  const std::string p = "deepseek41.engram.";
  auto u = [](const auto& v) { return std::vector<uint64_t>(v.begin(), v.end()); };
  std::vector<uint64_t> primes, multipliers, offsets;
  for (int l = 0; l < layout.n_layers(); ++l) {
    for (const auto& order : layout.primes[l]) {
      primes.insert(primes.end(), order.begin(), order.end());
    }
    multipliers.insert(multipliers.end(), layout.multipliers[l].begin(),
                       layout.multipliers[l].end());
    offsets.insert(offsets.end(), layout.offsets[l].begin(), layout.offsets[l].end());
  }
  const int64_t compressed = std::max(
      *std::max_element(layout.token_map.begin(), layout.token_map.end()) + 1, layout.pad_id + 1);
  meta.AddString("general.architecture", "deepseek41");
  meta.AddString("general.name", o.name);
  meta.AddStringArray("tokenizer.ggml.tokens", {"<pad>", "a", "b", "hello"});
  switch (o.family) {
    case GgufFamily::kLlamaCpp:
      meta.AddScalar(p + "head_count", GgufType::kU32, layout.n_heads);
      meta.AddScalar(p + "key_length", GgufType::kU32, o.head_dim);
      meta.AddScalar(p + "max_ngram_size", GgufType::kU32, layout.max_ngram_size);
      meta.AddIntArray(p + "layer_ids", GgufType::kI32, u(layout.engram_layer_ids));
      meta.AddIntArray(p + "multipliers", GgufType::kU64, multipliers);
      meta.AddIntArray(p + "primes", GgufType::kU64, primes);
      meta.AddIntArray(p + "offsets", GgufType::kU64, offsets);
      meta.AddIntArray(p + "token_map", GgufType::kI32, u(layout.token_map));
      meta.AddScalar(p + "pad_id", GgufType::kU32, static_cast<uint64_t>(layout.pad_id));
      break;
    case GgufFamily::kFork:
      meta.AddScalar(p + "n_heads", GgufType::kU32, layout.n_heads);
      meta.AddScalar(p + "head_dim", GgufType::kU32, o.head_dim);
      meta.AddScalar(p + "pad_token_id", GgufType::kI32, static_cast<uint64_t>(layout.pad_id));
      meta.AddScalar(p + "compressed_vocab_size", GgufType::kU32,
                     static_cast<uint64_t>(compressed));
      meta.AddIntArray(p + "num_embeddings", GgufType::kU64, u(layout.table_rows));
      meta.AddIntArray(p + "layer_ids", GgufType::kI32, u(layout.engram_layer_ids));
      meta.AddIntArray(p + "token_map", GgufType::kI32, u(layout.token_map));
      meta.AddIntArray(p + "multipliers", GgufType::kI64, multipliers);
      meta.AddIntArray(p + "primes", GgufType::kI64, primes);
      break;
    case GgufFamily::kDs4:
      meta.AddString(p + "encoding", GgufEngramFile::kEncoding);
      meta.AddIntArray(p + "layer_ids", GgufType::kU32, u(layout.engram_layer_ids));
      meta.AddIntArray(p + "rows", GgufType::kU32, u(layout.table_rows));
      meta.AddIntArray(p + "token_map", GgufType::kU32, u(layout.token_map));
      meta.AddScalar(p + "compressed_vocab_size", GgufType::kU32,
                     static_cast<uint64_t>(compressed));
      meta.AddScalar(p + "pad_id", GgufType::kU32, static_cast<uint64_t>(layout.pad_id));
      meta.AddIntArray(p + "primes", GgufType::kU32, primes);
      meta.AddIntArray(p + "multipliers", GgufType::kU64, multipliers);
      break;
  }
  meta.AddTensor("token_embd.weight", {4, 4}, 0, std::string(64, '\x01'));
  for (int s = 1; s < n; ++s) {
    w[s].AddTensor(absl::StrCat("blk.", s, ".ffn_down.weight"), {8}, 0, std::string(32, '\x02'));
  }
  const uint32_t type = ds4 ? kGgmlTypeI8 : *GgmlTypeOfRowEncoding(o.encoding);
  const uint64_t dim0 = ds4 ? static_cast<uint64_t>(*row_bytes) : static_cast<uint64_t>(o.head_dim);
  for (int l = 0; l < layout.n_layers(); ++l) {
    const int64_t id = layout.engram_layer_ids[l];
    const uint64_t rows = static_cast<uint64_t>(layout.table_rows[l]);
    std::string data;
    data.reserve(rows * static_cast<uint64_t>(*row_bytes));
    for (uint64_t r = 0; r < rows; ++r) data += FixtureRowBytes(o.encoding, seed, l, r, o.head_dim);
    GgufWriter& dst = n == 1 ? w[0] : w[1 + l % (n - 1)];
    dst.AddTensor(absl::StrCat("blk.", id, ".engram.wkv.weight"), {8, 2}, 1,
                  std::string(32, '\x03'));
    dst.AddTensor(absl::StrCat("blk.", id, ".engram_embd.weight"), {dim0, rows}, type,
                  std::move(data));
  }
  if (n > 1) {
    uint64_t n_tensors = 0;
    for (const GgufWriter& s : w) n_tensors += s.n_tensors();
    for (int s = 0; s < n; ++s) {
      w[s].AddScalar("split.no", GgufType::kU16, static_cast<uint64_t>(s));
      w[s].AddScalar("split.count", GgufType::kU16, static_cast<uint64_t>(n));
      w[s].AddScalar("split.tensors.count", GgufType::kI32, n_tensors);
    }
  }
  return w;
}

absl::Status WriteGgufFiles(const std::vector<GgufWriter>& writers,
                            const std::vector<std::string>& paths) {
  for (size_t i = 0; i < writers.size(); ++i) {
    if (absl::Status s = writers[i].Write(paths[i]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> WriteEngramGgufFamily(const std::string& dir,
                                                               const HashLayout& layout,
                                                               const GgufFamilyOptions& options,
                                                               uint64_t seed) {
  absl::StatusOr<std::vector<GgufWriter>> w = EngramGgufFamily(layout, options, seed);
  if (!w.ok()) return w.status();
  std::vector<std::string> paths = GgufFamilyPaths(dir, options);
  if (absl::Status s = WriteGgufFiles(*w, paths); !s.ok()) return s;
  return paths;
}

}  // namespace engram::testing
