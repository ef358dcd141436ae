#include "sa-search.h"

#include "index/first-rank.h"

#include <algorithm>

namespace rest {

namespace {

// <0, 0 or >0 as the suffix at text position pos sorts before, starts with, or sorts after pattern[from..].
inline int compare_at(const index_shard & s, std::uint64_t pos, std::span<const token_id> pattern, std::size_t from) {
    for (std::size_t i = from; i < pattern.size(); ++i) {
        const std::uint64_t a = s.key_at(pos + i);
        const std::uint64_t b = static_cast<std::uint64_t>(pattern[i]) + 1;
        if (a != b) {
            return a < b ? -1 : 1;
        }
    }
    return 0;
}

// sa_find over a range holding several of the shard's sample rows: the pattern is placed among the rows (their keys
// decide unless one agrees with the whole of its tokens and the pattern is longer, or holds a separator: then the
// text at its suffix), and each end is searched for among the sample_step() ranks around it. On a 600M-token index
// a draft step's p99 fell from 65 to 28 us (the per-step minimum of four runs): the rows are contiguous and stay
// cached, where each round of a search over the suffix array is a cache and TLB miss, two dependent ones.
sa_range sa_find_sampled(const index_shard & shard, sa_range r, std::size_t depth, std::span<const token_id> pattern) {
    const std::uint64_t step = index_shard::sample_step();
    const std::size_t   w    = std::min(index_shard::sample_tokens(), pattern.size());
    auto cmp_row = [&](std::uint64_t j) {
        for (std::size_t d = depth; d < w; ++d) {
            const std::uint64_t a = shard.sample_row_key(j, d);
            const std::uint64_t b = static_cast<std::uint64_t>(pattern[d]) + 1;
            if (a != b) {
                return a != UINT64_MAX ? (a < b ? -1 : 1) : compare_at(shard, shard.suffix(j * step), pattern, depth);
            }
        }
        return w == pattern.size() ? 0 : compare_at(shard, shard.suffix(j * step), pattern, depth);
    };
    auto cmp_rank = [&](std::uint64_t rank) { return compare_at(shard, shard.suffix(rank), pattern, depth); };
    // Rows j0..j1-1 lie in r. The first suffix not before the pattern lies after row jl - 1 and at or before row jl
    // (r's ends where there is no such row); the first after it, between rows ju - 1 and ju.
    const std::uint64_t j0 = (r.lo + step - 1) / step, j1 = (r.hi + step - 1) / step;
    const std::uint64_t jl = first_rank(j0, j1, [&](std::uint64_t j) { return cmp_row(j) >= 0; });
    const std::uint64_t ju = first_rank(jl, j1, [&](std::uint64_t j) { return cmp_row(j) > 0; });
    auto after_row  = [&](std::uint64_t j) { return j == j0 ? r.lo : (j - 1) * step + 1; };
    auto at_row     = [&](std::uint64_t j) { return j < j1 ? j * step : r.hi; };
    const std::uint64_t a = first_rank(after_row(jl), at_row(jl), [&](std::uint64_t k) { return cmp_rank(k) >= 0; });
    const std::uint64_t e = first_rank(std::max(after_row(ju), a), at_row(ju), [&](std::uint64_t k) { return cmp_rank(k) > 0; });
    return {a, std::max(a, e)};
}

}  // namespace

sa_range sa_find(const index_shard & shard, sa_range r, std::size_t depth, std::span<const token_id> pattern) {
    for (std::size_t i = depth; i < pattern.size(); ++i) {
        if (pattern[i] < 0) {
            return {r.lo, r.lo};
        }
    }
    if (depth >= pattern.size() || r.empty()) {
        return r;
    }
    // (Rows for every rank of r: the datastore checks a table's size at open, and one too small for r is not used.)
    if (depth < index_shard::sample_tokens() && r.size() >= 4 * index_shard::sample_step() &&
        (r.hi + index_shard::sample_step() - 1) / index_shard::sample_step() <= shard.n_sample_rows()) {
        return sa_find_sampled(shard, r, depth, pattern);
    }
    // Lower bound: first rank whose suffix does not sort before the pattern. Four-way: three probes per round,
    // independent of each other, so a round costs about one memory latency and there are half as many rounds
    // as in a binary search (on a large index each round is a cache and TLB miss).
    std::uint64_t lo = r.lo, hi = r.hi;
    while (hi - lo >= 8) {
        const std::uint64_t q  = (hi - lo) / 4;
        const std::uint64_t m1 = lo + q, m2 = lo + 2 * q, m3 = lo + 3 * q;
        const std::uint64_t p1 = shard.suffix(m1), p2 = shard.suffix(m2), p3 = shard.suffix(m3);
        const bool          b1 = compare_at(shard, p1, pattern, depth) < 0;
        const bool          b2 = compare_at(shard, p2, pattern, depth) < 0;
        const bool          b3 = compare_at(shard, p3, pattern, depth) < 0;
        if (b3) {
            lo = m3 + 1;
        } else if (b2) {
            lo = m2 + 1;
            hi = m3;
        } else if (b1) {
            lo = m1 + 1;
            hi = m2;
        } else {
            hi = m1;
        }
    }
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (compare_at(shard, shard.suffix(mid), pattern, depth) < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    const std::uint64_t first = lo;
    if (first == r.hi || compare_at(shard, shard.suffix(first), pattern, depth) != 0) {
        return {first, first};
    }
    // Upper end by galloping from the first match: ranges of long patterns are short, so this beats a second
    // binary search over the whole of r.
    std::uint64_t good = first, step = 1;
    while (good + step < r.hi && compare_at(shard, shard.suffix(good + step), pattern, depth) == 0) {
        good += step;
        step *= 2;
    }
    lo = good + 1;
    hi = std::min(r.hi, good + step);
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (compare_at(shard, shard.suffix(mid), pattern, depth) == 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return {first, lo};
}

sa_range sa_find(const index_shard & shard, std::span<const token_id> pattern) {
    if (pattern.empty()) {
        return shard.full();
    }
    if (pattern[0] < 0) {
        return {0, 0};
    }
    // narrow() at depth 0 over the full range is O(1) with the shard's first-token table.
    const sa_range r = shard.narrow(shard.full(), 0, pattern[0]);
    return sa_find(shard, r, 1, pattern);
}

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
        r = sa_find(shard, pat);
    }
    map_.emplace(key, r);
    return r;
}

sa_range sa_find(const index_shard & shard, std::span<const token_id> pattern, sa_bigram_memo * memo) {
    if (!memo || pattern.size() < 2 || pattern[0] < 0 || pattern[1] < 0) {
        return sa_find(shard, pattern);
    }
    return sa_find(shard, memo->range(shard, pattern[0], pattern[1]), 2, pattern);
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
