#include "rest/datastore.h"

#include <algorithm>
#include <unordered_map>

namespace rest {

datastore_match find_all(const datastore & ds, std::span<const token_id> pattern) {
    datastore_match m;
    m.length = pattern.size();
    for (const index_shard & s : ds.shards()) {
        const sa_range r = s.find(pattern);
        m.ranges.push_back(r);
        m.count += r.size();
    }
    return m;
}

datastore_match find_longest_suffix(const datastore & ds, std::span<const token_id> context, std::size_t max_length) {
    std::size_t     lo = 0, hi = std::min(max_length, context.size());  // the answer lies in [lo, hi]
    datastore_match best;
    best.ranges.assign(ds.shards().size(), sa_range{});
    while (lo < hi) {
        const std::size_t len = lo + (hi - lo + 1) / 2;
        datastore_match   m   = find_all(ds, context.last(len));
        if (m.count > 0) {
            lo   = len;
            best = std::move(m);
        } else {
            hi = len - 1;
        }
    }
    return best;
}

std::vector<token_count> next_token_counts(const datastore & ds, const datastore_match & m, std::size_t limit) {
    std::unordered_map<token_id, std::uint64_t> counts;
    const auto shards = ds.shards();
    for (std::size_t i = 0; i < shards.size() && i < m.ranges.size(); ++i) {
        const index_shard & s = shards[i];
        const sa_range      r = m.ranges[i];
        const auto          depth = static_cast<std::uint32_t>(m.length);
        for (std::uint64_t rank = r.lo; rank < r.hi;) {
            const sa_range run = s.run_at(r, depth, rank);
            counts[s.next_token(rank, depth)] += run.size();
            rank = run.hi;
        }
    }
    std::vector<token_count> out;
    out.reserve(counts.size());
    for (const auto & [t, c] : counts) {
        out.push_back({t, c});
    }
    std::sort(out.begin(), out.end(), [](const token_count & a, const token_count & b) {
        return a.count != b.count ? a.count > b.count : a.token < b.token;
    });
    if (out.size() > limit) {
        out.resize(limit);
    }
    return out;
}

}  // namespace rest
