#include "rest/index-shard.h"

#include <algorithm>
#include <stdexcept>

namespace rest {

index_shard::index_shard(const void * text, const std::uint32_t * sa, std::uint64_t n, int width) :
    text_(text), sa_(sa), n_(n), width_(width) {
    if (width != 2 && width != 4) {
        throw std::invalid_argument("index_shard: token width must be 2 or 4");
    }
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
    const std::uint64_t key = static_cast<std::uint64_t>(t) + 1;
    // lower bound: first rank whose key >= key
    std::uint64_t lo = r.lo, hi = r.hi;
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (key_at(std::uint64_t(sa_[mid]) + depth) < key) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    const std::uint64_t first = lo;
    hi = r.hi;
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (key_at(std::uint64_t(sa_[mid]) + depth) <= key) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return {first, lo};
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
