#include "prediction-source.h"

#include "index/suffix-sort.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace rest {

prediction_source::prediction_source(int n_match_max) : n_match_max_(std::max(1, n_match_max)) {}

void prediction_source::reset(std::span<const token_id> prediction) {
    pred_.clear();
    sa_.clear();
    out_.clear();
    match_ = sa_match{};
    s_     = 0;
    m_     = 0;
    hits_  = 0;
    if (prediction.empty()) {
        shard_ = index_shard{};
        return;
    }
    std::vector<token_id> text(prediction.begin(), prediction.end());
    token_id              t_max = 0;
    for (token_id & t : text) {
        t     = std::max<token_id>(t, 0);  // a negative id is no token: it only has to sort somewhere
        t_max = std::max(t_max, t);
    }
    text.push_back(k_doc_end);
    sa_ = suffix_array(text, sort_width_for(static_cast<std::int64_t>(t_max) + 1));
    pred_.assign(text.begin(), text.end() - 1);
    pred_.push_back(0xFFFFFFFFu);
    shard_ = index_shard(pred_.data(), pred_.size(), sa_.data(), sa_.size(), 4);
}

void prediction_source::append(std::span<const token_id> tokens) {
    if (!active()) return;
    for (const token_id t : tokens) advance(t);
}

void prediction_source::advance(token_id t) {
    const auto L = static_cast<std::int64_t>(size());
    out_.push_back(t);
    if (s_ < L && static_cast<token_id>(pred_[(std::size_t) s_]) == t) {
        // The occurrence being followed goes on: its match grows by one (to the cap), no suffix can be longer (the
        // longest before was m_, at this occurrence), and at distance 0 it is the choice. O(1): the incremental
        // match is left behind and redone from the output's end at the next mismatch.
        ++hits_;
        m_ = std::min(m_ + 1, n_match_max_);
        ++s_;
        match_.valid = false;
        return;
    }
    sa_match_update(shard_, match_, out_, match_.valid ? out_.size() - 1 : 0, n_match_max_);
    m_ = match_.len;
    if (m_ == 0) {
        s_ = std::min(s_ + 1, L);
        return;
    }
    // The occurrence whose continuation is nearest to where the text was expected to go on (ties: the later).
    const std::int64_t want = s_ + 1;
    std::int64_t       best = -1;
    for (std::uint64_t r = match_.range.lo; r < match_.range.hi; ++r) {
        const auto c = static_cast<std::int64_t>(shard_.suffix(r)) + m_;
        if (best < 0 || std::llabs(c - want) < std::llabs(best - want) ||
            (std::llabs(c - want) == std::llabs(best - want) && c > best)) {
            best = c;
        }
    }
    s_ = best;
}

const cand_tree & prediction_source::draft(int n, cand_tree & out) const {
    out.nodes.clear();
    out.root_count = 1;
    out.n_probes   = 0;
    out.cut        = false;
    const auto   L     = static_cast<std::int64_t>(size());
    const double c     = conditional_score();
    double       score = 1.0;
    for (std::int64_t i = s_; i < L && i - s_ < n; ++i) {
        score *= c;
        cand_node node;
        node.token  = static_cast<token_id>(pred_[(std::size_t) i]);
        node.parent = static_cast<std::int32_t>(out.nodes.size()) - 1;
        node.depth  = static_cast<std::int32_t>(out.nodes.size()) + 1;
        node.count  = 1;
        node.score  = score;
        out.nodes.push_back(node);
    }
    return out;
}

}  // namespace rest
