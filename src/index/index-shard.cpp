#include "rest/index-shard.h"

#include "bigram-scan.h"
#include "first-rank.h"

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

namespace {

constexpr std::uint64_t k_sample_step = 32;   // ranks per sample
constexpr std::uint64_t k_sample_min  = 256;  // smaller buckets are searched directly

}  // namespace

struct index_shard::samples {
    explicit samples(std::size_t n) : once(n), buckets(n) {}
    std::vector<std::once_flag>             once;
    std::vector<bucket_samples>             buckets;
    // Token keys in `bits` bits each (0: past the end, t + 1: token t, key_max: separator), as many as fit in 128
    // bits: 12 tokens for a 512-token vocabulary, 8 for 32k, 7 for 150k. Twenty bytes per 32 suffixes with the
    // positions: a process that queries every bucket holds 0.63 B/token of samples.
    int           bits    = 0;
    std::uint64_t key_max = 0;
    std::size_t   n_keys  = 0;
};

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
    samples_ = nullptr;
    bigrams_ = buckets ? std::make_shared<bigrams>() : nullptr;
    if (buckets) {
        int bits = 1;
        while ((std::uint64_t(1) << bits) - 1 < n_buckets + 1) ++bits;  // key_max > n_vocab + 1 >= every t + 1
        if (bits <= 32) {  // at least four tokens per key
            samples_          = std::make_shared<samples>(n_buckets);
            samples_->bits    = bits;
            samples_->key_max = (std::uint64_t(1) << bits) - 1;
            samples_->n_keys  = std::min<std::size_t>(16, 128 / bits);
        }
    }
}

index_shard::sample_key index_shard::packed_next(std::uint64_t pos) const {
    const samples & s = *samples_;
    sample_key      v = 0;
    for (std::uint64_t d = 1; d <= s.n_keys; ++d) {
        const std::uint64_t k = key_at(pos + d);
        v = (v << s.bits) | (k == UINT64_MAX ? s.key_max : k);
    }
    return v;
}

const index_shard::bucket_samples * index_shard::bucket_sample(token_id t) const {
    if (!samples_ || t < 0 || static_cast<std::uint64_t>(t) + 1 >= n_buckets_) {
        return nullptr;
    }
    const std::uint64_t lo = buckets_[t], hi = buckets_[t + 1];
    if (hi - lo < k_sample_min) {
        return nullptr;
    }
    samples & s = *samples_;
    std::call_once(s.once[t], [&] {
        bucket_samples & b = s.buckets[t];
        b.keys.reserve((hi - lo + k_sample_step - 1) / k_sample_step);
        b.pos.reserve(b.keys.capacity());
        for (std::uint64_t r = lo; r < hi; r += k_sample_step) {
            b.pos.push_back(sa_[r]);
            b.keys.push_back(packed_next(sa_[r]));
        }
    });
    return &s.buckets[t];
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
sa_range equal_range(const std::uint32_t * sa, std::uint64_t lo, std::uint64_t hi, Cmp && cmp,
                     const void * text = nullptr, int width = 2) {
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        const std::uint64_t c1  = lo + (mid - lo) / 2, c2 = mid + 1 + (hi - mid - 1) / 2;
        __builtin_prefetch(sa + c1);
        __builtin_prefetch(sa + c2);
        if (text) {
            // Two levels ahead: the grandchildren's suffix-array entries, and the text of both children (their
            // entries came in a step ago), so the next probe's text read is a cache hit rather than a miss.
            // (Only where a grandchild range is non-empty: the unsigned arithmetic would wrap, which is UB for a
            // pointer even when only prefetched; the fuzzer's UBSan found it.)
            __builtin_prefetch(sa + lo + (c1 - lo) / 2);
            if (mid > c1) __builtin_prefetch(sa + c1 + 1 + (mid - c1 - 1) / 2);
            __builtin_prefetch(sa + mid + 1 + (c2 - mid - 1) / 2);
            if (hi > c2) __builtin_prefetch(sa + c2 + 1 + (hi - c2 - 1) / 2);
            const char * t = static_cast<const char *>(text);
            if (c1 < mid) __builtin_prefetch(t + (std::uint64_t(sa[c1]) + 1) * width);
            if (c2 < hi) __builtin_prefetch(t + (std::uint64_t(sa[c2]) + 1) * width);
        }
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
    sa_range r = narrow(full(), 0, pattern[0]);
    if (pattern.size() == 1 || r.empty()) {
        return r;
    }
    // The suffix at text position pos against the pattern from token d0 on (the tokens before agree). Where the
    // whole pattern's span lies in the text (almost always), one bound check for the span instead of one per token.
    auto cmp_at = [&](std::uint64_t pos, std::size_t d0) {
        const bool inside = pos < n_ && pattern.size() <= n_ - pos;
        for (std::size_t d = d0; d < pattern.size(); ++d) {
            const std::uint64_t k   = inside ? key_in(pos + d) : key_at(pos + d);
            const std::uint64_t key = static_cast<std::uint64_t>(pattern[d]) + 1;
            if (k != key) {
                return k < key ? -1 : 1;
            }
        }
        return 0;
    };
    auto              cmp     = [&](std::uint64_t rank) { return cmp_at(sa_[rank], 1); };
    const std::size_t n_keys  = samples_ ? samples_->n_keys : 0;
    auto              fits    = [&](token_id t) { return static_cast<std::uint64_t>(t) + 1 < samples_->key_max; };
    const bool        keyable = samples_ && std::all_of(pattern.begin() + 1,
                                                        pattern.begin() + std::min(pattern.size(), 1 + n_keys), fits);
    if (const bucket_samples * bs = keyable ? bucket_sample(pattern[0]) : nullptr) {
        // Bounds on the pattern's next n_keys tokens (missing ones as the smallest and largest keys): a suffix
        // agrees with the pattern that far exactly when its packed key lies in [low, high].
        const int  bits = samples_->bits;
        sample_key low = 0, high = 0;
        for (std::size_t d = 1; d <= n_keys; ++d) {
            const bool          have = d < pattern.size();
            const std::uint64_t k    = have ? static_cast<std::uint64_t>(pattern[d]) + 1 : 0;
            low  = (low << bits) | (have ? k : 0);
            high = (high << bits) | (have ? k : samples_->key_max);
        }
        // Sample j (rank lo + 32 j) against the whole pattern: by its key, and where the key agrees but the pattern
        // is longer, by the text past the key (one read at the sample's stored position, no suffix-array read).
        const bool          exact = pattern.size() <= 1 + n_keys;
        const std::uint64_t n_s   = bs->keys.size();
        auto cmp_sample = [&](std::uint64_t j) {
            const sample_key k = bs->keys[j];
            return k < low ? -1 : (k > high ? 1 : (exact ? 0 : cmp_at(bs->pos[j], 1 + n_keys)));
        };
        // Where samples are compared by text, the text of both possible next probes is fetched during this one.
        const char * text  = static_cast<const char *>(text_);
        auto         ahead = [&](std::uint64_t c1, std::uint64_t c2) {
            if (exact) return;
            for (const std::uint64_t c : {c1, c2}) {
                if (c < n_s) __builtin_prefetch(text + (std::uint64_t(bs->pos[c]) + 1 + n_keys) * width_);
            }
        };
        // The first search's probes also bound the second: a sample after the pattern caps it, a matching one
        // starts it past itself (the saving that matters for long, frequent patterns, whose probes read text).
        std::uint64_t up_lo = 0, up_hi = n_s;
        const std::uint64_t j_lo = first_rank(0, n_s, [&](std::uint64_t j) {
            const int c = cmp_sample(j);
            if (c > 0) up_hi = std::min(up_hi, j);
            if (c == 0) up_lo = std::max(up_lo, j + 1);
            return c >= 0;
        }, ahead);
        const std::uint64_t j_hi = first_rank(std::max(j_lo, up_lo), up_hi,
                                              [&](std::uint64_t j) { return cmp_sample(j) > 0; }, ahead);
        // Each bound lies between two neighbouring samples, so two searches of at most 31 ranks find them (instead
        // of one descent over every match).
        const std::uint64_t lo = r.lo, hi = r.hi;
        auto rank = [&](std::uint64_t j) { return std::min(hi, lo + j * k_sample_step); };
        const std::uint64_t a0 = j_lo == 0 ? lo : rank(j_lo - 1) + 1, a1 = rank(j_lo);
        const std::uint64_t e0 = j_hi == 0 ? lo : rank(j_hi - 1) + 1, e1 = rank(j_hi);
        // Each window's text lines are requested together, so its five dependent probes wait on about one memory
        // round trip instead of five.
        prefetch_text(a0, a1);
        if (e0 != a0) {
            prefetch_text(e0, e1);
        }
        const std::uint64_t a = first_rank(a0, a1, [&](std::uint64_t rk) { return cmp(rk) >= 0; });
        const std::uint64_t e = first_rank(e0, e1, [&](std::uint64_t rk) { return cmp(rk) > 0; });
        return {a, std::max(a, e)};
    }
    return equal_range(sa_, r.lo, r.hi, cmp, text_, width_);
}

void index_shard::prefetch_text(std::uint64_t lo, std::uint64_t hi) const {
    const char * t = static_cast<const char *>(text_);
    for (std::uint64_t r = lo; r < hi; ++r) {
        __builtin_prefetch(t + (std::uint64_t(sa_[r]) + 1) * width_);
    }
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
