// The KV page pool's bookkeeping: reservations, prefix sharing by chain hash, and the order in
// which cached pages are handed out again.
#include "runtime/page_pool.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace doppler::runtime {
namespace {

TEST(PagePool, ReservationsBoundWhatCanBeTaken) {
  PagePool pool(5);
  EXPECT_TRUE(pool.Reserve(3));
  EXPECT_FALSE(pool.Reserve(3));  // 2 left
  EXPECT_EQ(pool.available(), 2);
  std::set<int32_t> taken;
  for (int i = 0; i < 3; ++i) taken.insert(pool.Take());
  EXPECT_EQ(taken.size(), 3u);
  EXPECT_EQ(pool.available(), 2);
  for (int32_t p : taken) pool.Release(p);
  EXPECT_EQ(pool.available(), 5);
}

TEST(PagePool, SharedPrefixPagesAreFoundByChainHashAndKeptWhileFree) {
  PagePool pool(4);
  const std::vector<int32_t> a = {1, 2, 3}, b = {4, 5, 6};
  const uint64_t ha = PagePool::ChainHash(0, a), hab = PagePool::ChainHash(ha, b);
  EXPECT_NE(ha, PagePool::ChainHash(0, b));
  EXPECT_NE(hab, PagePool::ChainHash(0, b));  // the same page after another prefix is another hash
  ASSERT_TRUE(pool.Reserve(2));
  const int32_t p0 = pool.Take(), p1 = pool.Take();
  pool.Publish(p0, ha);
  pool.Publish(p1, hab);
  // A second holder while the first still holds them.
  EXPECT_EQ(pool.Share(ha), p0);
  EXPECT_EQ(pool.holders(p0), 2);
  pool.Release(p0);
  pool.Release(p0);
  pool.Release(p1);
  EXPECT_EQ(pool.available(), 4);
  // Free, but still cached: found again, and taken out of the free pages.
  EXPECT_EQ(pool.Share(hab), p1);
  EXPECT_EQ(pool.available(), 3);
  const std::vector<int32_t> other = {9};
  EXPECT_FALSE(pool.Share(PagePool::ChainHash(0, other)).has_value());
  pool.Release(p1);
}

TEST(PagePool, NeverCachedPagesGoFirstThenTheLeastRecentlyReleased) {
  PagePool pool(3);
  ASSERT_TRUE(pool.Reserve(2));
  const int32_t p0 = pool.Take(), p1 = pool.Take();
  pool.Publish(p0, 11);
  pool.Publish(p1, 22);
  pool.Release(p1);  // released first: handed out first among cached ones
  pool.Release(p0);
  ASSERT_TRUE(pool.Reserve(3));
  const int32_t fresh = pool.Take();
  EXPECT_NE(fresh, p0);
  EXPECT_NE(fresh, p1);
  EXPECT_EQ(pool.Take(), p1);
  EXPECT_FALSE(pool.Share(22).has_value());  // its prefix is forgotten once it is reused
  EXPECT_EQ(pool.Share(11), p0);             // not yet reused: still shared
  pool.Unreserve(1);
}

}  // namespace
}  // namespace doppler::runtime
