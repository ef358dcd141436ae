#include "sa-search.h"

#include <algorithm>

namespace rest {

sa_range sa_bigram_memo::range(const index_shard & shard, token_id t0, token_id t1) {
    const std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(t0)) << 32) |
                              static_cast<std::uint32_t>(t1);
    const auto it = map_.find(key);
    if (it != map_.end()) {
        return it->second;
    }
    if (map_.size() >= capacity_) {
        map_.clear();
    }
    // A bigram not seen before: from the shard's bigram table (in the file, or once the background thread has
    // built it for a version 1 file: a few cache misses), else by a search of the first token's bucket, whose
    // rounds are each a cache and TLB miss on a large index: on /usr/include these first searches were 80% of the
    // searches over 15 us.
    sa_range r;
    if (!shard.bigram_range(t0, t1, r)) {
        const token_id pat[2] = {t0, t1};
        r = shard.find(pat);
    }
    map_.emplace(key, r);
    return r;
}

sa_range sa_find(const index_shard & shard, std::span<const token_id> pattern, sa_bigram_memo * memo) {
    if (!memo || pattern.size() < 2 || pattern[0] < 0 || pattern[1] < 0) {
        return shard.find(pattern);
    }
    return shard.find(memo->range(shard, pattern[0], pattern[1]), 2, pattern);
}

void sa_match_extend(const index_shard & shard, sa_match & m, std::span<const token_id> ctx, std::size_t n_seen,
                     int n_max, sa_match_counters * counters, sa_bigram_memo * memo) {
    n_max = std::max(n_max, 0);
    const std::size_t n = ctx.size();
    // Nothing known of the last `ub` tokens: the whole shard matches them, until a search on the length (starting
    // over, that beats extending token by token through the prompt) or, for a shard whose length did not matter
    // (sa_match_update_longest()), until later tokens extend it.
    auto unknown = [&](int ub) {
        m.len   = 0;
        m.ub    = ub;
        m.range = shard.full();
    };
    if (!m.valid || n_seen == 0 || n_seen > n) {
        m.valid = true;
        unknown(static_cast<int>(std::min<std::size_t>(n_max, n)));
        return;
    }
    for (std::size_t i = n_seen; i < n; ++i) {
        const token_id t = ctx[i];
        const std::size_t n_after = n - 1 - i;
        if (m.len < n_max) {
            // From one token to two by the bigram memo: narrowing a frequent token's whole bucket is the costly
            // step on a large index, and a shard left inexact extends from nothing again.
            const sa_range r = t < 0 || m.range.empty() ? sa_range{m.range.lo, m.range.lo}
                               : m.len == 1 && memo && ctx[i - 1] >= 0 ? memo->range(shard, ctx[i - 1], t)
                                                                       : shard.narrow(m.range, static_cast<std::uint32_t>(m.len), t);
            if (counters) {
                counters->n_extend++;
            }
            if (!r.empty()) {
                m.len++;
                m.ub    = std::min(n_max, m.ub + 1);  // the longest grows by at most the token
                m.range = r;
                continue;
            }
            // len + 1 tokens ending at i do not occur, so at most len do; each later token adds at most one.
            unknown(static_cast<int>(std::min<std::size_t>(n_max, m.len + n_after)));
            return;
        }
        // At the cap the window slides: the n_max tokens ending at i occur if the old window plus t does (not only
        // if: an empty narrow leaves the length unknown), but their range is another one, to be searched for.
        const sa_range r = t < 0 ? sa_range{} : shard.narrow(m.range, static_cast<std::uint32_t>(m.len), t);
        if (r.empty() || n_after > 0) {
            unknown(n_max);
            return;
        }
        m.range = sa_find(shard, ctx.last(static_cast<std::size_t>(n_max)), memo);
        if (counters) {
            counters->n_find++;
        }
    }
}

void sa_match_resolve(const index_shard & shard, sa_match & m, std::span<const token_id> ctx, int need,
                      sa_match_counters * counters, sa_bigram_memo * memo) {
    if (m.exact() || m.ub < need) {
        return;
    }
    int      lo   = m.len;  // a length known to occur at the end of ctx
    int      hi   = m.ub;
    sa_range best = m.range;
    auto probe = [&](int len) {
        if (counters) {
            counters->n_find++;
        }
        return sa_find(shard, ctx.last(static_cast<std::size_t>(len)), memo);
    };
    if (need > lo + 1) {
        const sa_range r = probe(need);
        if (r.empty()) {
            m.ub = need - 1;
            return;
        }
        lo   = need;
        best = r;
    }
    // Binary search on the length: occurrence is monotone (a suffix that occurs has all shorter suffixes occur).
    while (lo < hi) {
        const int      mid = lo + (hi - lo + 1) / 2;
        const sa_range r   = probe(mid);
        if (!r.empty()) {
            lo   = mid;
            best = r;
        } else {
            hi = mid - 1;
        }
    }
    m.len   = lo;
    m.ub    = lo;
    m.range = best;
}

void sa_match_update(const index_shard & shard, sa_match & m, std::span<const token_id> ctx, std::size_t n_seen,
                     int n_max, sa_match_counters * counters, sa_bigram_memo * memo) {
    sa_match_extend(shard, m, ctx, n_seen, n_max, counters, memo);
    sa_match_resolve(shard, m, ctx, 0, counters, memo);
}

int sa_match_update_longest(std::span<const index_shard> shards, std::span<sa_match> ms, std::span<const token_id> ctx,
                            std::size_t n_seen, int n_max, int n_min, sa_match_counters * counters,
                            std::span<sa_bigram_memo> memos) {
    int best = 0;
    for (std::size_t i = 0; i < shards.size(); ++i) {
        sa_match_extend(shards[i], ms[i], ctx, n_seen, n_max, counters, memos.empty() ? nullptr : &memos[i]);
        best = std::max(best, ms[i].len);
    }
    while (true) {
        std::size_t pick = shards.size();
        for (std::size_t i = 0; i < shards.size(); ++i) {
            const sa_match & m = ms[i];
            if (m.exact() || m.ub < std::max(best, n_min)) continue;
            if (pick == shards.size() || m.ub > ms[pick].ub ||
                (m.ub == ms[pick].ub && shards[i].full().size() > shards[pick].full().size())) {
                pick = i;
            }
        }
        if (pick == shards.size()) {
            return best;
        }
        // Resolved, or left with a bound below best: picked once.
        sa_match_resolve(shards[pick], ms[pick], ctx, best, counters, memos.empty() ? nullptr : &memos[pick]);
        best = std::max(best, ms[pick].len);
    }
}

}  // namespace rest
