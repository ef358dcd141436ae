// Suffix-array searches for drafting: whole-pattern binary search and the per-request longest-suffix match that
// is kept up to date as tokens are appended.
#pragma once

#include "rest/index-shard.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>

namespace rest {

// Sub-range of r whose suffixes start with `pattern`. Precondition: every suffix in r shares pattern[0..depth).
// Compares whole patterns per probe (one random access per probe instead of one binary search per token), so the
// cost is O(log |r|) probes plus the galloping to the upper end, O(log |result|). A negative pattern token
// (k_doc_end) never matches.
sa_range sa_find(const index_shard & shard, sa_range r, std::size_t depth, std::span<const token_id> pattern);

// The pattern's range in the whole shard (uses the shard's first-token table when it has one).
sa_range sa_find(const index_shard & shard, std::span<const token_id> pattern);

// Ranges of two-token prefixes already searched in one shard (a suffix array never changes, so they stay valid).
// Searches start from the pattern's first two tokens' range: on a large index the rounds that narrow a frequent
// first token down to a bigram are the costly ones, and bigrams recur. Bounded: cleared when full.
class sa_bigram_memo {
  public:
    explicit sa_bigram_memo(std::size_t capacity = 1 << 15) : capacity_(capacity) {}
    sa_range range(const index_shard & shard, token_id t0, token_id t1);
    void     clear() { map_.clear(); }

  private:
    std::size_t                                  capacity_;
    std::unordered_map<std::uint64_t, sa_range> map_;
};

// sa_find over the whole shard, starting from the memoized range of the pattern's first two tokens.
sa_range sa_find(const index_shard & shard, std::span<const token_id> pattern, sa_bigram_memo * memo);

// The longest suffix of a context, of at most n_max tokens, that occurs in one shard.
//
// len is exact (not merely a lower bound): the true longest occurring suffix, capped at n_max. range holds the
// suffixes that start with the last `len` context tokens (the whole shard when len == 0).
struct sa_match {
    int      len = 0;
    sa_range range;
    bool     valid = false;  // false until the first update
};

struct sa_match_counters {
    std::uint64_t n_extend = 0;  // tokens handled by narrowing the previous range (one binary search)
    std::uint64_t n_find   = 0;  // whole-pattern searches from the full suffix array
};

// Brings m up to date with ctx, of which the first n_seen tokens were already folded in (n_seen == 0 or !m.valid:
// start over). Appended tokens first try to extend the previous match (one narrow each); once that fails, or the
// match would pass n_max, the new length is bounded by what the failure proves (at most the old length plus the
// tokens after the failure) and found by binary search on the length, where each probe is one sa_find.
void sa_match_update(const index_shard & shard, sa_match & m, std::span<const token_id> ctx, std::size_t n_seen,
                     int n_max, sa_match_counters * counters = nullptr, sa_bigram_memo * memo = nullptr);

}  // namespace rest
