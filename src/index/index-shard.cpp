#include "rest/index-shard.h"

#include "bigram-scan.h"

#include <algorithm>
#include <atomic>
#include <mutex>
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

// The bigram table (bigram-scan.h): read from the index file, or built by build_bigrams() into `owned`. The
// lookups read it through the pointers, which are set before `ready`.
struct index_shard::bigrams {
    bigram_table          owned;
    const std::uint32_t * first = nullptr;
    const std::uint32_t * key   = nullptr;
    const std::uint32_t * start = nullptr;
    std::atomic<bool>     ready{false};
    std::mutex            building;  // one build at a time (the background thread, a test, the fuzzer)
};

void index_shard::set_first_token_buckets(const std::uint32_t * buckets, std::uint64_t n_buckets) {
    if (buckets && (n_buckets == 0 || buckets[n_buckets - 1] != n_sa_)) {
        throw std::invalid_argument("index_shard: first-token table does not end at the suffix-array size");
    }
    buckets_   = buckets;
    n_buckets_ = buckets ? n_buckets : 0;
    bigrams_ = buckets ? std::make_shared<bigrams>() : nullptr;
}

bool index_shard::bigram_range(token_id t0, token_id t1, sa_range & out) const {
    if (!bigrams_ || !bigrams_->ready.load(std::memory_order_acquire) || t0 < 0 || t1 < 0 ||
        static_cast<std::uint64_t>(t0) + 1 >= n_buckets_) {
        return false;
    }
    const bigrams &     b   = *bigrams_;
    const std::uint32_t key = static_cast<std::uint32_t>(t1) + 1;
    const auto          beg = b.key + b.first[t0], end = b.key + b.first[t0 + 1];
    // Keys ascend within a first token wherever the suffix array is sorted; on a corrupt one (or a corrupt table
    // read from the file) they may not, and the search then lands on some entry of the slice. Its range is kept
    // inside the first token's bucket, so a wrong table gives wrong drafts at worst, never a rank out of bounds.
    const auto          it = std::lower_bound(beg, end, key);
    const std::uint64_t lo = buckets_[t0], hi = buckets_[t0 + 1];
    if (it == end || *it != key) {
        out = {hi, hi};  // absent (an empty range, as a search gives)
        return true;
    }
    const auto          j     = static_cast<std::size_t>(it - b.key);
    const std::uint64_t first = std::clamp<std::uint64_t>(b.start[j], lo, hi);
    out = {first, it + 1 == end ? hi : std::clamp<std::uint64_t>(b.start[j + 1], first, hi)};
    return true;
}

bool index_shard::has_bigram_table() const {
    return bigrams_ && bigrams_->ready.load(std::memory_order_acquire);
}

void index_shard::set_bigram_table(const std::uint32_t * section, std::uint64_t n_runs) {
    if (!bigrams_ || !section) return;
    bigrams & b = *bigrams_;
    b.first     = section;
    b.key       = section + n_buckets_;
    b.start     = b.key + n_runs;
    b.ready.store(true, std::memory_order_release);
}

void index_shard::build_bigrams(std::stop_token stop) const {
    if (!bigrams_ || bigrams_->ready.load(std::memory_order_acquire) || stop.stop_requested()) {
        return;
    }
    bigrams &                         b = *bigrams_;
    const std::lock_guard<std::mutex> lock(b.building);
    if (b.ready.load(std::memory_order_relaxed)) {
        return;  // built by another thread meanwhile
    }
    const char * text = static_cast<const char *>(text_);
    const bool   ok   = scan_bigrams(
        buckets_, n_buckets_, [this](std::uint64_t r) { return std::uint64_t(sa_[r]); },
        [this](std::uint64_t pos) { return key_at(pos + 1); },
        [&](std::uint64_t pos) {
            if (pos + 1 < n_) __builtin_prefetch(text + (pos + 1) * width_);
        },
        bigram_cap(n_sa_, n_buckets_), stop, b.owned);
    if (!ok) return;  // no table (stopped, or too large to be real text's): searches still work without it
    b.first = b.owned.first.data();
    b.key   = b.owned.key.data();
    b.start = b.owned.start.data();
    b.ready.store(true, std::memory_order_release);
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
        const std::uint64_t c1  = lo + (mid - lo) / 2, c2 = mid + 1 + (hi - mid - 1) / 2;
        __builtin_prefetch(sa + c1);
        __builtin_prefetch(sa + c2);
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
    // A large range at a depth the suffix samples cover goes by their rows, as find() does (the drafter extends a
    // short match over a frequent bigram's range at every token: the match's time per draft step fell 5-15% on
    // /usr/include and the 602M-token index, the per-step minimum of four runs, two A/B runs each; p99 within the
    // noise). find() reads the pattern from `depth` on only, so the prefix the range shares is left as zeros.
    if (rows_cover(r, depth)) {
        token_id pat[sample_tokens()] = {};
        pat[depth] = t;
        return find(r, depth, std::span<const token_id>(pat, depth + 1));
    }
    const std::uint64_t key = static_cast<std::uint64_t>(t) + 1;
    return equal_range(sa_, r.lo, r.hi, [&](std::uint64_t rank) {
        const std::uint64_t k = key_at(std::uint64_t(sa_[rank]) + depth);
        return k < key ? -1 : (k > key ? 1 : 0);
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
