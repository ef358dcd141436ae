#include "sa-backoff.h"

#include <algorithm>

#include <xxhash.h>

namespace rest {

void sa_backoff::set(std::span<const index_shard> shards, std::span<const sa_match> matches, int len,
                     std::span<const token_id> text, const backoff_params & p, std::span<sa_bigram_memo> memos) {
    if (shards.data() != shards_.data() || shards.size() != shards_.size() || p.scan_max != p_.scan_max) tops_.clear();
    shards_ = shards;
    p_      = p;
    levels_.clear();
    ranges_.clear();
    tally_.clear();
    if (len < std::max(p.n_min, 1) || shards.empty()) {
        return;
    }
    level top;
    top.len = len;
    for (std::size_t i = 0; i < shards.size(); ++i) {
        const sa_range r = matches[i].len == len ? matches[i].range : sa_range{};
        ranges_.push_back(r);
        top.count += r.size();
    }
    levels_.push_back(top);
    while (levels_.back().count < p.n_confident && static_cast<int>(levels_.size()) < p.n_levels_max) {
        const int k = std::max(p.n_min, levels_.back().len / 2);
        if (k >= levels_.back().len) {
            break;
        }
        level lv;
        lv.len = k;
        lv.at  = ranges_.size();
        for (std::size_t i = 0; i < shards.size(); ++i) {
            const sa_range r = sa_find(shards[i], text.last(static_cast<std::size_t>(k)), memos.empty() ? nullptr : &memos[i]);
            ranges_.push_back(r);
            lv.count += r.size();
        }
        levels_.push_back(lv);
    }
}

void sa_backoff::advance(token_id t) {
    tally_.clear();
    std::size_t n = 0;
    for (const level & lv0 : levels_) {
        level lv = lv0;
        lv.len++;
        lv.count   = 0;
        lv.tallied = false;
        for (std::size_t i = 0; i < shards_.size(); ++i) {
            sa_range & r = ranges_[lv.at + i];
            if (!r.empty()) {
                r = shards_[i].narrow(r, static_cast<std::uint32_t>(lv0.len), t);
            }
            lv.count += r.size();
        }
        if (lv.count > 0) {
            levels_[n++] = lv;
        }
    }
    levels_.resize(n);
}

const sa_backoff::level & sa_backoff::tally(const level & lv) const {
    if (lv.tallied) {
        return lv;
    }
    // One access per occurrence gives every next token at once.
    buf_.clear();
    for (std::size_t i = 0; i < shards_.size(); ++i) {
        const sa_range r = ranges_[lv.at + i];
        for (std::uint64_t rank = r.lo; rank < r.hi; ++rank) {
            const token_id t = shards_[i].next_token(rank, static_cast<std::uint32_t>(lv.len));
            if (t >= 0) buf_.push_back(t);
        }
    }
    std::sort(buf_.begin(), buf_.end());
    lv.tally_at = tally_.size();
    for (std::size_t a = 0; a < buf_.size();) {
        std::size_t b = a;
        while (b < buf_.size() && buf_[b] == buf_[a]) ++b;
        tally_.push_back({buf_[a], b - a});
        a = b;
    }
    lv.tally_n = tally_.size() - lv.tally_at;
    lv.tallied = true;
    return lv;
}

double sa_backoff::prob(token_id t) const {
    double prior = 0;
    for (std::size_t j = levels_.size(); j-- > 0;) {
        const level & lv = levels_[j];
        std::uint64_t c  = 0;
        if (lv.count <= p_.scan_max) {
            tally(lv);
            const auto b  = tally_.begin() + static_cast<std::ptrdiff_t>(lv.tally_at);
            const auto e  = b + static_cast<std::ptrdiff_t>(lv.tally_n);
            const auto it = std::lower_bound(b, e, t, [](const auto & x, token_id v) { return x.first < v; });
            c             = it != e && it->first == t ? it->second : 0;
            prior = (static_cast<double>(c) + p_.alpha * prior) / (static_cast<double>(lv.count) + p_.alpha);
            continue;
        }
        for (std::size_t i = 0; i < shards_.size(); ++i) {
            const sa_range r = ranges_[lv.at + i];
            if (!r.empty()) {
                c += shards_[i].narrow(r, static_cast<std::uint32_t>(lv.len), t).size();
            }
        }
        prior = (static_cast<double>(c) + p_.alpha * prior) / (static_cast<double>(lv.count) + p_.alpha);
    }
    return prior;
}

void sa_backoff::candidates(std::vector<token_id> & out, tree_expander & x) const {
    for (const level & lv : levels_) {
        if (lv.count <= p_.scan_max) {
            // Few occurrences: the most frequent of the counted next tokens.
            tally(lv);
            token_id      best = -1;
            std::uint64_t n    = 0;
            for (std::size_t k = lv.tally_at; k < lv.tally_at + lv.tally_n; ++k) {
                if (tally_[k].second > n) {
                    best = tally_[k].first;
                    n    = tally_[k].second;
                }
            }
            if (best >= 0 && std::find(out.begin(), out.end(), best) == out.end()) {
                out.push_back(best);
            }
            continue;
        }
        const token_id top = top_of(lv, x);
        if (top >= 0 && std::find(out.begin(), out.end(), top) == out.end()) {
            out.push_back(top);
        }
    }
}

token_id sa_backoff::top_of(const level & lv, tree_expander & x) const {
    const std::span<const sa_range> ranges(ranges_.data() + lv.at, shards_.size());
    const std::uint64_t             h =
        XXH3_64bits_withSeed(ranges.data(), ranges.size_bytes(), static_cast<std::uint64_t>(lv.len));
    if (const auto it = tops_.find(h);
        it != tops_.end() && it->second.len == lv.len &&
        std::equal(ranges.begin(), ranges.end(), it->second.ranges.begin(), it->second.ranges.end())) {
        return it->second.top;
    }
    expand_params ep;
    ep.n_top     = 1;
    ep.depth_max = 1;
    ep.scan_max  = p_.scan_max;
    roots_.clear();
    for (std::size_t i = 0; i < shards_.size(); ++i) {
        if (!ranges[i].empty()) {
            roots_.push_back({&shards_[i], ranges[i]});
        }
    }
    const cand_tree & t   = x.expand_sa(roots_, static_cast<std::uint32_t>(lv.len), ep);
    const token_id    top = t.nodes.empty() ? -1 : t.nodes[0].token;
    if (tops_.size() >= k_tops_max) tops_.clear();
    tops_[h] = top_entry{lv.len, {ranges.begin(), ranges.end()}, top};
    return top;
}

}  // namespace rest
