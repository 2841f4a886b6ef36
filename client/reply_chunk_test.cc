#include "client/reply_chunk.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace engram {
namespace {

// Rows of two layers (66- and 264-byte rows) laid out as a reply's rows
// field, cut into spans at every kind of place: each piece's row pointers
// must read exactly that row's bytes, whether it lies in one span or
// straddles several.
TEST(ReplyChunk, MapRowsFindsEveryRowWhereverTheSpansAreCut) {
  std::mt19937_64 rng(3);
  const size_t rb0 = 66, rb1 = 264, n0 = 37, n1 = 23;
  std::string bytes(n0 * rb0 + n1 * rb1, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  std::vector<const uint8_t*> dst0(n0), dst1(n1);
  for (int trial = 0; trial < 300; ++trial) {
    ReplyChunk chunk;
    chunk.pieces.push_back({0, n0, rb0, dst0.data()});
    chunk.pieces.push_back({1, n1, rb1, dst1.data()});
    ASSERT_EQ(chunk.rows_bytes(), bytes.size());
    // Cuts: none, at row boundaries, inside rows, 1-byte spans.
    std::vector<size_t> cuts = {0};
    const size_t pieces = trial == 0 ? 1 : 1 + rng() % 40;
    for (size_t k = 1; k < pieces; ++k) cuts.push_back(rng() % bytes.size());
    if (trial % 7 == 1) {
      for (size_t k = 0; k < 40; ++k) cuts.push_back(100 + k);  // runs of 1-byte spans
    }
    cuts.push_back(bytes.size());
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      chunk.rows.spans.emplace_back(reinterpret_cast<const uint8_t*>(bytes.data()) + cuts[k],
                                    cuts[k + 1] - cuts[k]);
    }
    chunk.MapRows();
    for (size_t j = 0; j < n0; ++j) {
      ASSERT_EQ(std::string(reinterpret_cast<const char*>(dst0[j]), rb0),
                bytes.substr(j * rb0, rb0))
          << "trial " << trial << " layer 0 row " << j;
    }
    for (size_t j = 0; j < n1; ++j) {
      ASSERT_EQ(std::string(reinterpret_cast<const char*>(dst1[j]), rb1),
                bytes.substr(n0 * rb0 + j * rb1, rb1))
          << "trial " << trial << " layer 1 row " << j;
    }
  }
}

}  // namespace
}  // namespace engram
