#include "rest/index-shard.h"

#include <algorithm>
#include <stdexcept>

namespace rest {

index_shard::index_shard(const void * text, const std::uint32_t * sa, std::uint64_t n, int width) :
    index_shard(text, n, sa, n, width) {}

index_shard::index_shard(const void * text, std::uint64_t n_text, const std::uint32_t * sa, std::uint64_t n_sa,
                         int width) :
    text_(text), sa_(sa), n_(n_text), n_sa_(n_sa), width_(width) {
    if (width != 2 && width != 4) {
        throw std::invalid_argument("index_shard: token width must be 2 or 4");
    }
    if (n_sa > n_text) {
        throw std::invalid_argument("index_shard: more suffix-array entries than text tokens");
    }
}

void index_shard::set_first_token_buckets(const std::uint32_t * buckets, std::uint64_t n_buckets) {
    if (buckets && (n_buckets == 0 || buckets[n_buckets - 1] != n_sa_)) {
        throw std::invalid_argument("index_shard: first-token table does not end at the suffix-array size");
    }
    buckets_   = buckets;
    n_buckets_ = buckets ? n_buckets : 0;
}

std::uint64_t index_shard::key_at(std::uint64_t pos) const {
    // Past the end sorts first (a shorter suffix precedes its extensions); a separator sorts last.
    if (pos >= n_) {
        return 0;
    }
    const token_id t = token_at(pos);
    return t == k_doc_end ? UINT64_MAX : static_cast<std::uint64_t>(t) + 1;
}

namespace {

// Equal range of a three-way comparator over ranks [lo, hi) (cmp(rank) < 0: the rank sorts before the target).
// One shared descent until a probe lands inside the target run, then the two bounds on either side of it: the
// probes above that point are shared. Each step prefetches the suffix-array entries of both possible next probes,
// so a probe waits on one cache miss (the text) instead of two (suffix array, then text).
template <typename Cmp>
sa_range equal_range(const std::uint32_t * sa, std::uint64_t lo, std::uint64_t hi, Cmp && cmp) {
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        __builtin_prefetch(sa + lo + (mid - lo) / 2);
        __builtin_prefetch(sa + mid + 1 + (hi - mid - 1) / 2);
        const int c = cmp(mid);
        if (c < 0) {
            lo = mid + 1;
        } else if (c > 0) {
            hi = mid;
        } else {
            std::uint64_t a = lo, b = mid;  // first rank not before the target lies in [lo, mid]
            while (a < b) {
                const std::uint64_t m = a + (b - a) / 2;
                __builtin_prefetch(sa + a + (m - a) / 2);
                __builtin_prefetch(sa + m + 1 + (b - m - 1) / 2);
                if (cmp(m) < 0) {
                    a = m + 1;
                } else {
                    b = m;
                }
            }
            std::uint64_t e = mid + 1, f = hi;  // first rank after the target lies in [mid + 1, hi]
            while (e < f) {
                const std::uint64_t m = e + (f - e) / 2;
                __builtin_prefetch(sa + e + (m - e) / 2);
                __builtin_prefetch(sa + m + 1 + (f - m - 1) / 2);
                if (cmp(m) <= 0) {
                    e = m + 1;
                } else {
                    f = m;
                }
            }
            return {a, e};
        }
    }
    return {lo, lo};
}

}  // namespace

sa_range index_shard::narrow(sa_range r, std::uint32_t depth, token_id t) const {
    if (t < 0) {
        return {r.lo, r.lo};
    }
    if (depth == 0 && buckets_ && r == full()) {
        if (static_cast<std::uint64_t>(t) + 1 >= n_buckets_) {
            return {r.hi, r.hi};
        }
        return {buckets_[t], buckets_[t + 1]};
    }
    const std::uint64_t key = static_cast<std::uint64_t>(t) + 1;
    return equal_range(sa_, r.lo, r.hi, [&](std::uint64_t rank) {
        const std::uint64_t k = key_at(std::uint64_t(sa_[rank]) + depth);
        return k < key ? -1 : (k > key ? 1 : 0);
    });
}

sa_range index_shard::find(std::span<const token_id> pattern) const {
    if (pattern.empty()) {
        return full();
    }
    for (const token_id t : pattern) {
        if (t < 0) {
            return {0, 0};
        }
    }
    // The first token by the table (O(1)), the rest by one binary search comparing whole suffixes: O(log |range|)
    // probes in all, against O(|pattern| log |range|) narrowing token by token. A probe reads the pattern's tokens
    // from one text position, usually one cache line.
    const sa_range r = narrow(full(), 0, pattern[0]);
    if (pattern.size() == 1 || r.empty()) {
        return r;
    }
    return equal_range(sa_, r.lo, r.hi, [&](std::uint64_t rank) {
        const std::uint64_t pos = sa_[rank];
        for (std::size_t d = 1; d < pattern.size(); ++d) {
            const std::uint64_t k   = key_at(pos + d);
            const std::uint64_t key = static_cast<std::uint64_t>(pattern[d]) + 1;
            if (k != key) {
                return k < key ? -1 : 1;
            }
        }
        return 0;
    });
}

std::size_t index_shard::read(std::uint64_t pos, std::span<token_id> out) const {
    std::size_t i = 0;
    for (; i < out.size(); ++i) {
        const token_id t = token_at(pos + i);
        if (t == k_doc_end) {
            break;
        }
        out[i] = t;
    }
    return i;
}

sa_range index_shard::run_at(sa_range r, std::uint32_t depth, std::uint64_t rank) const {
    const std::uint64_t key = key_at(std::uint64_t(sa_[rank]) + depth);
    auto same = [&](std::uint64_t i) { return key_at(std::uint64_t(sa_[i]) + depth) == key; };
    // Gallop outwards, then binary search the last step: O(log run length).
    std::uint64_t step = 1, good = rank;
    while (good + step < r.hi && same(good + step)) {
        good += step;
        step *= 2;
    }
    std::uint64_t lo = good + 1, hi = std::min(r.hi, good + step);
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (same(mid)) lo = mid + 1; else hi = mid;
    }
    const std::uint64_t end = lo;
    step = 1;
    good = rank;
    while (good >= r.lo + step && same(good - step)) {
        good -= step;
        step *= 2;
    }
    std::uint64_t blo = good >= r.lo + step ? good - step + 1 : r.lo;
    std::uint64_t bhi = good;  // first index known to be in the run
    while (blo < bhi) {
        const std::uint64_t mid = blo + (bhi - blo) / 2;
        if (same(mid)) bhi = mid; else blo = mid + 1;
    }
    return {blo, end};
}

}  // namespace rest
