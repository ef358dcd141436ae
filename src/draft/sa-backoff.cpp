#include "sa-backoff.h"

#include <algorithm>

namespace rest {

void sa_backoff::set(std::span<const index_shard> shards, std::span<const sa_match> matches, int len,
                     std::span<const token_id> text, const backoff_params & p, std::span<sa_bigram_memo> memos) {
    shards_ = shards;
    p_      = p;
    levels_.clear();
    ranges_.clear();
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

double sa_backoff::prob(token_id t) const {
    double prior = 0;
    for (std::size_t j = levels_.size(); j-- > 0;) {
        const level & lv = levels_[j];
        std::uint64_t c  = 0;
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
    expand_params ep;
    ep.n_top     = 1;
    ep.depth_max = 1;
    ep.scan_max  = p_.scan_max;
    for (const level & lv : levels_) {
        roots_.clear();
        for (std::size_t i = 0; i < shards_.size(); ++i) {
            if (!ranges_[lv.at + i].empty()) {
                roots_.push_back({&shards_[i], ranges_[lv.at + i]});
            }
        }
        const cand_tree & t = x.expand_sa(roots_, static_cast<std::uint32_t>(lv.len), ep);
        if (!t.nodes.empty() && std::find(out.begin(), out.end(), t.nodes[0].token) == out.end()) {
            out.push_back(t.nodes[0].token);
        }
    }
}

}  // namespace rest
