#include "common/hash/engram_hash.h"

#include <filesystem>
#include <fstream>
#include <random>

#include "common/gen/hash_golden.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

std::string Golden(const std::string& name) { return std::string(ENGRAM_GOLDEN_DIR) + "/" + name; }

TEST(HashGolden, EveryGoldenFileMatches) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ENGRAM_GOLDEN_DIR)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("engram_hash", 0) != 0 || entry.path().extension() != ".json") continue;
    ++files;
    absl::StatusOr<HashGoldenResult> r = CheckHashGoldenFile(entry.path().string());
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    EXPECT_EQ(r->calls_failed, 0) << name << ": " << r->first_mismatch;
    EXPECT_GT(r->calls_passed, 0) << name;
    EXPECT_GT(r->ids_checked, 0) << name;
  }
  EXPECT_GE(files, 2);
}

HashLayout SmallLayout() {
  absl::StatusOr<HashLayout> l = HashLayout::FromFile(Golden("engram_hash_overflow.json"));
  EXPECT_TRUE(l.ok()) << l.status();
  return *l;
}

TEST(Hash, FastModuloEqualsDivide) {
  HashLayout layout = SmallLayout();
  auto fast = NgramHasher::Create(layout);
  auto slow = NgramHasher::Create(layout, {HasherOptions::Modulo::kDivide});
  ASSERT_TRUE(fast.ok() && slow.ok());
  std::mt19937_64 rng(7);
  std::vector<int64_t> ids(4096);
  for (auto& id : ids) id = static_cast<int64_t>(rng() % layout.vocab_size);
  std::vector<RowId> a(ids.size() * (*fast)->ids_per_position());
  std::vector<RowId> b(a.size());
  SequenceState sa, sb;
  ASSERT_TRUE((*fast)->Hash(sa, 0, ids, {}, a.data()).ok());
  ASSERT_TRUE((*slow)->Hash(sb, 0, ids, {}, b.data()).ok());
  EXPECT_EQ(a, b);
}

TEST(Hash, PrimeOfOneAndHugePrimes) {
  // A layout with a 1-bucket slot and a bucket count near 2^62 exercises the
  // edge cases of the 128-bit reciprocal.
  HashLayout l;
  l.vocab_size = 4;
  l.engram_layer_ids = {0};
  l.max_ngram_size = 2;
  l.n_heads = 2;
  l.pad_id = 3;
  l.token_map = {0, 1, 2, 3};
  l.multipliers = {{-7, 0x7fffffffffffffffLL}};
  const int64_t big = (int64_t{1} << 62) - 57;
  l.primes = {{{1, big}}};
  l.offsets = {{0, 1}};
  l.table_rows = {1 + big};
  auto fast = NgramHasher::Create(l);
  auto slow = NgramHasher::Create(l, {HasherOptions::Modulo::kDivide});
  ASSERT_TRUE(fast.ok()) << fast.status();
  std::vector<int64_t> ids = {0, 1, 2, 3, 3, 2, 1, 0};
  std::vector<RowId> a(ids.size() * 2), b(ids.size() * 2);
  SequenceState sa, sb;
  ASSERT_TRUE((*fast)->Hash(sa, 0, ids, {}, a.data()).ok());
  ASSERT_TRUE((*slow)->Hash(sb, 0, ids, {}, b.data()).ok());
  EXPECT_EQ(a, b);
  for (size_t p = 0; p < ids.size(); ++p) {
    EXPECT_EQ(a[p * 2], 0u);  // the 1-bucket slot
    EXPECT_GE(a[p * 2 + 1], 1u);
    EXPECT_LT(a[p * 2 + 1], static_cast<RowId>(1 + big));
  }
}

TEST(Hash, DecodeStepsEqualOnePrefill) {
  HashLayout layout = SmallLayout();
  auto h = NgramHasher::Create(layout);
  ASSERT_TRUE(h.ok());
  const int per = (*h)->ids_per_position();
  std::mt19937_64 rng(3);
  std::vector<int64_t> ids(200);
  std::vector<uint8_t> mask(200, 1);
  for (auto& id : ids) id = static_cast<int64_t>(rng() % layout.vocab_size);
  for (int p = 50; p < 60; ++p) mask[p] = 0;  // an image span
  std::vector<RowId> whole(ids.size() * per), steps(ids.size() * per);
  SequenceState a, b;
  ASSERT_TRUE((*h)->Hash(a, 0, ids, mask, whole.data()).ok());
  // Prefill 37 positions, then decode one at a time.
  ASSERT_TRUE(
      (*h)->Hash(b, 0, std::span(ids).first(37), std::span(mask).first(37), steps.data()).ok());
  for (size_t p = 37; p < ids.size(); ++p) {
    ASSERT_TRUE((*h)->Hash(b, p, std::span(ids).subspan(p, 1), std::span(mask).subspan(p, 1),
                           steps.data() + p * per)
                    .ok());
  }
  EXPECT_EQ(whole, steps);
  EXPECT_EQ(b.length(), 200);
}

TEST(Hash, ErrorsLeaveStateUnchanged) {
  HashLayout layout = SmallLayout();
  auto h = NgramHasher::Create(layout);
  ASSERT_TRUE(h.ok());
  SequenceState seq(16);
  std::vector<int64_t> ids = {1, 2, 3};
  std::vector<RowId> out(ids.size() * (*h)->ids_per_position());
  ASSERT_TRUE((*h)->Hash(seq, 0, ids, {}, out.data()).ok());

  std::vector<int64_t> bad = {1, layout.vocab_size};
  absl::Status s = (*h)->Hash(seq, 3, bad, {}, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s;
  EXPECT_EQ(seq.length(), 3);

  s = (*h)->Hash(seq, 5, ids, {}, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("past the 3 positions"), std::string::npos) << s;

  std::vector<int64_t> many(14, 1);
  s = (*h)->Hash(seq, 3, many, {}, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_EQ(seq.length(), 3);

  std::vector<uint8_t> short_mask = {1};
  s = (*h)->Hash(seq, 3, ids, short_mask, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;

  // A bad row anywhere in a batch changes no sequence.
  SequenceState other;
  std::vector<SequenceState*> batch = {&other, &seq};
  std::vector<int64_t> two = {1, 2, 3, -1, 2, 3};
  std::vector<RowId> out2(two.size() * (*h)->ids_per_position());
  s = (*h)->HashBatch(batch, 0, 3, two.data(), nullptr, out2.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("batch row 1"), std::string::npos) << s;
  EXPECT_EQ(other.length(), 0);
  EXPECT_EQ(seq.length(), 3);
}

TEST(Layout, InconsistentLayoutIsRejected) {
  HashLayout layout = SmallLayout();
  layout.offsets[1][5] = layout.table_rows[1];
  absl::Status s = layout.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside"), std::string::npos) << s;

  layout = SmallLayout();
  layout.token_map.pop_back();
  EXPECT_FALSE(NgramHasher::Create(layout).ok());

  EXPECT_FALSE(HashLayout::FromJson("{\"vocab_size\": 3}").ok());
  EXPECT_FALSE(HashLayout::FromJson("not json").ok());
}

TEST(Layout, JsonRoundTrip) {
  HashLayout layout = SmallLayout();
  absl::StatusOr<HashLayout> again = HashLayout::FromJson(layout.ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ToJson(), layout.ToJson());
}

}  // namespace
}  // namespace engram
