// index_shard::find: the one whole-pattern search, shared by the drafter (from its bigram ranges) and by every
// lookup (`rest index query`, find_all).
#include "rest/index-shard.h"

#include <algorithm>

namespace rest {

namespace {

// The first index in [a, b) where a monotone predicate holds (b when none does).
template <typename Pred> std::uint64_t first_rank(std::uint64_t a, std::uint64_t b, Pred && pred) {
    while (a < b) {
        const std::uint64_t m = a + (b - a) / 2;
        if (pred(m)) b = m; else a = m + 1;
    }
    return a;
}

// <0, 0 or >0 as the suffix at text position pos sorts before, starts with, or sorts after pattern[from..].
// Where the pattern's whole span lies in the text (almost always), one bound check for the span instead of one per
// token (that check is what keeps a suffix-array entry past the text from reading outside the mapping).
inline int compare_at(const index_shard & s, std::uint64_t pos, std::span<const token_id> pattern, std::size_t from) {
    const std::uint64_t n      = s.n_tokens();
    const bool          inside = pos < n && pattern.size() <= n - pos;
    for (std::size_t i = from; i < pattern.size(); ++i) {
        const std::uint64_t a = inside ? s.key_in(pos + i) : s.key_at(pos + i);
        const std::uint64_t b = static_cast<std::uint64_t>(pattern[i]) + 1;
        if (a != b) {
            return a < b ? -1 : 1;
        }
    }
    return 0;
}

// find() over a range holding several of the shard's sample rows: the pattern is placed among the rows (their keys
// decide unless one agrees with the whole of its tokens and the pattern is longer, or holds a separator: then the
// text at its suffix), and each end is searched for among the sample_step() ranks around it. On a 600M-token index
// a draft step's p99 fell from 65 to 28 us (the per-step minimum of four runs): the rows are contiguous and stay
// cached, where each round of a search over the suffix array is a cache and TLB miss, two dependent ones.
sa_range find_sampled(const index_shard & shard, sa_range r, std::size_t depth, std::span<const token_id> pattern) {
    const std::uint64_t step = index_shard::sample_step();
    const std::size_t   w    = std::min(index_shard::sample_tokens(), pattern.size());
    auto cmp_row = [&](std::uint64_t j) {
        for (std::size_t d = depth; d < w; ++d) {
            const std::uint64_t a = shard.sample_row_key(j, d);
            const std::uint64_t b = static_cast<std::uint64_t>(pattern[d]) + 1;
            if (a != b) {
                return a != UINT64_MAX ? (a < b ? -1 : 1) : compare_at(shard, shard.suffix(j * step), pattern, d);
            }
        }
        // (The text agrees with the row's tokens up to here: compared from the first one the row did not decide.)
        return w == pattern.size() ? 0 : compare_at(shard, shard.suffix(j * step), pattern, w);
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
    const std::uint64_t e =
        first_rank(std::max(after_row(ju), a), at_row(ju), [&](std::uint64_t k) { return cmp_rank(k) > 0; });
    return {a, std::max(a, e)};
}

}  // namespace

sa_range index_shard::find(sa_range r, std::size_t depth, std::span<const token_id> pattern) const {
    for (std::size_t i = depth; i < pattern.size(); ++i) {
        if (pattern[i] < 0) {
            return {r.lo, r.lo};
        }
    }
    if (depth >= pattern.size() || r.empty()) {
        return r;
    }
    if (rows_cover(r, depth)) {
        return find_sampled(*this, r, depth, pattern);
    }
    // Lower bound: first rank whose suffix does not sort before the pattern. Four-way: three probes per round,
    // independent of each other, so a round costs about one memory latency and there are half as many rounds
    // as in a binary search (on a large index each round is a cache and TLB miss).
    std::uint64_t lo = r.lo, hi = r.hi;
    while (hi - lo >= 8) {
        const std::uint64_t q  = (hi - lo) / 4;
        const std::uint64_t m1 = lo + q, m2 = lo + 2 * q, m3 = lo + 3 * q;
        const std::uint64_t p1 = suffix(m1), p2 = suffix(m2), p3 = suffix(m3);
        const bool          b1 = compare_at(*this, p1, pattern, depth) < 0;
        const bool          b2 = compare_at(*this, p2, pattern, depth) < 0;
        const bool          b3 = compare_at(*this, p3, pattern, depth) < 0;
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
    auto before = [&](std::uint64_t rank) { return compare_at(*this, suffix(rank), pattern, depth) < 0; };
    const std::uint64_t first = first_rank(lo, hi, [&](std::uint64_t m) { return !before(m); });
    if (first == r.hi || compare_at(*this, suffix(first), pattern, depth) != 0) {
        return {first, first};
    }
    // Upper end by galloping from the first match: ranges of long patterns are short, so this beats a second
    // binary search over the whole of r.
    auto matches = [&](std::uint64_t rank) { return compare_at(*this, suffix(rank), pattern, depth) == 0; };
    std::uint64_t good = first, step = 1;
    while (good + step < r.hi && matches(good + step)) {
        good += step;
        step *= 2;
    }
    return {first, first_rank(good + 1, std::min(r.hi, good + step), [&](std::uint64_t m) { return !matches(m); })};
}

sa_range index_shard::find(std::span<const token_id> pattern) const {
    if (pattern.empty()) {
        return full();
    }
    if (std::any_of(pattern.begin(), pattern.end(), [](token_id t) { return t < 0; })) {
        return {0, 0};
    }
    // The first token by the first-token table (O(1)) where the shard has one, the rest by one search comparing
    // whole suffixes: O(log |range|) probes, against O(|pattern| log |range|) narrowing token by token. Without a
    // table (the history store, a prediction), one search over the whole shard: the same range, one search fewer.
    return buckets_ ? find(narrow(full(), 0, pattern[0]), 1, pattern) : find(full(), 0, pattern);
}

}  // namespace rest
