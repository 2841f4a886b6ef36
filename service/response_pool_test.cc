#include "service/response_pool.h"

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace engram {
namespace {

TEST(ResponseBufferPool, SlicesHaveTheAskedSizeAndAreRecycled) {
  ResponseBufferPool pool;
  uint8_t* data = nullptr;
  const size_t size = 3 * 1024 * 1024 + 17;
  {
    grpc::Slice s = pool.Allocate(size, &data);
    EXPECT_EQ(s.size(), size);
    EXPECT_EQ(s.begin(), data);
    std::memset(data, 7, size);
    EXPECT_EQ(pool.idle_bytes(), 0u);
  }
  EXPECT_EQ(pool.idle_bytes(), size_t{4} << 20);  // the power of two above
  uint8_t* again = nullptr;
  for (int i = 0; i < 10; ++i) {
    grpc::Slice s = pool.Allocate(size - 1000, &again);
    EXPECT_EQ(again, data) << "a released buffer of the same class is reused";
    grpc::Slice copy = s;  // gRPC holds its own refs: the last one releases
  }
  EXPECT_EQ(pool.buffers_allocated(), 1u);
  grpc::Slice a = pool.Allocate(size, &data), b = pool.Allocate(size, &again);
  EXPECT_NE(data, again) << "buffers in use are never handed out twice";
  EXPECT_EQ(pool.buffers_allocated(), 2u);
}

TEST(ResponseBufferPool, KeepsAtMostMaxIdleBytes) {
  ResponseBufferPool pool(size_t{1} << 20);
  uint8_t* data;
  std::vector<grpc::Slice> held;
  for (int i = 0; i < 8; ++i) held.push_back(pool.Allocate(300 * 1024, &data));
  held.clear();  // eight 512 KiB buffers released; room for two
  EXPECT_EQ(pool.idle_bytes(), size_t{1} << 20);
}

TEST(ResponseBufferPool, SlicesMayOutliveThePool) {
  grpc::Slice survivor;
  {
    ResponseBufferPool pool;
    uint8_t* data;
    survivor = pool.Allocate(1 << 20, &data);
    std::memset(data, 3, 1 << 20);
  }
  EXPECT_EQ(survivor.begin()[12345], 3);
  survivor = grpc::Slice();  // frees the buffer (checked under ASan/valgrind)
}

TEST(ResponseBufferPool, ConcurrentAllocateAndRelease) {
  ResponseBufferPool pool;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 500; ++i) {
        uint8_t* data;
        const size_t size = (size_t{64} << 10) << ((i + t) % 5);
        grpc::Slice s = pool.Allocate(size, &data);
        data[0] = static_cast<uint8_t>(t);
        data[size - 1] = static_cast<uint8_t>(i);
        ASSERT_EQ(s.begin()[0], t);
        ASSERT_EQ(s.end()[-1], static_cast<uint8_t>(i));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(pool.buffers_allocated(), 20u);
}

}  // namespace
}  // namespace engram
