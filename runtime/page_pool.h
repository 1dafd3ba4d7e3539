// The pages of a paged KV cache (graph/paging.h), on the host: which are free, how many sequences
// hold each, and the full pages of prompts by the hash of everything up to their end, so that a
// second prompt with the same beginning reuses their keys and values (prefix sharing).
//
// A page that no sequence holds any more keeps its hash and its contents until it is handed out
// again, the least recently released first: a later prompt with that prefix still finds it. A page
// held by several sequences is never written (a shared page is always a full page of a prompt,
// and a sequence writes only past its shared prefix).
//
// Pages are also reserved: a sequence reserves, when it is admitted, every page it may take to
// the end of its generation, so a running sequence never waits for a page; one that cannot reserve
// waits until others leave.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace doppler::runtime {

class PagePool {
 public:
  explicit PagePool(int64_t pages);

  int64_t pages() const { return static_cast<int64_t>(refs_.size()); }
  // Pages no sequence holds (some may keep a cached prefix) less those reserved.
  int64_t available() const { return free_count_ - reserved_; }

  // Reserves n pages for later Take calls; false (nothing reserved) where fewer are available.
  bool Reserve(int64_t n);
  void Unreserve(int64_t n);
  // A page for a sequence, from its reservation: one never cached first, else the least recently
  // released cached one (its hash forgotten). Held once.
  int32_t Take();

  // The hash of a full page of tokens that follows the prefix hashed as `prev` (0 for the first).
  static uint64_t ChainHash(uint64_t prev, std::span<const int32_t> tokens);
  // A page holding exactly that prefix's last page (held once more, and no longer free), if any.
  // It takes no reservation: the caller unreserves one page for it.
  std::optional<int32_t> Share(uint64_t hash);
  // Records that `page` (held) holds the prefix hashed as `hash`.
  void Publish(int32_t page, uint64_t hash);
  // One holder fewer; the last one frees it (keeping its cached prefix).
  void Release(int32_t page);

  int32_t holders(int32_t page) const { return refs_[static_cast<size_t>(page)]; }

 private:
  void Unfree(int32_t page);

  std::vector<int32_t> refs_;
  std::vector<uint64_t> hash_of_;            // 0: no cached prefix
  std::vector<uint64_t> released_at_;        // a free cached page's key in `cached_free_`
  std::vector<int32_t> never_cached_;        // free pages without a prefix
  std::map<uint64_t, int32_t> cached_free_;  // free pages with a prefix, by release order
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int64_t free_count_ = 0, reserved_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace doppler::runtime
