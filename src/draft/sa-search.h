// Suffix-array searches for drafting: whole-pattern searches from memoized bigram ranges (index_shard::find does
// the search) and the per-request longest-suffix match that is kept up to date as tokens are appended.
#pragma once

#include "rest/index-shard.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>

namespace rest {

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

// index_shard::find over the whole shard, starting from the memoized range of the pattern's first two tokens.
sa_range sa_find(const index_shard & shard, std::span<const token_id> pattern, sa_bigram_memo * memo);

// The longest suffix of a context, of at most n_max tokens, that occurs in one shard, or what is known of it.
//
// A suffix of len tokens occurs, and range holds the suffixes that start with the last `len` context tokens (the
// whole shard when len == 0); the longest occurring suffix, capped at n_max, has between len and ub tokens. The
// match is exact when len == ub: sa_match_update() leaves it so, while shards whose length matters only where it
// reaches the others' (sa_match_update_longest()) may stay inexact.
struct sa_match {
    int      len = 0;
    int      ub  = 0;
    sa_range range;
    bool     valid = false;  // false until the first update
    bool     exact() const { return len == ub; }
};

struct sa_match_counters {
    std::uint64_t n_extend = 0;  // tokens handled by narrowing the previous range (one binary search)
    std::uint64_t n_find   = 0;  // whole-pattern searches from the full suffix array
};

// Folds ctx into m without a length search, of which the first n_seen tokens were already folded in (n_seen == 0
// or !m.valid: start over). Appended tokens extend the previous match (one narrow each); once that fails, the new
// length is only bounded by what the failure proves (at most the old length plus the tokens after the failure,
// since a suffix that occurs has all its shorter suffixes occur) and m.len drops to 0. At the cap n_max the window
// slides, and where the window ending at the last token is known to occur its range is searched for (one sa_find).
void sa_match_extend(const index_shard & shard, sa_match & m, std::span<const token_id> ctx, std::size_t n_seen,
                     int n_max, sa_match_counters * counters = nullptr, sa_bigram_memo * memo = nullptr);

// Makes m exact by binary search on the length in [m.len, m.ub], each probe one sa_find, unless it cannot reach
// `need` tokens (m.ub < need). Where need > m.len + 1 the length `need` is probed first: if it does not occur, m
// stays inexact with ub = need - 1 (one search instead of a binary search).
void sa_match_resolve(const index_shard & shard, sa_match & m, std::span<const token_id> ctx, int need,
                      sa_match_counters * counters = nullptr, sa_bigram_memo * memo = nullptr);

// Brings m up to date with ctx and exact: sa_match_extend() then sa_match_resolve() with no length needed.
void sa_match_update(const index_shard & shard, sa_match & m, std::span<const token_id> ctx, std::size_t n_seen,
                     int n_max, sa_match_counters * counters = nullptr, sa_bigram_memo * memo = nullptr);

// The same for several shards, of which only those whose match is the longest (and at least n_min tokens) are
// drafted from: shards are resolved the highest bound first (the largest shard first among equal bounds), each
// only where its bound reaches the longest match found so far and n_min, and then with that length probed first
// (not n_min: where the shortest match drafted from nearly always occurs, as a bigram of code does, probing it first
// would add a search to most length searches). Where the longest match over the shards is at least n_min, returns
// it, and every shard whose len equals it is exact; otherwise returns some length below n_min. Shards that cannot
// reach the result may stay inexact. On an index of two shards (Linux + /usr/include) a length search in the
// second shard was mostly a full binary search for a match shorter than the first shard's. memos: one per shard,
// or empty.
int sa_match_update_longest(std::span<const index_shard> shards, std::span<sa_match> ms, std::span<const token_id> ctx,
                            std::size_t n_seen, int n_max, int n_min, sa_match_counters * counters,
                            std::span<sa_bigram_memo> memos);

}  // namespace rest
