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
    // One descent until a probe lands inside the run, then the two bounds separately on either side of it: the
    // probes above that point are shared, which matters when r is large and the run small.
    std::uint64_t lo = r.lo, hi = r.hi;
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        const std::uint64_t k   = key_at(std::uint64_t(sa_[mid]) + depth);
        if (k < key) {
            lo = mid + 1;
        } else if (k > key) {
            hi = mid;
        } else {
            std::uint64_t a = lo, b = mid;  // first rank with key >= key lies in [lo, mid]
            while (a < b) {
                const std::uint64_t m = a + (b - a) / 2;
                if (key_at(std::uint64_t(sa_[m]) + depth) < key) {
                    a = m + 1;
                } else {
                    b = m;
                }
            }
            std::uint64_t c = mid + 1, d = hi;  // first rank with key > key lies in [mid + 1, hi]
            while (c < d) {
                const std::uint64_t m = c + (d - c) / 2;
                if (key_at(std::uint64_t(sa_[m]) + depth) <= key) {
                    c = m + 1;
                } else {
                    d = m;
                }
            }
            return {a, c};
        }
    }
    return {lo, lo};
}

sa_range index_shard::find(std::span<const token_id> pattern) const {
    sa_range r = full();
    for (std::uint32_t d = 0; d < pattern.size() && !r.empty(); ++d) {
        if (pattern[d] < 0) {
            return {r.lo, r.lo};
        }
        r = narrow(r, d, pattern[d]);
    }
    return r;
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
