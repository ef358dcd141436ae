#include "prediction-source.h"

#include "index/suffix-sort.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

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
    run_   = 0;
    far_   = false;
    std::fill(std::begin(run_hits_), std::end(run_hits_), 0);
    std::fill(std::begin(run_tokens_), std::end(run_tokens_), 0);
    if (prediction.empty()) {
        shard_ = index_shard{};
        return;
    }
    std::vector<token_id> text(prediction.begin(), prediction.end());
    token_id              t_max = 0;
    for (const token_id t : text) {
        if (t < 0) throw std::invalid_argument("prediction_source: negative token id " + std::to_string(t));
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
    const bool hit = s_ < L && static_cast<token_id>(pred_[(std::size_t) s_]) == t;
    hits_ += hit;
    run_hits_[run_class(run_)] += hit;
    ++run_tokens_[run_class(run_)];
    run_ = hit ? run_ + 1 : 0;
    if (hit && !far_) {
        // The occurrence being followed goes on: its match grows by one (to the cap), no suffix can be longer (the
        // longest before was m_, at this occurrence), and at distance 0 it is the choice. O(1): the incremental
        // match is left behind and redone from the output's end at the next mismatch.
        m_ = std::min(m_ + 1, n_match_max_);
        ++s_;
        match_.valid = false;
        return;
    }
    sa_match_update(shard_, match_, out_, match_.valid ? out_.size() - 1 : 0, n_match_max_);
    m_   = match_.len;
    far_ = false;
    if (m_ == 0) {
        s_ = std::min(s_ + 1, L);
        return;
    }
    // The occurrence whose continuation is nearest to where the text was expected to go on (ties: the later). A
    // single token counts only within k_near: its occurrences there are read directly (a common token may occur
    // thousands of times in a long prediction); a longer match's occurrences are few.
    const std::int64_t want = s_ + 1;
    std::int64_t       best = -1;
    if (m_ == 1) {
        for (std::int64_t d = 0; d <= k_near && best < 0; ++d) {
            for (const std::int64_t c : {want + d, want - d}) {  // the later first: ties go to it
                if (c >= 1 && c <= L && static_cast<token_id>(pred_[(std::size_t) (c - 1)]) == t) {
                    best = c;
                    break;
                }
            }
        }
        if (best < 0) {
            far_ = true;  // the longest match lies elsewhere: the next token must be matched in full, not followed
            m_   = 0;
            s_   = std::min(s_ + 1, L);
        } else {
            s_ = best;
        }
        return;
    }
    for (std::uint64_t r = match_.range.lo; r < match_.range.hi; ++r) {
        const auto c = static_cast<std::int64_t>(shard_.suffix(r)) + m_;
        if (best < 0 || std::llabs(c - want) < std::llabs(best - want) ||
            (std::llabs(c - want) == std::llabs(best - want) && c > best)) {
            best = c;
        }
    }
    s_ = best;
}

int prediction_source::run_class(std::int64_t run) {
    return run <= 0 ? 0 : std::min(k_runs - 1, (int) std::bit_width((std::uint64_t) run));
}

double prediction_source::conditional_score(std::int64_t run) const {
    // A caller sends a prediction because it expects the output to repeat it: until this request's tokens say
    // otherwise, trust it as if k_prior_hits of k_prior_hits + 1 tokens had been right (0.82 with the (1, 1) base).
    // With the plain (1, 1) prior alone an exact prediction started at 0.5 per token and lost the best path to the
    // datastore's drafts for its first 6-15 steps (stories260K, 106 requests of 128 tokens, one thread: M 6.03, now
    // 8.40).
    const double overall = (hits_ + k_prior_hits + 1.0) / ((double) out_.size() + k_prior_hits + 1 + 2.0);
    const int    c       = run_class(run);
    return (run_hits_[c] + 2.0 * overall) / (run_tokens_[c] + 2.0);
}

const cand_tree & prediction_source::draft(int n, cand_tree & out) const {
    out.nodes.clear();
    out.root_count = 1;
    out.n_probes   = 0;
    const auto   L     = static_cast<std::int64_t>(size());
    double score = 1.0;
    for (std::int64_t i = s_; i < L && i - s_ < n; ++i) {
        score *= conditional_score(run_ + (i - s_));
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
