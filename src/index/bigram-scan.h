// The bigram table of a shard: for every first token, the runs of equal second tokens in its bucket of the suffix
// array. One scan, shared by the builder (which writes it into the index file) and index_shard::build_bigrams()
// (which computes it at open for a file without it), so both give the same table.
#pragma once

#include <cstdint>
#include <stop_token>
#include <vector>

namespace rest {

struct bigram_table {
    std::vector<std::uint32_t> first;  // [t0]: index of t0's first run; first[n_buckets - 1] = runs
    std::vector<std::uint32_t> key;    // each run's second-token key (key_at() truncated to 32 bits), ascending per t0
    std::vector<std::uint32_t> start;  // each run's first rank; it ends at the next run's, or at the bucket's end
};

// Real text has far fewer distinct bigrams than tokens (0.6% of Linux + /usr/include's, 2% of /usr/include's with
// a 32k vocabulary); a corrupt suffix array starts a run at nearly every rank. The cap bounds what such a file costs
// (2 bytes per token, or 48 KiB for a small shard); without a table searches still work.
inline std::uint64_t bigram_cap(std::uint64_t n_sa, std::uint64_t n_buckets) { return n_sa / 4 + n_buckets + 4096; }

// Scans ranks [0, buckets[n_buckets - 1]) by first-token bucket. sa_at(rank) gives a suffix's text position,
// key_after(pos) the sort key of the token after position pos, prefetch_after(pos) asks for it ahead (the reads are
// independent, so their misses overlap). Returns false, leaving `out` empty, once `stop` is requested (checked every
// 4,096 ranks) or the table passes `cap` runs.
template <class SaAt, class KeyAfter, class PrefetchAfter>
bool scan_bigrams(const std::uint32_t * buckets, std::uint64_t n_buckets, SaAt && sa_at, KeyAfter && key_after,
                  PrefetchAfter && prefetch_after, std::uint64_t cap, std::stop_token stop, bigram_table & out) {
    out = {};
    if (n_buckets == 0) return false;
    out.first.assign(n_buckets, 0);
    for (std::uint64_t t = 0; t + 1 < n_buckets; ++t) {
        out.first[t] = static_cast<std::uint32_t>(out.key.size());
        const std::uint64_t lo = buckets[t], hi = buckets[t + 1];
        std::uint64_t       prev = ~std::uint64_t(0);
        for (std::uint64_t r = lo; r < hi; ++r) {
            // Checked every 4,096 ranks (one bucket can hold 10% of the index, and at nice 19 next to busy cores the
            // background thread runs seldom): a datastore being closed waits for this.
            if (r % 4096 == 0 && (stop.stop_requested() || out.key.size() > cap)) {
                out = {};
                return false;
            }
            if (r + 16 < hi) prefetch_after(sa_at(r + 16));
            const std::uint32_t k = static_cast<std::uint32_t>(key_after(sa_at(r)));
            if (k != prev) {
                out.key.push_back(k);
                out.start.push_back(static_cast<std::uint32_t>(r));
                prev = k;
            }
        }
    }
    out.first[n_buckets - 1] = static_cast<std::uint32_t>(out.key.size());
    if (out.key.size() > cap) {
        out = {};
        return false;
    }
    out.key.shrink_to_fit();
    out.start.shrink_to_fit();
    return true;
}

}  // namespace rest
