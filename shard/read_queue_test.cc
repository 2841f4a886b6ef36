// ReadQueue (shard/read_queue.h): chunks earliest need-by first, FIFO among
// equals, one chunk at a time; later need-bys held to `later_depth` reads
// while the earliest is outstanding; a blocking caller's own claims; Stop.
#include "shard/read_queue.h"

#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

std::shared_ptr<ReadQueue::Job> MakeJob(absl::Duration need_in, size_t chunks) {
  auto job = std::make_shared<ReadQueue::Job>();
  job->need_by = kT0 + need_in;
  job->chunks = chunks;
  return job;
}

// The job and chunk of each claim TryNext gives, until it gives none.
std::vector<std::pair<ReadQueue::Job*, size_t>> Drain(ReadQueue& q,
                                                      std::vector<ReadQueue::Claim>* claims) {
  std::vector<std::pair<ReadQueue::Job*, size_t>> out;
  while (std::optional<ReadQueue::Claim> c = q.TryNext()) {
    out.emplace_back(c->job.get(), c->chunk);
    claims->push_back(*std::move(c));
  }
  return out;
}

TEST(ReadQueueTest, EarliestNeedByFirstAndArrivalOrderAmongEquals) {
  ReadQueue q({.later_depth = 100});
  auto late = MakeJob(absl::Milliseconds(7), 2);
  auto first = MakeJob(absl::Microseconds(500), 1);
  auto second = MakeJob(absl::Microseconds(500), 1);
  q.Add(late);
  q.Add(first);
  q.Add(second);
  std::vector<ReadQueue::Claim> claims;
  using P = std::pair<ReadQueue::Job*, size_t>;
  EXPECT_EQ(
      Drain(q, &claims),
      (std::vector<P>{{first.get(), 0}, {second.get(), 0}, {late.get(), 0}, {late.get(), 1}}));
  EXPECT_EQ(q.in_flight(), 4u);
  EXPECT_EQ(q.queued_chunks(), 0u);
}

TEST(ReadQueueTest, LaterNeedBysHeldToTheDepthWhileTheEarliestIsOutstanding) {
  ReadQueue q({.later_depth = 2});
  auto urgent = MakeJob(absl::Microseconds(500), 2);
  auto later = MakeJob(absl::Milliseconds(7), 10);
  q.Add(later);
  q.Add(urgent);
  std::vector<ReadQueue::Claim> claims;
  // Both urgent chunks, then two of the later request beside them.
  auto got = Drain(q, &claims);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].first, urgent.get());
  EXPECT_EQ(got[1].first, urgent.get());
  EXPECT_EQ(got[2].first, later.get());
  EXPECT_EQ(got[3].first, later.get());
  // One urgent chunk read: the other still is, so the depth holds.
  q.Done(claims[0]);
  EXPECT_FALSE(q.TryNext().has_value());
  // Both read: the later request is the earliest now, and takes every reader.
  q.Done(claims[1]);
  claims.clear();
  EXPECT_EQ(Drain(q, &claims).size(), 8u);
  EXPECT_EQ(q.queued_chunks(), 0u);
}

TEST(ReadQueueTest, AnEarlierRequestTakesTheNextChunkFromALargeOne) {
  ReadQueue q({.later_depth = 1});
  auto large = MakeJob(absl::Milliseconds(7), 5);
  q.Add(large);
  std::optional<ReadQueue::Claim> a = q.TryNext();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->job, large);
  // An urgent request arrives while a chunk of the large one is read: its
  // chunk is next, and the large request waits while it is outstanding
  // (its one chunk in flight is the depth).
  auto urgent = MakeJob(absl::Microseconds(500), 1);
  q.Add(urgent);
  std::optional<ReadQueue::Claim> b = q.TryNext();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->job, urgent);
  EXPECT_FALSE(q.TryNext().has_value());
  q.Done(*b);
  std::optional<ReadQueue::Claim> c = q.TryNext();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->job, large);
  EXPECT_EQ(c->chunk, 1u);
}

TEST(ReadQueueTest, ZeroDepthIsOneSoTheDiskNeverIdles) {
  ReadQueue q({.later_depth = 0});
  auto urgent = MakeJob(absl::Microseconds(500), 1);
  auto later = MakeJob(absl::Milliseconds(7), 3);
  q.Add(urgent);
  q.Add(later);
  std::vector<ReadQueue::Claim> claims;
  EXPECT_EQ(Drain(q, &claims).size(), 2u);  // the urgent chunk and one later
}

TEST(ReadQueueTest, TheOwnerClaimsItsChunksOutsideTheOrder) {
  ReadQueue q({.later_depth = 1});
  auto urgent = MakeJob(absl::Microseconds(500), 1);
  auto own = std::make_shared<ReadQueue::Job>();  // a blocking read: no need-by
  own->chunks = 3;
  q.Add(urgent);
  q.Add(own);
  std::optional<ReadQueue::Claim> u = q.TryNext();
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->job, urgent);
  // One helper joins the urgent read (the depth), then the depth holds the
  // helpers back, not the owner.
  std::optional<ReadQueue::Claim> h = q.TryNext();
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->chunk, 0u);
  EXPECT_FALSE(q.TryNext().has_value());
  EXPECT_EQ(q.ClaimOwn(*own), std::optional<size_t>(1));
  EXPECT_EQ(q.ClaimOwn(*own), std::optional<size_t>(2));
  EXPECT_EQ(q.ClaimOwn(*own), std::nullopt);
  EXPECT_EQ(q.queued_chunks(), 0u);
  q.Done(*u);
  q.Done(*h);
  EXPECT_EQ(q.in_flight(), 0u);
  EXPECT_FALSE(q.TryNext().has_value());
}

TEST(ReadQueueTest, NextWaitsForWorkAndEndsAfterStopWhenDrained) {
  ReadQueue q;
  std::vector<size_t> chunks;
  absl::Notification done;
  std::thread reader([&] {
    while (std::optional<ReadQueue::Claim> c = q.Next()) {
      chunks.push_back(c->chunk);
      q.Done(*c);
    }
    done.Notify();
  });
  q.Add(MakeJob(absl::Milliseconds(1), 3));
  q.Stop();
  reader.join();
  EXPECT_TRUE(done.HasBeenNotified());
  EXPECT_EQ(chunks, (std::vector<size_t>{0, 1, 2}));
}

}  // namespace
}  // namespace engram
