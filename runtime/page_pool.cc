#include "runtime/page_pool.h"

#include <cassert>

namespace doppler::runtime {

PagePool::PagePool(int64_t pages)
    : refs_(static_cast<size_t>(pages), 0),
      hash_of_(static_cast<size_t>(pages), 0),
      released_at_(static_cast<size_t>(pages), 0),
      free_count_(pages) {
  for (int64_t p = pages - 1; p >= 0; --p) never_cached_.push_back(static_cast<int32_t>(p));
}

bool PagePool::Reserve(int64_t n) {
  if (n > available()) return false;
  reserved_ += n;
  return true;
}

void PagePool::Unreserve(int64_t n) {
  assert(n <= reserved_);
  reserved_ -= n;
}

void PagePool::Unfree(int32_t page) {
  const size_t p = static_cast<size_t>(page);
  if (hash_of_[p] != 0) cached_free_.erase(released_at_[p]);
  --free_count_;
}

int32_t PagePool::Take() {
  assert(reserved_ > 0 && free_count_ > 0);
  --reserved_;
  int32_t page;
  if (!never_cached_.empty()) {
    page = never_cached_.back();
    never_cached_.pop_back();
    --free_count_;
  } else {
    page = cached_free_.begin()->second;
    Unfree(page);
    by_hash_.erase(hash_of_[static_cast<size_t>(page)]);
    hash_of_[static_cast<size_t>(page)] = 0;
  }
  refs_[static_cast<size_t>(page)] = 1;
  return page;
}

uint64_t PagePool::ChainHash(uint64_t prev, std::span<const int32_t> tokens) {
  // FNV-1a over the previous hash and the tokens, then a final mix; 0 is kept for "no prefix".
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(prev);
  for (int32_t t : tokens) mix(static_cast<uint32_t>(t));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h == 0 ? 1 : h;
}

std::optional<int32_t> PagePool::Share(uint64_t hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const int32_t page = it->second;
  if (refs_[static_cast<size_t>(page)]++ == 0) Unfree(page);
  return page;
}

void PagePool::Publish(int32_t page, uint64_t hash) {
  const size_t p = static_cast<size_t>(page);
  if (hash_of_[p] != 0 || by_hash_.count(hash) > 0) return;  // already cached, or another page has it
  hash_of_[p] = hash;
  by_hash_[hash] = page;
}

void PagePool::Release(int32_t page) {
  const size_t p = static_cast<size_t>(page);
  assert(refs_[p] > 0);
  if (--refs_[p] > 0) return;
  ++free_count_;
  if (hash_of_[p] == 0) {
    never_cached_.push_back(page);
  } else {
    released_at_[p] = ++clock_;
    cached_free_[clock_] = page;
  }
}

}  // namespace doppler::runtime
