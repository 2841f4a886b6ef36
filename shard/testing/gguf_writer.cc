#include "shard/testing/gguf_writer.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/table_gen.h"

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

size_t Width(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    default:
      return 8;
  }
}

void PutBits(std::string* out, GgufType t, uint64_t bits) {
  out->append(reinterpret_cast<const char*>(&bits), Width(t));  // little-endian
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

}  // namespace engram::testing
